"""optimizer_state_variables against a flag per (operation, variable) entry, worked out independently (same bools)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from popliner.analysis import analyse_profile
from popliner.memory.whatif import optimizer_state_variables
from popliner.ops.roles import called_operations, update_operations
from popliner.profile import load_profile
from tests.helpers import FIXTURES


def _by_flags(count: int, var_ptr: np.ndarray, var_idx: np.ndarray, always: np.ndarray, is_update: np.ndarray):
    """The former way: a flag per entry, variables used at all, variables used by any other operation."""
    by_update = np.repeat(is_update, np.diff(var_ptr))
    used = np.zeros(count, bool)
    used[var_idx] = True
    by_other = np.zeros(count, bool)
    by_other[var_idx[~by_update]] = True
    return always & used & ~by_other


def test_the_same_flags_on_random_tables():
    rng = np.random.default_rng(24)
    for _ in range(300):
        count, n = int(rng.integers(0, 40)), int(rng.integers(0, 12))
        lens = rng.integers(0, 6, n) if count else np.zeros(n, np.int64)
        var_ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
        var_idx = rng.integers(0, max(count, 1), int(var_ptr[-1])).astype(np.int64)
        always, is_update = rng.random(count) < 0.7, rng.random(n) < 0.4
        ops = SimpleNamespace(var_ptr=var_ptr, var_idx=var_idx)
        profile = SimpleNamespace(variables=SimpleNamespace(count=count))
        got = optimizer_state_variables(profile, ops, always, is_update)  # type: ignore[arg-type]
        expected = _by_flags(count, var_ptr, var_idx, always, is_update)
        assert got.dtype == bool and np.array_equal(got, expected)


@pytest.mark.parametrize("name", ["bert-base-training.json.gz", "bert-tiny-training.json",
                                  "resnet-small-training.json.gz"])
def test_the_same_flags_on_training_profiles(name):
    a = analyse_profile(load_profile(FIXTURES / name))
    called = called_operations(a.profile, a.ops)
    is_update = update_operations(a.profile, a.ops, a.options.training.update_regex, called)
    always = a.profile.always_live_classes()[a.profile.variables.klass]
    got = optimizer_state_variables(a.profile, a.ops, always, is_update)
    expected = _by_flags(a.profile.variables.count, a.ops.var_ptr, a.ops.var_idx, always, is_update)
    assert np.array_equal(got, expected) and got.any()  # some state found: the test can tell them apart
