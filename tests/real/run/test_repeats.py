"""The measurement protocol: interleaved repeats in rotated order, in this process or one process per repeat."""

from __future__ import annotations

import os

import pytest

from hwmodels.errors import HetSpecError
from real.run.repeat_processes import interleaved_repeats
from real.run.repeats import interleaved, rotation


def test_rotation_starts_where_told_and_wraps():
    assert rotation(4, 0) == [0, 1, 2, 3] and rotation(4, 1) == [1, 2, 3, 0] and rotation(3, 5) == [2, 0, 1]


def test_interleaved_visits_items_in_rotated_order():
    order = []
    out = interleaved(3, 2, lambda i, rep, j: order.append((rep, i)) or (i, rep))
    assert order == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (1, 0)]
    assert out == [[[(0, 0)], [(0, 1)]], [[(1, 0)], [(1, 1)]], [[(2, 0)], [(2, 1)]]]


def _where(payload, item: int, rep: int, first: bool):
    """A measurement that says which process took it (module level: pickled into the process by name)."""
    import torch

    return payload, item, rep, os.getpid(), torch.get_num_threads(), first


def _fails(payload, item: int, rep: int, first: bool):
    raise ValueError("no such thing\nsecond line")


@pytest.mark.slow
def test_each_repeat_runs_in_a_process_of_its_own():
    ticks = []
    out = interleaved_repeats(2, 3, _where, "payload", tick=lambda: ticks.append(1), fresh_processes=True, threads=1)
    assert len(ticks) == 6
    assert [[(p, i, r) for p, i, r, *_ in row] for row in out] == [
        [("payload", i, r) for r in range(3)] for i in range(2)]
    pids = [{row[r][3] for row in out} for r in range(3)]
    assert all(len(p) == 1 for p in pids)                         # a repeat's items share its process
    assert len(set.union(*pids)) == 3 and os.getpid() not in set.union(*pids)
    assert {row[r][4] for row in out for r in range(3)} == {1}    # the thread count it was given
    assert all(row[r][5] for row in out for r in range(3))        # every item new to its process: warm up


def test_in_this_process_only_the_first_repeat_warms_up():
    out = interleaved_repeats(2, 3, _where, None)
    assert {row[0][3] for row in out} == {os.getpid()}
    assert [[first for *_, first in row] for row in out] == [[True, False, False]] * 2


def test_a_failure_in_a_repeats_process_is_one_line():
    with pytest.raises(HetSpecError, match=r"^repeat 1, in its own process: ValueError: no such thing$"):
        interleaved_repeats(1, 2, _fails, None, fresh_processes=True)


@pytest.mark.parametrize("n, repeats", [(0, 1), (2, 0)])
def test_nothing_to_measure_is_refused(n, repeats):
    with pytest.raises(HetSpecError):
        interleaved_repeats(n, repeats, _where, None, fresh_processes=True)


def test_paired_blocks_time_each_item_beside_the_baseline_in_alternating_order():
    from real.run.repeats import paired_blocks

    order = []
    own, paired = paired_blocks(3, 0, 2, lambda i, part, first: order.append((i, first)) or len(order))
    # repeat 1: items 1, 2; repeat 2 rotated: 2, 1; the baseline first, then second, block by block
    assert [i for i, _ in order] == [0, 1, 2, 0, 0, 2, 1, 0]
    assert [first for _, first in order] == [True, True, True, False, False, False, False, False]
    assert own[1] == [[2], [7]] and paired[1] == [[1], [8]]      # each item's runs and the baseline's of its blocks
    assert own[2] == [[3], [6]] and paired[2] == [[4], [5]]
    assert own[0] == paired[0] == [[1], [4], [5], [8]]           # the baseline's every block, in order


def test_a_block_is_one_pair_per_part_alternating_which_runs_first():
    from real.run.repeats import paired_blocks

    order = []
    own, paired = paired_blocks(2, 0, 2, lambda i, part, first: order.append((i, part)) or len(order), parts=3)
    # block 1: parts 0, 1, 2 with the baseline first, second, first; block 2 starts with the item first
    assert order == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2),
                     (1, 0), (0, 0), (0, 1), (1, 1), (1, 2), (0, 2)]
    assert own[1] == [[2, 3, 6], [7, 10, 11]] and paired[1] == [[1, 4, 5], [8, 9, 12]]
    assert own[0] == paired[0] == paired[1]
    with pytest.raises(HetSpecError, match="parts"):
        paired_blocks(2, 0, 1, lambda i, part, first: 0, parts=0)


def test_paired_blocks_of_the_baseline_alone_are_its_repeats_and_a_bad_baseline_is_refused():
    from real.run.repeats import paired_blocks

    own, paired = paired_blocks(1, 0, 3, lambda i, part, first: first)
    assert own == paired == [[[True], [False], [False]]]
    with pytest.raises(HetSpecError, match="baseline 2"):
        paired_blocks(2, 2, 1, lambda i, part, first: 0)


def test_paired_blocks_take_further_repeats_while_asked_up_to_the_most():
    from real.run.repeats import paired_blocks

    asked = []

    def more(done, own, paired):
        asked.append((done, len(own[1])))
        return done < 4                        # a fifth repeat is not asked for

    own, _ = paired_blocks(2, 0, 2, lambda i, part, first: 0, max_repeats=6, more=more)
    assert len(own[1]) == 4 and asked == [(1, 1), (2, 2), (3, 3), (4, 4)]
    own, _ = paired_blocks(2, 0, 2, lambda i, part, first: 0, max_repeats=3, more=lambda *a: True)
    assert len(own[1]) == 3                    # never past the most
    own, _ = paired_blocks(2, 0, 2, lambda i, part, first: 0, max_repeats=6, more=lambda *a: False)
    assert len(own[1]) == 2                    # never under the least
    with pytest.raises(HetSpecError, match="fewer than the least"):
        paired_blocks(2, 0, 3, lambda i, part, first: 0, max_repeats=2)
