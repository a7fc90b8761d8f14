"""Worker processes that end with their parent, however the parent ends (an exception, SIGTERM, SIGKILL).

A ``multiprocessing`` pool's workers block on their task queue, whose pipe every sibling holds open: a
parent killed by a signal never closes it, and the workers would wait forever (or die later on a broken
pipe). :func:`die_with_parent`, run as the pool's initializer, ends a worker within
:data:`POLL_S` of its parent: on Linux the kernel sends it SIGKILL at once (``PR_SET_PDEATHSIG``), and
everywhere a daemon thread sees the parent's pid change (the worker is re-parented) and exits.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: Seconds between two looks at the parent's pid (a worker outlives its parent by at most this).
POLL_S = 0.2
#: ``prctl`` option that asks for a signal when the parent dies (Linux ``<sys/prctl.h>``).
PR_SET_PDEATHSIG = 1


def _kernel_death_signal() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _watch(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)          # no clean-up: the parent that would collect the results is gone
        time.sleep(POLL_S)


def die_with_parent(parent: int) -> None:
    """Make this process (a pool worker) end when process ``parent`` does; ``parent`` is the pid of the
    process that started the pool (passed in: by the time this runs, it may already be gone)."""
    _kernel_death_signal()
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="die-with-parent", daemon=True).start()
