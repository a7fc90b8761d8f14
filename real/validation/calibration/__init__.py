"""Calibration of this machine: the micro-benchmarks and probes of ``hetspec calibrate`` and the
``host`` platform built from them."""
