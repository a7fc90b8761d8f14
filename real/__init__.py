"""The real PyTorch execution path: a Llama-style model, demo models trained on the Python
standard library, the decode methods, traces and the validation harness.

Importing ``real`` sets the OpenMP defaults below (a value already in the environment wins). OpenMP
reads them once, when torch starts it, so ``real`` (or ``hetspec``, which imports it) must be
imported before torch; every entry point here is.
"""

import os as _os

#: How torch's OpenMP threads wait between parallel operators (GNU libgomp, which the torch wheels
#: ship). ``PASSIVE`` alone makes a waiting thread sleep at once: on a busy machine the spinning
#: default made two-thread steps 3-12x slower (docs/decode-methods.md, "Threads and OpenMP"), but on
#: an idle virtual machine waking a sleeping vCPU costs ~130 us, paid by every multi-threaded
#: operator (a 2 x 64 by 64 product took 130-160 us on 2 threads vs 5 us on one). A bounded spin of
#: ``GOMP_SPINCOUNT`` iterations (libgomp applies it over the PASSIVE policy) bridges the few
#: microseconds between the operators of one forward and still sleeps when the wait is long.
OPENMP_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}


def apply_openmp_defaults() -> None:
    """Set :data:`OPENMP_DEFAULTS` where the environment does not set them already."""
    for key, value in OPENMP_DEFAULTS.items():
        _os.environ.setdefault(key, value)


def openmp_runtime() -> dict[str, str]:
    """The OpenMP settings this process runs with (``""``: unset, the runtime's default), for records."""
    return {"omp_wait_policy": _os.environ.get("OMP_WAIT_POLICY", ""),
            "gomp_spincount": _os.environ.get("GOMP_SPINCOUNT", ""),
            "omp_num_threads": _os.environ.get("OMP_NUM_THREADS", "")}


def openmp_label(runtime: dict | None = None) -> str:
    """``OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=10000`` for ``runtime`` (default: this process)."""
    runtime = openmp_runtime() if runtime is None else runtime
    policy = runtime.get("omp_wait_policy") or "unset"
    spin = runtime.get("gomp_spincount")
    return f"OMP_WAIT_POLICY={policy}" + (f", GOMP_SPINCOUNT={spin}" if spin else "")


apply_openmp_defaults()
