"""The command line's numbers and lists (sim.cli_numbers): a type, a range, no empty value and no
non-finite float; each bad value is one line naming the flag. In-process (milliseconds each)."""

from __future__ import annotations

import pytest

from cli_runner import one_line_error
from hetspec.cli import main

A100 = "a100-80gb-pcie"
AR = ("--model", "vicuna-7b", "--platform", A100, "--method", "ar")
MEDUSA = ("--model", "vicuna-7b", "--platform", A100, "--method", "medusa", "--acceptance", "medusa-log",
          "--device", "gpu")
ALSPEC = ("--model", "llama3.1-8b", "--platform", "tenstorrent-n150x8", "--method", "alspec",
          "--acceptance", "alspec-llama3.1-8b")


# ---------------------------------------------------------------------- seeds and counts
@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_a_seed_outside_its_range_is_one_line(capsys, seed):
    one_line_error(capsys, "simulate", *AR, "--seed", seed, match=f"--seed must be in [0, 4294967295] (got {seed})")


def test_run_refuses_a_negative_seed_before_loading_anything(capsys):
    one_line_error(capsys, "run", "--method", "ar", "--seed", "-1", match="--seed must be in [0, 4294967295]")


def test_simulate_refuses_steps_beyond_its_documented_cap(capsys):
    from sim.commands.simulate import MAX_STEPS, MAX_STEPS_PER_LAYER

    one_line_error(capsys, "simulate", *AR, "--steps", "100000000",
                   match=f"--steps must be in [1, {MAX_STEPS}] (got 100000000)")
    one_line_error(capsys, "simulate", *AR, "--steps", str(MAX_STEPS), "--per-layer",
                   match=f"--steps must be in [1, {MAX_STEPS_PER_LAYER}]")


def test_a_sweep_beyond_its_problem_cap_is_one_line(tmp_path, capsys):
    one_line_error(capsys, "sweep", "--models", "vicuna-7b", "--platforms", A100, "--methods", "ar",
                   "--contexts", "0-99999", "--batches", "1-2", "--no-progress", "--out", str(tmp_path / "t.csv"),
                   match="the sweep holds 200,000 problems")


def test_bench_refuses_repeats_beyond_its_bound_before_building_a_model(monkeypatch, capsys):
    from real.run import bench

    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: pytest.fail("built the model first"))
    for repeats in ("0", str(bench.MAX_REPEATS + 1)):
        one_line_error(capsys, "bench", "--repeats", repeats,
                       match=f"--repeats must be in [1, {bench.MAX_REPEATS}] (got {repeats})")


def test_run_compare_refuses_repeats_beyond_its_bound_before_loading_anything(monkeypatch, capsys):
    import real.run.commands as commands

    monkeypatch.setattr(commands, "resolve_preset", lambda args: pytest.fail("loaded the models first"))
    one_line_error(capsys, "run", "--compare", "ar,chain", "--repeats", "100000",
                   match=f"--repeats must be in [1, {commands.MAX_COMPARE_REPEATS}] (got 100000)")


def test_run_repeats_without_compare_is_refused_not_dropped(capsys):
    one_line_error(capsys, "run", "--method", "chain", "--repeats", "5",
                   match="--repeats 5 times the methods of --compare")


def test_bench_counts_every_timing_on_a_progress_bar(monkeypatch):
    """The bar's total is the run's timings, and it reaches it; it is drawn only on a terminal (disable=None)."""
    import tqdm as tqdm_module

    from real.model import random_models
    from real.run import bench
    from sim.model_spec import ModelSpec

    tiny = ModelSpec(name="random-tiny", n_layers=1, hidden=32, intermediate=64, n_heads=2, n_kv_heads=1, vocab=50,
                     dtype="fp32", max_position=128, tie_embeddings=True)
    monkeypatch.setitem(random_models.RANDOM_SHAPES, "random-tiny", tiny)
    monkeypatch.setattr(bench, "CPU_COPY_BYTES", 2**20)
    bars = []

    class Bar(tqdm_module.tqdm):
        def __init__(self, *a, **k):
            bars.append((k.get("disable"), self))
            self.ticks = 0
            super().__init__(*a, **{**k, "disable": True})

        def update(self, n=1):
            self.ticks += n

    monkeypatch.setattr(tqdm_module, "tqdm", Bar)
    bench.run_bench("random-tiny", device="cpu", tokens=(1, 2), context=8, repeats=3, decode=2, threads=1,
                    progress=True)
    (disable, bar), = bars
    assert disable is None
    assert bar.total == 3 * (2 + 1 + 1) and bar.ticks == bar.total      # 2 token counts, the copy probe, the decode


def test_bench_refuses_token_counts_beyond_its_help(capsys):
    one_line_error(capsys, "bench", "--tokens", "300", match="--tokens '300': token counts must be <= 256 (got 300)")


# ---------------------------------------------------------------------- empty values never mean the default
@pytest.mark.parametrize("flag", ["--tree-width", "--draft-depth", "--ratio", "--device", "--tree-shape"])
def test_an_empty_knob_is_one_line_not_the_default_search(capsys, flag):
    one_line_error(capsys, "predict", *MEDUSA[:-2], flag, "", match="is empty")


@pytest.mark.parametrize("flag", ["--models", "--methods", "--platforms", "--contexts", "--batches"])
def test_an_empty_sweep_list_is_one_line(tmp_path, capsys, flag):
    args = {"--models": "vicuna-7b", "--platforms": A100, "--methods": "ar", "--contexts": "256", "--batches": "1"}
    args[flag] = " , "
    flat = [x for kv in args.items() for x in kv]
    one_line_error(capsys, "sweep", *flat, "--no-progress", "--out", str(tmp_path / "t.csv"), match=f"{flag} is empty")


def test_an_empty_bench_token_list_is_one_line(capsys):
    one_line_error(capsys, "bench", "--tokens", "", match="--tokens is empty")


def test_a_list_that_would_expand_to_millions_is_one_line(capsys):
    one_line_error(capsys, "predict", *MEDUSA, "--tree-width", "1-100000000", match="more than 100,000 values")


# ---------------------------------------------------------------------- sampling
def test_temperature_inf_is_one_line(capsys):
    one_line_error(capsys, "run", "--method", "ar", "--temperature", "inf", match="temperature must be a finite number")


def test_top_p_under_greedy_decoding_is_one_line(capsys):
    from real.run.request import RunRequest

    one_line_error(capsys, "run", "--method", "chain", "--top-p", "0.9",
                   match="--top-p 0.9 has no effect under greedy decoding (--temperature 0)")
    assert RunRequest("ar", temperature=0.8, top_p=0.9).top_p == 0.9          # with sampling it is taken


# ---------------------------------------------------------------------- options: ranges
@pytest.mark.parametrize("option, match", [
    ("lam=-0.5", "--option lam=-0.5: must be a number >= 0"),
    ("lam=nan", "--option lam=nan: not a finite number"),
    ("window=0", "--option window=0: must be an integer >= 1"),
    ("hit_rate=1.5", "--option hit_rate=1.5: must be a number in [0, 1]"),
    ("sp=0.5", "--option sp=0.5: must be an integer in [0, 1]"),
    ("lam=", "--option expects KEY=VALUE with both given"),
])
def test_an_option_outside_its_range_is_refused_with_the_range(capsys, option, match):
    one_line_error(capsys, "predict", *ALSPEC, "--option", option, match=match)


def test_no_nan_speedup_where_ar_fits_no_single_device(capsys):
    assert main(["predict", *ALSPEC, "--option", "lam=0.2"]) == 0          # an option inside its range
    out = capsys.readouterr().out
    assert "nan" not in out and "ar fits no single device of tenstorrent-n150x8" in out


# ---------------------------------------------------------------------- knobs a method does not use
def test_run_compare_refuses_a_knob_neither_method_takes(capsys):
    one_line_error(capsys, "run", "--compare", "ar,chain", "--tree-width", "8",
                   match="--tree-width does not apply to any method compared (ar, chain)")


def test_run_compare_says_which_methods_run_without_a_knob(monkeypatch, capsys):
    import real.run.commands as commands

    monkeypatch.setattr(commands, "resolve_preset", lambda args: (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        main(["run", "--compare", "ar,chain", "--draft-depth", "2"])
    assert "hetspec: note: --draft-depth does not apply to ar: they run with their own defaults" in \
        capsys.readouterr().err


def test_a_sweep_option_some_methods_take_narrows_those_and_names_the_others(tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert main(["sweep", "--models", "llama3.1-8b", "--platforms", "tenstorrent-n150x8", "--methods", "ar,alspec",
                 "--acceptance", "alspec-llama3.1-8b", "--option", "lam=0.2", "--no-progress", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "hetspec: note: --option lam does not apply to ar: swept over their own search space" in err
    import pandas as pd

    table = pd.read_csv(out)
    assert set(table.loc[table["method"] == "alspec", "lam"]) == {0.2}
    assert table.loc[table["method"] != "alspec", "lam"].isna().all()


#: Every knob flag of the decode methods (sim.knobs.KNOBS), an --option and the simulator's tree file.
KNOB_FLAGS = ("--tree-width", "--width", "--draft-depth", "--gamma", "--partition-ratio", "--top-k", "--drafter",
              "--lambda", "--window", "--workers", "--memory-budget", "--tree", "--option", "--tree-choices")


def test_the_knob_flags_listed_are_every_knob():
    from sim.knobs import KNOBS

    assert {k.flag for k in KNOBS.values()} <= set(KNOB_FLAGS)


@pytest.mark.parametrize("command", ["validate", "demo"])
@pytest.mark.parametrize("knob", KNOB_FLAGS)
def test_validate_and_demo_take_no_knob_and_refuse_one(monkeypatch, capsys, command, knob):
    """validate and demo run their own fixed grid: a knob is not taken, so argparse refuses it (exit 2)
    before anything runs."""
    import real.validation.commands as commands

    for handler in ("handle_validate", "handle_demo"):
        monkeypatch.setattr(commands, handler, lambda args: pytest.fail("ran with a stray knob"))
    with pytest.raises(SystemExit) as exit_:
        main([command, knob, "8"])
    assert exit_.value.code == 2
    assert f"hetspec: error: unrecognized arguments: {knob} 8" in capsys.readouterr().err


# ---------------------------------------------------------------------- the helpers themselves
def test_check_int_refuses_bools_and_floats():
    from hwmodels.errors import HetSpecError
    from sim.cli_numbers import check_float, check_int

    for value in (True, 2.5, "3"):
        with pytest.raises(HetSpecError, match="must be an integer"):
            check_int(value, "--n", 1)
    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(HetSpecError, match="must be a finite number"):
            check_float(value, "--x")
