"""Outputs are atomic: a writer that fails or is killed leaves the earlier file (or none), and a sweep's
worker processes end with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cli_runner import REPO

A100 = "a100-80gb-pcie"


# ---------------------------------------------------------------------- the helper
def test_atomic_path_keeps_the_earlier_file_when_the_writer_fails(tmp_path):
    from hwmodels.atomic_files import atomic_path

    path = tmp_path / "out.csv"
    path.write_text("earlier\n")
    with pytest.raises(RuntimeError), atomic_path(path) as temp:
        temp.write_text("half of the new")
        raise RuntimeError("killed")
    assert path.read_text() == "earlier\n"
    assert os.listdir(tmp_path) == ["out.csv"]                     # the temporary is gone too


def test_a_dead_writers_temporary_is_removed_by_the_next_write(tmp_path):
    from hwmodels.atomic_files import write_text

    path = tmp_path / "t.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".t.json.{int(dead.stdout)}-abcd.tmp"
    stale.write_text("partial")
    write_text(path, "{}")
    assert path.read_text() == "{}" and not stale.exists()


# ---------------------------------------------------------------------- every writer, failing half-way
def test_a_sweep_table_that_fails_while_written_leaves_the_earlier_one(tmp_path, monkeypatch, capsys):
    import pandas as pd

    from cli_runner import one_line_error

    out = tmp_path / "t.csv"
    out.write_text("earlier\n")
    def half(self, path, **kwargs):
        Path(path).write_text("model,platform\ntinyl")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half)
    one_line_error(capsys, "sweep", "--models", "tinyllama-1.1b", "--platforms", A100, "--methods", "ar",
                   "--no-progress", "--out", str(out), match="No space left on device")
    assert out.read_text() == "earlier\n"
    assert sorted(os.listdir(tmp_path)) == ["t.csv"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_trace_that_fails_while_written_leaves_the_earlier_one(tmp_path, monkeypatch, suffix):
    import json as json_module

    from hwmodels.errors import HetSpecError
    from sim import trace_files
    from sim.trace import TraceRecord
    from sim.trace_files import write_trace

    path = tmp_path / f"trace{suffix}"
    path.write_text("earlier")
    record = TraceRecord(step=0, phase="verify", device="gpu", start_s=0.0, end_s=1.0)

    def fail(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trace_files.csv, "DictWriter", fail)
    monkeypatch.setattr(json_module, "dumps", fail)
    with pytest.raises(HetSpecError, match="No space left"):
        write_trace([record], path)
    assert path.read_text() == "earlier"


def test_platform_and_acceptance_files_are_written_whole(tmp_path, monkeypatch):
    """The writers of platform files and acceptance profiles go through the atomic helper: a failure
    inside the final write leaves the earlier file."""
    from hwmodels import atomic_files
    from hwmodels.errors import HetSpecError
    from hwmodels.loader import get_platform, write_platform_file
    from sim.acceptance_profile import AcceptanceProfile

    platform_path, profile_path = tmp_path / "host.toml", tmp_path / "p.json"
    for p in (platform_path, profile_path):
        p.write_text("earlier")

    def no_rename(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic_files.os, "replace", no_rename)
    with pytest.raises(HetSpecError, match="Input/output error"):
        write_platform_file(get_platform(A100), platform_path)
    with pytest.raises(HetSpecError, match="Input/output error"):
        AcceptanceProfile(name="p", source="test").save(profile_path)
    assert platform_path.read_text() == "earlier" and profile_path.read_text() == "earlier"
    assert sorted(os.listdir(tmp_path)) == ["host.toml", "p.json"]


def test_reproduce_reports_are_written_whole(tmp_path, monkeypatch):
    from hwmodels import atomic_files
    from hwmodels.errors import HetSpecError
    from sim.reproduce.report import PaperReport

    out = tmp_path / "papers"
    out.mkdir()
    (out / "x.md").write_text("earlier")
    monkeypatch.setattr(atomic_files.os, "replace", lambda s, d: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(HetSpecError, match="I/O error"):
        PaperReport(paper="x", title="X", citation="X").write(out, "hetspec reproduce x")
    assert (out / "x.md").read_text() == "earlier"
    assert sorted(os.listdir(out)) == ["x.md"]


# ---------------------------------------------------------------------- a killed sweep (fault injection)
#: Runs ``hetspec sweep`` with a slowed phase: "work" sleeps 5 s in every problem (the workers are busy
#: when their parent dies), "write" writes part of the table and then hangs (the kill lands inside the write).
SLOWED_SWEEP = textwrap.dedent("""
    import sys, time
    import pandas as pd
    import sim.sweep as sweep
    phase = sys.argv[1]
    if phase == "work":
        rows = sweep._problem_rows
        sweep._problem_rows = lambda *a: (time.sleep(5), rows(*a))[1]
    else:
        def hang(self, path, **kw):
            with open(path, "w") as fh:
                fh.write(",".join(self.columns) + "\\n" + "partial")
                fh.flush()
            time.sleep(60)
        pd.DataFrame.to_csv = hang
    from hetspec.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _start_sweep(phase: str, out: Path, contexts: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", SLOWED_SWEEP, phase, "sweep", "--models", "tinyllama-1.1b",
                             "--platforms", A100, "--methods", "ar,medusa", "--acceptance", "medusa-log",
                             "--contexts", contexts, "--workers", "2", "--no-progress", "--out", str(out)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for(condition, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before the fault was injected: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the sweep never reached the point where the fault is injected")
        time.sleep(0.05)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads process children from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_sweep_leaves_no_workers_and_the_earlier_table(tmp_path, sig):
    out = tmp_path / "X.csv"
    out.write_text("earlier\n")
    proc = _start_sweep("work", out, "128-131")
    _wait_for(lambda: len([c for c in _children(proc.pid) if _alive(c)]) >= 2, proc)
    time.sleep(1.0)                                    # both workers are inside a problem
    workers = {c for c in _children(proc.pid) if _alive(c)}
    proc.send_signal(sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 2.0
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)], "sweep workers outlived their parent by more than 2 s"
    assert out.read_text() == "earlier\n"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads process children from /proc (Linux)")
@pytest.mark.parametrize("earlier", [True, False])
def test_a_sweep_killed_while_it_writes_leaves_the_earlier_table_or_none(tmp_path, earlier):
    out = tmp_path / "X.csv"
    if earlier:
        out.write_text("earlier\n")
    proc = _start_sweep("write", out, "256")
    _wait_for(lambda: any(tmp_path.glob(".X.csv.*.tmp")), proc)
    time.sleep(0.2)                                    # the partial rows are on disk
    proc.kill()
    proc.wait(timeout=30)
    if earlier:
        assert out.read_text() == "earlier\n"
    else:
        assert not out.exists()
