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
