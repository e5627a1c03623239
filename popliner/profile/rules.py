"""The validation and default rules of format v1: one copy, used by every parse path.

Whatever laid the document out (compact, spaced, indented, keys in any
order, gzip or plain) and whichever reader took its bulky lists apart, the
checks and the meaning of an absent key come from here. Each rule is a quick
test for the usual value and, only when that test fails, the same
:class:`Checker` call that words the fault: a rule cannot accept a value on
one path and refuse it on another.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NoReturn, TypeVar

import numpy as np

from popliner.errors import ProfileFormatError
from popliner.profile.model import TYPE_CODE
from popliner.profile.tilevector import MAX_VALUE, kind, only_ints

__all__ = ["INT64_MAX", "MAX_TILES", "Checker", "NotFast", "is_int64", "kind", "only_ints", "back_edge",
           "program_fields", "vertex_type_of"]

#: Refuse targets beyond this many tiles per IPU (Mk2 has 1472): a typo or a
#: corrupt number would otherwise make every per-tile array absurdly large.
MAX_TILES = 1 << 16
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: What an absent program key means, and null for the lists and the context (exporters write null for "none").
PROGRAM_DEFAULTS: dict[str, Any] = {"name": "", "children": (), "debugContext": None, "repeatCount": 1,
                                    "vertices": (), "vars": ()}
#: Whole-model totals popliner forms (bytes or cycles summed over tiles) must stay below this, so
#: that adding the five memory components, or a few such totals, cannot wrap round in int64.
TOTAL_LIMIT = 2**60


H = TypeVar("H", bound=Hashable)


def back_edge(roots: Iterable[H], children: Callable[[H], Sequence[H]]) -> tuple[H, int] | None:
    """The first edge ``(node, k)`` to ``children(node)[k]`` that closes a cycle, or None.

    Depth first from each root in turn, children in order, each node walked
    once (iteratively: a tree may be deeper than Python's recursion limit).
    """
    on_path: dict[H, bool] = {}  # True while on the current path, False once done
    for root in roots:
        if root in on_path:
            continue
        on_path[root] = True
        stack = [(root, children(root), 0)]
        while stack:
            node, kids, k = stack[-1]
            if k == len(kids):
                on_path[node] = False
                stack.pop()
                continue
            stack[-1] = (node, kids, k + 1)
            seen = on_path.get(kids[k])
            if seen:
                return node, k
            if seen is None:
                on_path[kids[k]] = True
                stack.append((kids[k], children(kids[k]), 0))
    return None


class NotFast(Exception):
    """The column reader's placeholders are not where expected: parse the ordinary way."""


def is_int64(value: Any) -> bool:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


class Checker:
    """Worded checks: each raises a :class:`ProfileFormatError` naming the file, the place and the fault."""

    def __init__(self, path: str) -> None:
        self.path = path

    def err(self, where: str, problem: str) -> ProfileFormatError:
        return ProfileFormatError(self.path, where, problem)

    def fail(self, where: str, problem: str) -> NoReturn:
        raise self.err(where, problem)

    def need(self, obj: dict[str, Any], key: str, where: str, kinds: tuple[type, ...], what: str) -> Any:
        if key not in obj:
            self.fail(where, f'missing required key "{key}"')
        return self.check(obj[key], f"{where}.{key}" if where else key, kinds, what)

    def check(self, value: Any, where: str, kinds: tuple[type, ...], what: str) -> Any:
        # bool is an int subclass in Python; JSON true is never a valid number here.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            self.fail(where, f"expected {what}, got {kind(value)}")
        return value

    def int_at(self, value: Any, where: str, lo: int = 0, hi: int | None = None) -> int:
        self.check(value, where, (int,), "an integer")
        if value < lo:
            self.fail(where, f"{value} is below the minimum {lo}")
        if hi is not None and value > hi:
            self.fail(where, f"{value} is above the maximum {hi}")
        return int(value)

    def first_bad(self, mask: np.ndarray, where: str, problem: str) -> None:
        bad = np.flatnonzero(mask)
        if bad.size:
            self.fail(f"{where}[{int(bad[0])}]", problem)


def program_fields(chk: Checker, p: Any, i: int, ctx_index: dict[int, int]) -> tuple[int, int, str, Any, int, int]:
    """``programs[i]``'s id, type code, name, children list, context index (-1: none) and repeat count.

    Absent keys take :data:`PROGRAM_DEFAULTS`; the children's contents are
    checked where they become positions.
    """
    if type(p) is not dict:
        chk.check(p, f"programs[{i}]", (dict,), "an object")
    pid = p.get("id")
    if type(pid) is not int or not 0 <= pid <= INT64_MAX:
        chk.int_at(chk.need(p, "id", f"programs[{i}]", (int,), "an integer"), f"programs[{i}].id", 0, INT64_MAX)
    ptype = p.get("type")
    code = TYPE_CODE.get(ptype, -1) if type(ptype) is str else -1
    if code < 0:
        ptype = chk.need(p, "type", f"programs[{i}]", (str,), "a string")
        chk.fail(f"programs[{i}].type", f'unknown program type "{ptype}"; expected one of {", ".join(TYPE_CODE)}')
    name = p.get("name", PROGRAM_DEFAULTS["name"])
    if type(name) is not str:
        chk.check(name, f"programs[{i}].name", (str,), "a string")
    children = p.get("children")
    if children is None:
        children = PROGRAM_DEFAULTS["children"]
    elif type(children) is not list:
        chk.check(children, f"programs[{i}].children", (list,), "a list of program ids")
    ctx = p.get("debugContext")
    j = -1
    if ctx is not None:
        j = ctx_index.get(ctx, -1) if type(ctx) is int else -1
        if j < 0:
            chk.int_at(ctx, f"programs[{i}].debugContext", 0, INT64_MAX)
            chk.fail(f"programs[{i}].debugContext", f"no debug context has id {ctx}")
    count = PROGRAM_DEFAULTS["repeatCount"]
    if "repeatCount" in p:  # present, null included, it must be a count
        count = p["repeatCount"]
        if type(count) is not int or not 0 <= count <= MAX_VALUE:
            chk.int_at(count, f"programs[{i}].repeatCount", 0, MAX_VALUE)
    return pid, code, name, children, j, count


def vertex_type_of(chk: Checker, entry: Any, at: str, num_types: int) -> int:
    """The vertex type of one ``[vertexTypeId, TileVector]`` entry of a program's ``vertices``."""
    if type(entry) is not list or len(entry) != 2:
        chk.fail(at, "expected [vertexTypeId, TileVector]")
    vt = entry[0]
    if type(vt) is not int or not 0 <= vt < num_types:
        chk.int_at(vt, f"{at}[0]", 0)
        chk.fail(f"{at}[0]", f"no vertex type {vt} (there are {num_types})")
    return vt
