"""Things the exporter gathers while it walks the report.

- :class:`VertexTypeTable`: vertex types met in compute sets and in tile
  memory, with their code size per tile;
- :class:`ContextCollector`: the debug contexts reachable from programs,
  written to a spool as they are first met;
- :class:`TileTotals`: the compiler's per-tile memory figures (ground truth).
- :class:`Progress`: throttled progress lines on the log.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from popliner.export.jsonstream import FragmentSpool
from popliner.export.pvaread import (
    as_int,
    attr,
    check_size,
    context_id,
    encode_tilevector,
    raw_context_id,
    read_context,
)
from popliner.profile.limits import limit

__all__ = ["CATEGORY_NAMES", "ContextCollector", "ContextProblem", "OverLimit", "Progress", "TileTotals",
           "VertexTypeTable"]

log = logging.getLogger("popliner.export")

#: The loader's bound on tiles x vertex types (popliner/profile/limits.py), applied while exporting.
CELLS_ENV = "POPLINER_MAX_TILE_CELLS"

#: Storage categories seen in libpva reports (``tile.memory.category.<name>``).
#: Other public attributes of the category object are picked up too.
CATEGORY_NAMES: tuple[str, ...] = (
    "vertexCode", "vertexInstanceState", "vectorListDescriptor", "vertexFieldData", "controlCode",
    "controlId", "controlTable", "internalExchangeCode", "hostExchangeCode", "globalExchangeCode",
    "hostExchangePacketHeader", "globalExchangePacketHeader", "copyDescriptor", "instrumentationResults",
    "stack", "constant",
)


class Progress:
    """Logs ``what: done / total`` at most every two seconds."""

    def __init__(self, what: str, total: int | None) -> None:
        self.what = what
        self.total = total
        self._next = time.monotonic() + 2.0

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + 2.0
            of = f" / {self.total:,}" if self.total else ""
            log.info("export: %s %s%s", self.what, f"{done:,}", of)


class VertexTypeTable:
    """Vertex types by ``(name, size)``; vertex code bytes per type and tile.

    Compute-set vertices give name and state size; tile memory gives name and
    code bytes (and a size only if libpva's type object carries one there).
    Code is matched to instances by name and, when known, size.
    """

    def __init__(self, tiles: int) -> None:
        self.tiles = tiles
        self._index: dict[tuple[str, int], int] = {}
        self._by_name: dict[str, list[int]] = {}
        self.names: list[str] = []
        self.sizes: list[int] = []
        self._code: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.names)

    def type_id(self, vtype: Any) -> int:
        """The id of a compute-set vertex's ``type``, registering it if new."""
        name = str(attr(vtype, "name", default=""))
        return self._register(name, as_int(attr(vtype, "size"), 0))

    def _register(self, name: str, size: int) -> int:
        key = (name, size)
        found = self._index.get(key)
        if found is None:
            check_size(size, f"the state size of vertex type {name!r}")
            cells = self.tiles * (len(self.names) + 1)
            if cells > limit(CELLS_ENV):
                raise OverLimit(f"{self.tiles:,} tiles x {len(self.names) + 1:,} vertex types = {cells:,} per-tile "
                               f"cells, above the limit of {limit(CELLS_ENV):,} that popliner reads; set "
                               f"{CELLS_ENV} to a larger count to export it anyway")
            found = self._index[key] = len(self.names)
            self.names.append(name)
            self.sizes.append(size)
            self._by_name.setdefault(name, []).append(found)
        return found

    def add_code(self, tile: int, vtype: Any, code_bytes: int) -> None:
        """Record one ``tile.memory.vertices[]`` entry."""
        name = str(attr(vtype, "name", default=""))
        size = attr(vtype, "size")
        if size is not None and (name, as_int(size)) in self._index:
            targets = [self._index[(name, as_int(size))]]
        else:
            # No size here: the code belongs to every sized type of this
            # name, as in the original PopLiner (code keyed by name only).
            targets = self._by_name.get(name) or [self._register(name, as_int(size, 0))]
        check_size(code_bytes, f"the code of vertex type {name!r} on tile {tile}")
        for t in targets:
            code = self._code.get(t)
            if code is None:
                code = self._code[t] = np.zeros(self.tiles, np.int64)
            code[tile] = code_bytes

    def records(self) -> list[dict[str, Any]]:
        out = []
        for i, (name, size) in enumerate(zip(self.names, self.sizes)):
            code = self._code.get(i)
            tv = encode_tilevector(code) if code is not None else None
            out.append({"name": name, "size": size, "codeBytes": tv if tv is not None else {"runs": []}})
        return out


class ContextCollector:
    """Debug contexts reachable from programs, each written once with its ancestors.

    Refuses (:class:`ContextProblem`) what the loader would refuse: parent
    links that form a cycle, and two contexts whose ids fold to one id of the
    format (Poplar's ids are uint64, the format's int64).
    """

    def __init__(self, folder: Path | None) -> None:
        self.spool = FragmentSpool(folder)
        self._raw: dict[int, int] = {}  # written id -> the id libpva gave
        self.layers: set[str] = set()
        #: Whether any context object had a ``parents`` (or ``parent``) attribute, empty or not.
        self.any_linked = False

    @property
    def count(self) -> int:
        return self.spool.count

    def add(self, ctx: Any) -> int:
        """Register ``ctx`` and every ancestor not seen yet; return ``ctx``'s id."""
        cid = context_id(ctx)
        if cid in self._raw:  # the common case: parse no JSON
            self._same(cid, raw_context_id(ctx))
            return cid
        rec = read_context(ctx)
        walk: set[int] = set()
        while True:
            walk.add(rec.id)
            self._raw[rec.id] = rec.raw_id
            parent = read_context(rec.parent) if rec.parent is not None else None
            # A self-link is read as a root (documented); a longer loop is refused.
            parent_id = parent.id if parent is not None and parent.id != rec.id else None
            if parent_id is not None and parent_id in walk:
                raise ContextProblem(f"the parents of debug context {rec.raw_id} lead back to it (a cycle "
                                     "in the debug information)")
            self.spool.add(rec.as_json(parent_id))
            self.any_linked = self.any_linked or rec.linked
            self.layers.add(rec.layer)
            if parent is None or parent_id is None:
                break
            if parent.id in self._raw:
                self._same(parent.id, parent.raw_id)
                break
            rec = parent
        return cid

    def _same(self, cid: int, raw: int) -> None:
        first = self._raw[cid]
        if first != raw:
            raise ContextProblem(f"debug context ids {first} and {raw} both become {cid} in the format's "
                                 "64-bit signed ids, so one context would be lost")


class OverLimit(ValueError):
    """A count past one of the loader's work limits (popliner/profile/limits.py)."""


class ContextProblem(ValueError):
    """Debug contexts that the format cannot hold as libpva gives them."""


class TileTotals:
    """``alwaysLiveBytes``, ``notAlwaysLiveBytes`` and category totals per tile."""

    def __init__(self, tiles: int) -> None:
        self.tiles = tiles
        self.always = np.zeros(tiles, np.int64)
        self.not_always = np.zeros(tiles, np.int64)
        self.categories: dict[str, np.ndarray] = {}
        self._category_names: list[str] | None = None
        self.has_always = False
        self.has_not_always = False

    def add(self, tile: int, memory: Any) -> None:
        always = attr(memory, "alwaysLiveBytes")
        not_always = attr(memory, "notAlwaysLiveBytes")
        # Absent is not zero: a figure libpva did not give is left out of the document, not written as zeros.
        self.has_always = self.has_always or always is not None
        self.has_not_always = self.has_not_always or not_always is not None
        self.always[tile] = check_size(as_int(always), f"tile {tile}'s alwaysLiveBytes")
        self.not_always[tile] = check_size(as_int(not_always), f"tile {tile}'s notAlwaysLiveBytes")
        category = attr(memory, "category")
        if category is None:
            return
        if self._category_names is None:
            self._category_names = _category_names(category)
        for name in self._category_names:
            total = attr(attr(category, name), "total")
            if total is not None:
                if name not in self.categories:
                    self.categories[name] = np.zeros(self.tiles, np.int64)
                self.categories[name][tile] = check_size(as_int(total), f"tile {tile}'s {name} total")

    def record(self) -> dict[str, Any] | None:
        if not (self.has_always or self.has_not_always or self.categories):
            return None
        none: dict[str, Any] = {"runs": []}
        out: dict[str, Any] = {}
        if self.has_always:
            out["alwaysLive"] = encode_tilevector(self.always) or none
        if self.has_not_always:
            out["notAlwaysLivePeak"] = encode_tilevector(self.not_always) or none
        out["categories"] = {k: encode_tilevector(v) or none for k, v in self.categories.items()}
        return out


def _category_names(category: Any) -> list[str]:
    """Known category names plus any other public attribute with a ``total``."""
    names = [*CATEGORY_NAMES, *(n for n in dir(category) if not n.startswith("_") and n not in CATEGORY_NAMES)]
    return [n for n in names if attr(getattr(category, n, None), "total") is not None]

