"""Operation tables by hand: first users, update windows and variable sets, against walks over the operations."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from popliner.ops.operations import OperationTable


def _table(rng: np.random.Generator, count: int, num_variables: int) -> OperationTable:
    first_step = rng.integers(-1, 6, count)  # few steps: many ties; -1: the operation runs at no step
    lens = rng.integers(0, 9, count)
    var_ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    var_idx = rng.integers(0, num_variables, int(lens.sum())).astype(np.int64)  # repeats inside an operation too
    empty = np.zeros(0, np.int64)
    return OperationTable(
        names=tuple(f"op{i}" for i in range(count)), context=np.arange(count), op_type=("",) * count,
        inputs=((),) * count, is_call=np.zeros(count, bool), is_tensor=np.zeros(count, bool), first_step=first_step,
        last_step=first_step, prog_ptr=np.zeros(count + 1, np.int64), prog_idx=empty, var_ptr=var_ptr,
        var_idx=var_idx, op_of_program=empty, op_of_step=empty, unattributed_programs=0, reachable_programs=0,
        num_variables=num_variables,
    )


def _random_table(seed: int, least: int = 0) -> tuple[np.random.Generator, OperationTable]:
    """A table of ``least``..39 operations over 1..29 variables, and the generator that goes on from it."""
    rng = np.random.default_rng(seed)
    return rng, _table(rng, int(rng.integers(least, 40)), int(rng.integers(1, 30)))


def _walk(ops: OperationTable) -> list[int]:
    """Per variable, the user with the smallest (first step, index), by a plain walk."""
    best: list[tuple[int, int] | None] = [None] * ops.num_variables
    for op in range(ops.count):
        step = int(ops.first_step[op])
        if step < 0:
            continue
        for v in ops.vars_of(op).tolist():
            if best[v] is None or (step, op) < best[v]:
                best[v] = (step, op)
    return [-1 if b is None else b[1] for b in best]


@pytest.mark.parametrize("seed", range(20))
def test_first_user_against_a_walk(seed: int) -> None:
    rng, ops = _random_table(seed)
    got = ops.first_user
    assert got.dtype == np.int16  # the operations fit
    assert got.tolist() == _walk(ops)



@pytest.mark.parametrize("seed", range(20))
def test_update_window_against_a_walk(seed: int) -> None:
    """The first and last step of the updates that use each variable (the what-if's off-chip window)."""
    from popliner.memory import whatif

    rng, ops = _random_table(seed)
    last = np.where(ops.first_step < 0, -1, ops.first_step + rng.integers(0, 4, ops.count))
    ops = dataclasses.replace(ops, last_step=last)
    is_update = rng.random(ops.count) < 0.5
    lo, hi = whatif._update_window(ops, is_update, ops.num_variables, np.int32)
    expect_lo, expect_hi = [-1] * ops.num_variables, [-1] * ops.num_variables
    for op in range(ops.count):
        if not is_update[op] or ops.first_step[op] < 0:
            continue
        for v in ops.vars_of(op).tolist():
            first, last_step = int(ops.first_step[op]), int(ops.last_step[op])
            expect_lo[v] = first if expect_lo[v] < 0 else min(expect_lo[v], first)
            expect_hi[v] = max(expect_hi[v], last_step)
    assert lo.dtype == hi.dtype == np.int32
    assert lo.tolist() == expect_lo and hi.tolist() == expect_hi


@pytest.mark.parametrize("seed", range(20))
def test_vars_of_set_is_the_union(seed: int) -> None:
    rng, ops = _random_table(seed, least=1)
    picked = np.unique(rng.integers(0, ops.count, int(rng.integers(0, ops.count + 1))))
    got = ops.vars_of_set(picked)
    expect = sorted({v for op in picked.tolist() for v in ops.vars_of(op).tolist()})
    assert got.dtype == np.int64 and got.tolist() == expect
