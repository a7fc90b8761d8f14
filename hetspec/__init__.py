"""HetSpec command-line entry point (the packages are ``hwmodels``, ``sim`` and ``real``)."""

# Before torch loads OpenMP (no command imports torch at module level): importing ``real`` sets the
# project's OpenMP wait policy (real.OPENMP_DEFAULTS); a value the user sets wins.
import real as _real  # noqa: F401

__version__ = "0.1.0"
