"""Workers (real/run/worker.py, real/hetero/workers.py): names, per-thread pinning and intra-op threads, the pair
barrier, worker threads."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from hwmodels.errors import HetSpecError
from real.hetero.workers import (
    BrokenBarrier,
    PairBarrier,
    WorkerSession,
    WorkerThread,
    barrier_round_trip_s,
    parse_workers,
    sequential_caller,
    team_helpers,
)
from real.run.worker import Worker, allowed_cores, get_worker, on_worker

CORES = allowed_cores()
two_cores = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
linux_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no per-thread affinity on this OS")


def test_worker_names():
    assert get_worker("cpu") == Worker("cpu", "cpu", len(CORES), ())
    w = get_worker(f"cpu{CORES[0]}")
    assert (w.device, w.threads) == ("cpu", 1)
    assert w.cores == ((CORES[0],) if hasattr(os, "sched_setaffinity") else ())
    assert [x.name for x in parse_workers(f"cpu, cpu{CORES[-1]}")] == ["cpu", f"cpu{CORES[-1]}"]


@pytest.mark.parametrize("text,message", [
    ("gpu0", "unknown worker 'gpu0'"),
    ("cpu999", "worker cpu999: core 999 is not one this process may use"),
    ("", "give worker names separated by commas"),
])
def test_bad_worker_names_are_one_line(text, message):
    with pytest.raises(HetSpecError) as err:
        parse_workers(text)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_worker_without_cuda_is_one_line():
    with pytest.raises(HetSpecError, match="no CUDA device"):
        get_worker("cuda:0")


def test_parse_workers_counts():
    with pytest.raises(HetSpecError, match="exactly 2 workers"):
        parse_workers("cpu", count=2)


@two_cores
@linux_affinity
def test_a_worker_thread_pins_itself_and_sets_its_own_threads_only():
    main_threads = torch.get_num_threads()
    main_mask = os.sched_getaffinity(0)
    thread = WorkerThread(get_worker(f"cpu{CORES[1]}"))
    try:
        seen = thread.call(lambda: (torch.get_num_threads(), os.sched_getaffinity(0)))
    finally:
        thread.close()
    assert seen == (1, {CORES[1]})
    assert torch.get_num_threads() == main_threads          # the caller's intra-op pool is untouched
    assert os.sched_getaffinity(0) == main_mask             # and so is its affinity
    assert thread.state.pinned


@two_cores
@linux_affinity
def test_an_all_core_worker_started_by_a_pinned_thread_gets_every_core():
    # workers cpu0,cpu: the calling thread is pinned to one core before the cpu worker's thread starts;
    # a thread inherits its creator's mask, and the cpu worker's intra-op threads ran on that one core
    before = os.sched_getaffinity(0)
    with WorkerSession(parse_workers(f"cpu{CORES[0]},cpu")) as session:
        assert os.sched_getaffinity(0) == {CORES[0]}
        seen = session.run(1, lambda: (torch.get_num_threads(), os.sched_getaffinity(0)))
    assert seen == (len(CORES), set(CORES))
    assert os.sched_getaffinity(0) == before


@linux_affinity
def test_on_worker_restores_the_caller():
    before = (torch.get_num_threads(), os.sched_getaffinity(0))
    with on_worker(get_worker(f"cpu{CORES[0]}")) as state:
        assert os.sched_getaffinity(0) == {CORES[0]} and torch.get_num_threads() == 1 and state.pinned
    assert (torch.get_num_threads(), os.sched_getaffinity(0)) == before


def test_pair_barrier_keeps_two_parties_in_step():
    barrier = PairBarrier()
    rounds = 300
    log: list[tuple[int, int]] = []

    def party(p: int) -> None:
        for r in range(rounds):
            log.append((r, p))
            barrier.wait(p)

    t = threading.Thread(target=party, args=(1,))
    t.start()
    party(0)
    t.join()
    # neither party starts round r+1 before both have arrived at round r
    for i in range(0, 2 * rounds, 2):
        assert {x[0] for x in log[i:i + 2]} == {i // 2}


def test_pair_barrier_abort_wakes_the_waiting_party():
    barrier = PairBarrier()
    errors = []

    def waiter() -> None:
        try:
            barrier.wait(1)
        except BrokenBarrier as exc:
            errors.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    barrier.abort()
    t.join(timeout=5)
    assert not t.is_alive() and len(errors) == 1


def test_worker_thread_returns_values_and_reraises_errors():
    thread = WorkerThread(get_worker("cpu"))
    try:
        assert thread.call(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            thread.call(lambda: 1 / 0)
        assert thread.call(torch.is_inference_mode_enabled)     # worker calls run in inference mode
        thread.submit(lambda: None)
        with pytest.raises(HetSpecError, match="still running"):
            thread.submit(lambda: None)
        thread.result()
    finally:
        thread.close()


@two_cores
def test_session_runs_each_worker_on_its_executor():
    a, b = parse_workers(f"cpu{CORES[0]},cpu{CORES[1]}")
    with WorkerSession((a, b, a)) as session:
        assert session.on_caller(0) and not session.on_caller(1) and session.on_caller(2)
        caller = threading.get_ident()
        assert session.run(0, threading.get_ident) == caller
        assert session.run(1, threading.get_ident) != caller
        assert session.run(2, threading.get_ident) == caller     # the same worker twice: one executor


@two_cores
def test_a_session_runs_the_caller_it_is_given_on_the_calling_thread():
    a, b = parse_workers(f"cpu{CORES[0]},cpu{CORES[1]}")
    caller = threading.get_ident()
    with WorkerSession((a, b), caller=1) as session:
        assert session.on_caller(1) and not session.on_caller(0)
        assert session.run(1, threading.get_ident) == caller
        assert session.run(0, threading.get_ident) != caller
        assert session.run(1, lambda: os.sched_getaffinity(0)) == ({CORES[1]} if hasattr(os, "sched_setaffinity")
                                                                   else set(os.sched_getaffinity(0)))
    with pytest.raises(HetSpecError, match="^a worker session of 2 workers has no worker 2$"):
        WorkerSession((a, b), caller=2)


def test_turn_taking_sessions_run_the_all_core_worker_on_the_calling_thread():
    one = get_worker(f"cpu{CORES[0]}")
    every = get_worker("cpu")
    assert sequential_caller((one, every)) == (1 if len(CORES) > 1 else 0)
    assert sequential_caller((every, one)) == 0
    assert sequential_caller((one, one)) == 0
    assert sequential_caller((Worker("cuda:0", "cuda:0", None), every)) == (1 if len(CORES) > 1 else 0)


def test_dovetail_drafting_on_one_core_and_verifying_on_every_core_verifies_on_the_calling_thread():
    from types import SimpleNamespace

    from real.hetero.dovetail import DovetailConfig, DovetailRuntime
    from real.model.random_models import random_transformer
    from sim.model_spec import ModelSpec

    spec = ModelSpec(name="t", n_layers=1, hidden=32, intermediate=64, n_heads=2, n_kv_heads=1, vocab=64,
                     dtype="fp32", max_position=64)
    # the runtime only places the models
    models = SimpleNamespace(target=random_transformer(spec), draft=random_transformer(spec, seed=1))

    with DovetailRuntime(models, DovetailConfig(workers=(f"cpu{CORES[0]}", "cpu"))) as rt:
        assert rt.session.on_caller(1) == (len(CORES) > 1)
        assert rt.session.run(1, threading.get_ident) == threading.get_ident()
        if len(CORES) > 1 and hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task"):
            assert rt.session.binding is not None        # the verifier's team: one thread a core
            assert os.sched_getaffinity(0) == {CORES[-1]}


@two_cores
@linux_affinity
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="no /proc")
def test_a_bound_session_pins_the_callers_team_one_thread_a_core_and_gives_the_masks_back():
    every = get_worker("cpu")
    before = os.sched_getaffinity(0)
    with WorkerSession((every, get_worker(f"cpu{CORES[0]}")), bind=True) as session:
        binding = session.binding
        assert binding is not None and binding.caller_core == CORES[-1]
        assert os.sched_getaffinity(0) == {CORES[-1]}
        assert len(binding.helpers) == len(CORES) - 1
        assert [core for _, core in binding.helpers] == list(CORES[:-1])
        for tid, core in binding.helpers:
            assert tid != threading.get_native_id()
            assert os.sched_getaffinity(tid) == {core}
        helper_masks = {tid: set(mask) for tid, mask in binding.previous if tid}
    assert os.sched_getaffinity(0) == before
    for tid, mask in helper_masks.items():
        assert os.sched_getaffinity(tid) == mask
    with WorkerSession((every,)) as session:                  # unbound unless asked
        assert session.binding is None


def test_team_helpers_of_a_one_thread_team_are_none():
    assert team_helpers(1) == ()


@two_cores
def test_barrier_round_trip_is_measured():
    seconds = barrier_round_trip_s(parse_workers(f"cpu{CORES[0]},cpu{CORES[1]}"), rounds=50, warmup=5)
    assert 0.0 < seconds < 0.5


def test_the_binding_bench_refuses_bad_counts_in_one_line(capsys):
    from real.hetero.binding_bench import main

    assert main(["--repeats", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --repeats, --prompts and --max-new-tokens must be at least 1"]


def test_a_dovetail_config_binds_the_team_unless_told_not_to():
    from real.hetero.dovetail import DovetailConfig

    assert DovetailConfig().bind_team and not DovetailConfig(bind_team=False).bind_team
