"""The part an operation plays in a training step: call site, weight update, recompute clone, backward.

Found from names and the program tree alone, before any memory figure: the
head grouping (:mod:`popliner.ops.head`) and the training view
(:mod:`popliner.memory.training`) both read them.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from popliner.arrays import content_key
from popliner.ops.operations import OperationTable
from popliner.profile.model import Profile
from popliner.regexes import compile_bounded

__all__ = [
    "DEFAULT_UPDATE_REGEX",
    "OperationRoles",
    "called_operations",
    "operation_roles",
    "recompute_operations",
    "through_calls",
    "unit_backward_start",
    "update_operations",
]

#: Names of weight-update operations (a call site counts when its body matches).
DEFAULT_UPDATE_REGEX = r"(?i)varupdate|updater|sgd|adam|lamb|momentum|optimi[sz]er"
#: A tensor written by a PopART recompute clone: ``<id>__re``, then the end or a non-word character.
_RE_TENSOR = re.compile(r"__re(?![A-Za-z0-9_])")


def _called_op(profile: Profile, ops: OperationTable, op: int) -> int:
    """The operation a call site calls: the owner of the first attributed program below its programs."""
    progs = profile.programs
    stack = [int(c) for p in ops.programs_of(op).tolist() for c in progs.children(p).tolist()]
    seen: set[int] = set()
    while stack:
        p = stack.pop(0)
        if p in seen:
            continue
        seen.add(p)
        owner = int(ops.op_of_program[p])
        if owner >= 0 and owner != op:
            return owner
        stack.extend(int(c) for c in progs.children(p).tolist())
    return -1


def called_operations(profile: Profile, ops: OperationTable) -> np.ndarray:
    """Per operation: the operation a call site calls (-1 for other operations)."""
    out = np.full(ops.count, -1, np.int64)
    for op in np.flatnonzero(ops.is_call).tolist():
        out[op] = _called_op(profile, ops, op)
    return out


def through_calls(named: np.ndarray, called: np.ndarray) -> np.ndarray:
    """``named``, plus every call site whose called operation is named."""
    out = named.copy()
    calls = np.flatnonzero(called >= 0)
    out[calls] |= named[called[calls]]
    return np.asarray(out, bool)


def update_operations(profile: Profile, ops: OperationTable, update_regex: str = DEFAULT_UPDATE_REGEX,
                      called: np.ndarray | None = None) -> np.ndarray:
    """Bool per operation: a weight update (by name, or a call site whose body is one)."""
    regex = compile_bounded(update_regex, "--update-regex or training.update_regex", DEFAULT_UPDATE_REGEX)
    named = np.array([bool(regex.search(n)) for n in ops.names], bool)
    return through_calls(named, called_operations(profile, ops) if called is None else called)


def recompute_operations(profile: Profile, ops: OperationTable, backward_named: np.ndarray) -> np.ndarray:
    """Bool per operation: a PopART recompute clone (forward name, writes a ``__re`` tensor)."""
    out = np.zeros(ops.count, bool)
    re_var = profile.variables.recompute_tensor  # found at load (and cached): reading every name cost each solve
    data = profile.contexts.data
    for op in np.flatnonzero(~backward_named).tolist():
        d = data[int(ops.context[op])] or {}
        outputs = d.get("outputs")
        if isinstance(outputs, list) and outputs:
            out[op] = any(_RE_TENSOR.search(str(name)) for name in outputs)
        else:
            out[op] = bool(re_var[ops.vars_of(op)].any())
    return out


#: (called, is_update, backward, clones) of :func:`operation_roles`.
OperationRoles = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def operation_roles(profile: Profile, ops: OperationTable, backward_named: np.ndarray, update_regex: str,
                    memo: dict[bytes, Any] | None = None) -> OperationRoles:
    """(called, is_update, backward, clones): the operation each call site calls (:func:`called_operations`), the
    weight updates, the operations ``backward_named`` marks with the call sites of those (:func:`through_calls`), and
    the recompute clones among the others; read only.

    Memoised in ``memo`` (the profile's option-free memo) by the two things they read besides the profile: the head
    grouping and every option set's training view read the same ones.
    """
    key = content_key(b"operation-roles", np.asarray(backward_named, bool), update_regex.encode())
    found: OperationRoles | None = memo.get(key) if memo is not None else None
    if found is None:
        called = called_operations(profile, ops)
        is_update = update_operations(profile, ops, update_regex, called)
        backward = through_calls(backward_named, called)
        found = (called, is_update, backward, recompute_operations(profile, ops, backward))
        for column in found:
            column.flags.writeable = False
        if memo is not None:
            memo[key] = found
    return found


def unit_backward_start(unit: np.ndarray, first_step: np.ndarray, backward_named: np.ndarray,
                        num_units: int) -> np.ndarray:
    """First step of each unit's backward part (a large number when it has none).

    A unit is a layer or one of the two unlayered groups (``unit`` numbers each operation's, -1 for none).
    """
    big = np.iinfo(np.int64).max
    start = np.full(num_units, big, np.int64)
    pick = backward_named & (first_step >= 0) & (unit >= 0)
    np.minimum.at(start, unit[pick], first_step[pick])
    return start
