"""Sanity warnings: a model that does not fit the device's memory under the chosen placement (weights plus
the KV cache of the batch and context) is priced, and flagged on one stderr line."""

from __future__ import annotations

from hetspec.cli import main

A100 = "a100-80gb-pcie"


def test_a_step_whose_kv_cache_does_not_fit_is_flagged(capsys):
    assert main(["step", "--model", "vicuna-7b", "--platform", A100, "--tokens", "1", "--context", "1",
                 "--batch", "100000"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hetspec: warning: vicuna-7b needs 118.3 GB on gpu")
    assert "for batch 100000 x 2 positions) but it has 80 GB" in err[0]
    assert main(["step", "--model", "vicuna-7b", "--platform", A100, "--tokens", "1", "--context", "1"]) == 0
    assert capsys.readouterr().err == ""                          # one that fits says nothing


def test_the_warning_names_the_placement_it_checks():
    from hwmodels.loader import get_platform
    from sim.model_spec import get_model
    from sim.sanity import memory_warning

    platform = get_platform("apple-m2")
    model = get_model("llama2-70b")
    line = memory_warning(model, platform.device("gpu"), context=256, batch=1)
    assert line is not None and "llama2-70b needs" in line and "on gpu" in line
    assert memory_warning(get_model("tinyllama-1.1b"), platform.device("gpu"), context=256, batch=1) is None
