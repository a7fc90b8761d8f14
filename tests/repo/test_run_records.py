"""The committed run records (``reports/runs/``): one machine per folder, and an index that says so.

``reports/runs/INDEX.md`` must be exactly what ``hetspec reports index`` makes of the folders: adding or
removing a run folder without regenerating it fails here.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone

import pytest
from cli_runner import one_line_error
from paths import REPO

from hetspec.cli import main
from hwmodels.errors import HetSpecError
from sim.records import MACHINE_FILE, RESULTS_FILE, machine_facts, machine_slug, write_machine_json
from sim.records.index import INDEX_FILE, collect_runs, index_is_current, render_index

RUNS = REPO / "reports" / "runs"


def run_folders():
    return sorted(p for p in RUNS.iterdir() if p.is_dir())


def test_the_committed_index_is_what_the_folders_give():
    assert (RUNS / INDEX_FILE).read_text() == render_index(collect_runs(RUNS))
    assert main(["reports", "index", "--root", str(RUNS), "--check"]) == 0


@pytest.fixture
def runs_copy(tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(RUNS, root)
    assert index_is_current(root)
    return root


def test_a_run_folder_added_without_regenerating_the_index_fails_the_check(runs_copy, capsys):
    newest = run_folders()[-1]
    added = runs_copy / "2027-01-01-amd-epyc-validate"
    shutil.copytree(newest, added)
    machine = json.loads((added / MACHINE_FILE).read_text())
    machine["started"] = "2027-01-01T00:00:00+00:00"
    (added / MACHINE_FILE).write_text(json.dumps(machine))
    assert not index_is_current(runs_copy)
    assert main(["reports", "index", "--root", str(runs_copy), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["reports", "index", "--root", str(runs_copy)]) == 0
    assert index_is_current(runs_copy)
    assert "2027-01-01-amd-epyc-validate" in (runs_copy / INDEX_FILE).read_text()


def test_a_run_folder_removed_without_regenerating_the_index_fails_the_check(runs_copy):
    shutil.rmtree(runs_copy / run_folders()[0].name)
    assert not index_is_current(runs_copy)


@pytest.mark.parametrize("folder", run_folders(), ids=lambda p: p.name)
def test_every_run_folder_holds_the_runs_of_one_machine(folder):
    record = json.loads((folder / MACHINE_FILE).read_text())
    same = ("cpu", "cores", "gpu")
    for nested in folder.rglob(MACHINE_FILE):           # the runs a record gathers (a demo repeated, ...)
        machine = json.loads(nested.read_text())["machine"]
        assert {k: machine.get(k) for k in same} == {k: record["machine"].get(k) for k in same}, nested
    assert folder.name.startswith(record["started"][:10] + "-" + machine_slug(record["machine"]) + "-")
    results = json.loads((folder / RESULTS_FILE).read_text())
    assert results["record"]["verdict"] and results["record"]["headline"]


def test_a_run_folder_without_a_record_is_refused_naming_its_results(runs_copy, capsys):
    folder = runs_copy / run_folders()[0].name
    results = json.loads((folder / RESULTS_FILE).read_text())
    del results["record"]
    (folder / RESULTS_FILE).write_text(json.dumps(results))
    line = one_line_error(capsys, "reports", "index", "--root", str(runs_copy), match="no 'record' object")
    assert str(folder / RESULTS_FILE) in line


def test_a_folder_named_for_another_date_is_refused(runs_copy, capsys):
    folder = runs_copy / run_folders()[0].name
    folder.rename(runs_copy / ("1999-01-01" + folder.name[10:]))
    one_line_error(capsys, "reports", "index", "--root", str(runs_copy), match="must start with the run's date")


def test_machine_json_records_the_machine_the_command_and_the_times(tmp_path):
    start = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    path = write_machine_json(tmp_path / "run", command="hetspec validate --quick", started=start,
                              ended=start + timedelta(seconds=90), calibration={"platform": "host.toml"},
                              extra={"gpu": {"name": "NVIDIA H200"}})
    record = json.loads(path.read_text())
    assert record["command"] == "hetspec validate --quick"
    assert (record["started"], record["ended"]) == ("2026-01-02T03:04:05+00:00", "2026-01-02T03:05:35+00:00")
    facts = machine_facts()
    assert record["machine"]["cores"] == facts["cores"] and record["machine"]["python"] == facts["python"]
    assert record["machine"]["gpu"] == {"name": "NVIDIA H200"} and machine_slug(record["machine"]) == "nvidia-h200"
    assert record["calibration"] == {"platform": "host.toml"}
    assert not list(tmp_path.glob("run/.*.tmp"))
    with pytest.raises(HetSpecError, match="precedes the start"):
        write_machine_json(tmp_path, command="x", started=start, ended=start - timedelta(seconds=1))


@pytest.mark.parametrize("cpu, slug", [("AMD EPYC 7B13 64-Core Processor", "amd-epyc"),
                                        ("Intel(R) Xeon(R) CPU @ 2.20GHz", "intel-xeon"),
                                        ("Apple M2", "apple-m2")])
def test_machine_slugs_name_the_cpu_vendor_and_family(cpu, slug):
    assert machine_slug({"cpu": cpu, "gpu": None}) == slug


def test_cpuinfo_keeps_x86_flags_apart_from_arm_features():
    from sim.records.machine import _cpuinfo

    x86 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd0c\n"
    assert _cpuinfo(x86) == ("AMD EPYC 7B13", ["fpu", "avx2", "avx512f", "avx512_bf16"], [])
    assert _cpuinfo(arm) == ("", [], ["fp", "asimd", "sve"])
