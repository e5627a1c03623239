"""variable_roles against a flag per (operation, variable) entry, worked out independently (same bools)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from popliner.analysis import analyse_profile
from popliner.memory.whatif import variable_roles
from popliner.ops.roles import called_operations, update_operations
from popliner.profile import load_profile
from tests.helpers import FIXTURES


def _by_flags(count: int, var_ptr: np.ndarray, var_idx: np.ndarray, always: np.ndarray, is_update: np.ndarray,
              is_backward: np.ndarray):
    """The former way: a flag per entry, variables used at all, variables used by any other operation; and the
    weights: always live, no state, used by an update and by a forward operation."""
    lens = np.diff(var_ptr)
    by_update = np.repeat(is_update, lens)
    used = np.zeros(count, bool)
    used[var_idx] = True
    by_other = np.zeros(count, bool)
    by_other[var_idx[~by_update]] = True
    state = always & used & ~by_other
    updated, forward = np.zeros(count, bool), np.zeros(count, bool)
    updated[var_idx[by_update]] = True
    forward[var_idx[np.repeat(~is_update & ~is_backward, lens)]] = True
    return state, always & ~state & updated & forward


def test_the_same_flags_on_random_tables():
    rng = np.random.default_rng(24)
    for _ in range(300):
        count, n = int(rng.integers(0, 40)), int(rng.integers(0, 12))
        lens = rng.integers(0, 6, n) if count else np.zeros(n, np.int64)
        var_ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
        var_idx = rng.integers(0, max(count, 1), int(var_ptr[-1])).astype(np.int64)
        always, is_update, is_backward = rng.random(count) < 0.7, rng.random(n) < 0.4, rng.random(n) < 0.4
        ops = SimpleNamespace(var_ptr=var_ptr, var_idx=var_idx)
        profile = SimpleNamespace(variables=SimpleNamespace(count=count))
        got = variable_roles(profile, ops, always, is_update, is_backward)  # type: ignore[arg-type]
        expected = _by_flags(count, var_ptr, var_idx, always, is_update, is_backward)
        assert all(g.dtype == bool and np.array_equal(g, e) for g, e in zip(got, expected, strict=True))


@pytest.mark.parametrize("name", ["bert-base-training.json.gz", "bert-tiny-training.json",
                                  "resnet-small-training.json.gz"])
def test_the_same_flags_on_training_profiles(name):
    a = analyse_profile(load_profile(FIXTURES / name))
    called = called_operations(a.profile, a.ops)
    is_update = update_operations(a.profile, a.ops, a.options.training.update_regex, called)
    always = a.profile.always_live_classes()[a.profile.variables.klass]
    got = variable_roles(a.profile, a.ops, always, is_update, a.is_backward)
    expected = _by_flags(a.profile.variables.count, a.ops.var_ptr, a.ops.var_idx, always, is_update, a.is_backward)
    assert all(np.array_equal(g, e) and g.any() for g, e in zip(got, expected, strict=True))  # some of each found
