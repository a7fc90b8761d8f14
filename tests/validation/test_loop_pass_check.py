"""``python -m real.validation.loop_pass_check``: the draft-pass probe of a CPU profile beside the real chain decode."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_real_rounds_are_sorted_by_the_round_before_them(tiny_demo):
    """A decode whose draft agrees with the target on every token has only rounds after all accepted (every
    one of them drafting all its passes); one whose draft never agrees only rounds after a rejection."""
    from real.decode.common import DecodeModels
    from real.validation.draft_loop import PASSES, _lift
    from real.validation.loop_pass_check import KINDS, NEW_TOKENS, decode_passes

    models = DecodeModels(tiny_demo.target, tiny_demo.draft)
    prompt = list(range(1, 33))
    for draft_token, kind in ((1, KINDS[1]), (2, KINDS[0])):
        handles = [_lift(models.target, 1), _lift(models.draft, draft_token)]
        try:
            with torch.inference_mode():
                got = decode_passes(models, prompt)
        finally:
            for handle in handles:
                handle.remove()
        other = KINDS[1 - KINDS.index(kind)]
        assert got[other] == [] and got[kind]
        assert all(len(times) == PASSES and min(times) > 0 for times in got[kind])
        # every round but the first (after the prefill) and the last ones (too few tokens left to draft them all)
        assert len(got[kind]) == (NEW_TOKENS // (PASSES + 1) - 1 if kind == KINDS[1] else NEW_TOKENS - PASSES - 2)


def test_the_check_prints_both_kinds_side_by_side_and_refuses_bad_input(tiny_demo, capsys, tmp_path, monkeypatch):
    from real.train.demo import CACHE_ENV
    from real.validation.loop_pass_check import main

    assert main(["--preset", "tiny", "--rounds", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{tiny_demo.draft.spec.name} (1 torch thread) passes inside the chain decode loop")
    assert out[1].split() == [str(j) for j in range(1, 9)] + ["rounds"]
    rows = {line[:40].strip(): line[40:].split() for line in out[2:-1]}
    assert set(rows) <= {f"{who}, {kind}" for who in ("calibrate's probe", "real decode")
                         for kind in ("after a rejection", "after all accepted")}
    assert {"calibrate's probe, after a rejection", "calibrate's probe, after all accepted"} <= set(rows)
    assert all(len(v) == 9 and all(float(x) > 0 for x in v) for v in rows.values())
    assert out[-1].startswith("  real decode / probe (median over pass indices):")
    assert main(["--rounds", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert main(["--preset", "huge"]) == 2
    assert "unknown demo preset" in capsys.readouterr().err
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))               # nothing cached there: one line, what to run
    assert main(["--preset", "tiny", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hetspec train-demo --preset tiny" in err and "--train" in err
