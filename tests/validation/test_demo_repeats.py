"""The main job's acceptance run (``python -m real.validation.demo_repeats``): how its runs are judged."""

from __future__ import annotations

from real.validation.demo_repeats import SAME_WITHIN, agreement, report, summarize


def run(index, medusa_best, medusa_top, status=0, wall=200.0):
    def pred(method, best, top):
        return {"method": method, "tree_width": best[0], "draft_depth": best[1], "tokens_per_s": top[0][2],
                "top": [{"tree_width": w, "draft_depth": d, "tokens_per_s": t} for w, d, t in top]}
    return {"run": index, "exit_status": status, "wall_s": wall, "busy_core": False,
            "predictions": [pred("ar", (1, 0), [(1, 0, 100.0)]), pred("chain", (1, 5), [(1, 5, 180.0)]),
                            pred("draft-tree", (8, 4), [(8, 4, 190.0)]), pred("medusa", medusa_best, medusa_top)],
            "record": {"verdict": "roofline: chain speedup error 3 %"}}


def test_the_same_best_everywhere_agrees():
    rows = [run(i, (8, 4), [(8, 4, 300.0), (16, 4, 290.0)]) for i in (1, 2)]
    assert all(a["agrees"] for a in agreement(rows).values())


def test_different_bests_agree_only_when_each_run_predicts_the_other_within_the_margin():
    close = (1 - SAME_WITHIN / 2) * 300.0
    a = run(1, (8, 4), [(8, 4, 300.0), (16, 4, close)])
    b = run(2, (16, 4), [(16, 4, 300.0), (8, 4, close)])
    assert agreement([a, b])["medusa"] == {"bests": [[8, 4], [16, 4]], "agrees": True}
    far = run(2, (16, 4), [(16, 4, 300.0), (8, 4, (1 - 2 * SAME_WITHIN) * 300.0)])
    assert not agreement([a, far])["medusa"]["agrees"]
    unranked = run(2, (16, 4), [(16, 4, 300.0)])                   # the other's best not among its kept rows
    assert not agreement([a, unranked])["medusa"]["agrees"]


def test_the_record_counts_exits_and_the_wall_bound_and_names_what_differs():
    rows = [run(1, (8, 4), [(8, 4, 300.0)]), run(2, (8, 4), [(8, 4, 300.0)], wall=400.0),
            run(3, (32, 4), [(32, 4, 300.0)], status=None, wall=900.0)]
    doc = summarize(rows, busy=False)
    head = doc["record"]["headline"]
    assert (head["runs"], head["exit 0"], head["within 360 s"]) == (3, 2, 1)
    assert head["medusa best agrees"] is False and head["chain best agrees"] is True
    assert doc["record"]["verdict"] == "2 of 3 runs exited 0, 1 within 360 s; predicted best differs for medusa"
    assert "| 3 | None | 900 |" in report(doc, "python -m real.validation.demo_repeats --runs 3")
    assert summarize(rows, busy=True)["record"]["headline"]["within 540 s"] == 2      # runs that exited 0
