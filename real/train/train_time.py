"""How long training each demo preset takes, as help texts and prompts quote it (torch-free, so
the command modules can quote it in ``--help``).

Measured with ``HETSPEC_CACHE_DIR=$(mktemp -d) hetspec train-demo --preset P`` on the 2-core
development machine (docs/demo-models.md): ``tiny`` 41 s, and 58.5 s wall (53 s of training, 39 s
of CPU time) under a load average of 3-4 from other jobs, 2026-11-23; ``small`` 15.5 min on the
idle machine and 29.8 min under a load average of 3.5. On a machine far busier than its cores,
OpenMP's spin-waiting can make it several times slower (a tiny run at a load rising to 4.7 took
4 min, 172 s of CPU time). A CPU without native bf16 trains in fp32: on an AVX-512 Xeon of that
kind the small target ran at 1.1-1.2 s per step, about 46 minutes for its 2400 steps (2026-11-27).
"""

from __future__ import annotations

TRAIN_TIME = {"tiny": "under a minute on two cores",
              "small": "15-30 minutes on two cores with native bf16, over 45 without"}

#: Presets a command-line run trains without asking (the others need consent, or ``--train``).
QUICK_PRESETS = ("tiny",)
