"""HetSpec command-line entry point (the packages are ``hwmodels``, ``sim`` and ``real``)."""

import os as _os

__version__ = "0.1.0"

# Before torch loads OpenMP (no command imports torch at module level): idle OpenMP threads sleep
# instead of spin-waiting. On a busy machine the spinning default made two-thread steps 3-12x slower
# (docs/decode-methods.md, "Threads and OpenMP"); a value the user sets wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
