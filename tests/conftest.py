"""Shared fixtures.

``tiny_demo``: the ``tiny`` demo models (target, draft, Medusa heads, tokenizer), trained once
per test session into a session cache folder (``HETSPEC_CACHE_DIR`` points there for the whole
session). Set ``HETSPEC_TEST_CACHE_DIR`` to a folder of your own to keep that cache between
runs while developing; CI leaves it unset and trains from scratch (about a minute on 2 cores).
"""

from __future__ import annotations

import os

import pytest

TEST_CACHE_ENV = "HETSPEC_TEST_CACHE_DIR"
#: Torch intra-op threads of the whole suite (and of the CLI subprocesses it starts): the suite's
#: time must not grow with the machine's core count (a 16-core CUDA host would otherwise run every
#: tiny operator on 16 OpenMP threads). Modules that time things use one thread (``one_torch_thread``).
TEST_THREADS = 2
# Before torch loads OpenMP: the project's wait policy (real.OPENMP_DEFAULTS), which CLI subprocesses
# inherit with the thread count.
import real  # noqa: E402,F401
os.environ.setdefault("OMP_NUM_THREADS", str(TEST_THREADS))


@pytest.fixture(scope="session", autouse=True)
def pinned_torch_threads():
    """Every test runs with at most :data:`TEST_THREADS` intra-op threads and one inter-op thread."""
    import torch

    torch.set_num_threads(min(TEST_THREADS, os.cpu_count() or 1))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:      # only allowed before the first inter-op parallel work of the process
        pass
    yield


@pytest.fixture(scope="session")
def demo_cache_dir(tmp_path_factory):
    """The session's demo cache root, exported as ``HETSPEC_CACHE_DIR`` while the session runs."""
    from real.train.demo import CACHE_ENV

    folder = os.environ.get(TEST_CACHE_ENV) or str(tmp_path_factory.mktemp("hetspec-cache"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, folder)
        yield folder


@pytest.fixture(scope="session")
def tiny_demo(demo_cache_dir):
    """``load_demo("tiny")`` from the session cache (trained on first use)."""
    from real.train.demo import load_demo

    return load_demo("tiny", progress=False)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread on the calling thread for a module (workers set their own): on a loaded
    2-core machine every multi-threaded operator waits for a descheduled thread (milliseconds per
    op); results do not depend on the thread count. Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
