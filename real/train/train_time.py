"""How long training each demo preset takes, as help texts and prompts quote it (torch-free, so
the command modules can quote it in ``--help``).

Measured with ``HETSPEC_CACHE_DIR=$(mktemp -d) hetspec train-demo --preset P`` on a 2-core
machine (docs/demo-models.md): ``tiny`` takes under a minute, ``small`` 15-30 minutes depending on
the load from other jobs. On a machine far busier than its cores, OpenMP's spin-waiting can make it
several times slower. A CPU without native bf16 trains in fp32, and the small target's 2400 steps
then take over 45 minutes on an AVX-512 Xeon. ``smollm2`` trains no target (SmolLM2-135M is pretrained)
and runs in fp32; its steps were sized from one-thread step times on that Xeon (docs/demo-models.md):
about 34 minutes at one thread's speed, less on two idle cores.
"""

from __future__ import annotations

TRAIN_TIME = {"tiny": "under a minute on two cores",
              "small": "15-30 minutes on two cores with native bf16, over 45 without",
              "smollm2": "about 35 minutes on two cores in fp32 (no native bf16 needed)"}

#: Presets a command-line run trains without asking (the others need consent, or ``--train``).
QUICK_PRESETS = ("tiny",)
