"""How long training each demo preset takes, as help texts and prompts quote it (torch-free, so
the command modules can quote it in ``--help``).

Measured with ``HETSPEC_CACHE_DIR=$(mktemp -d) hetspec train-demo --preset P`` on the 2-core
development machine: ``tiny`` 41-46 s wall while other jobs shared the cores, ``small`` 15.5 min on
the idle machine and 29.8 min under a load average of 3.5 (docs/demo-models.md).
"""

from __future__ import annotations

TRAIN_TIME = {"tiny": "under a minute on two cores", "small": "15-30 minutes on two cores"}

#: Presets a command-line run trains without asking (the others need consent, or ``--train``).
QUICK_PRESETS = ("tiny",)
