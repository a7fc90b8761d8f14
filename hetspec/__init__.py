"""HetSpec command-line entry point (the packages are ``hwmodels``, ``sim`` and ``real``)."""

__version__ = "0.1.0"
