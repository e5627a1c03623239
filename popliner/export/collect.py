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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from popliner.export.jsonstream import FragmentSpool
from popliner.export.pvaread import as_int, attr, context_id, encode_tilevector, read_context

__all__ = ["CATEGORY_NAMES", "ContextCollector", "Progress", "TileTotals", "VertexTypeTable"]

log = logging.getLogger("popliner.export")

#: Storage categories seen in libpva reports (``tile.memory.category.<name>``).
#: Other public attributes of the category object are picked up too.
CATEGORY_NAMES: tuple[str, ...] = (
    "vertexCode", "vertexInstanceState", "vectorListDescriptor", "vertexFieldData", "controlCode",
    "controlId", "controlTable", "internalExchangeCode", "hostExchangeCode", "globalExchangeCode",
    "hostExchangePacketHeader", "globalExchangePacketHeader", "copyDescriptor", "instrumentationResults",
    "stack", "constant",
)


class Progress:
    """Logs ``what: done / total`` at most every ``interval`` seconds."""

    def __init__(self, what: str, total: int | None, interval: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.total = total
        self.interval = interval
        self._clock = clock
        self._next = clock() + interval

    def update(self, done: int) -> None:
        now = self._clock()
        if now >= self._next:
            self._next = now + self.interval
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
    """Debug contexts reachable from programs, each written once with its ancestors."""

    def __init__(self, folder: Path | None) -> None:
        self.spool = FragmentSpool(folder)
        self._seen: set[int] = set()
        self.layers: set[str] = set()
        #: Whether any written context has a parent; with none, layers (taken from ancestors) are wrong.
        self.any_parent = False

    @property
    def count(self) -> int:
        return self.spool.count

    def add(self, ctx: Any) -> int:
        """Register ``ctx`` and every ancestor not seen yet; return ``ctx``'s id."""
        cid = context_id(ctx)
        if cid in self._seen:  # the common case: parse no JSON
            return cid
        rec = read_context(ctx)
        while rec.id not in self._seen:
            self._seen.add(rec.id)
            parent = read_context(rec.parent) if rec.parent is not None else None
            # A self-link would be a cycle; the loader refuses those.
            parent_id = parent.id if parent is not None and parent.id != rec.id else None
            self.spool.add(rec.as_json(parent_id))
            self.any_parent = self.any_parent or parent_id is not None
            self.layers.add(rec.layer)
            if parent is None:
                break
            rec = parent
        return cid


class TileTotals:
    """``alwaysLiveBytes``, ``notAlwaysLiveBytes`` and category totals per tile."""

    def __init__(self, tiles: int) -> None:
        self.tiles = tiles
        self.always = np.zeros(tiles, np.int64)
        self.not_always = np.zeros(tiles, np.int64)
        self.categories: dict[str, np.ndarray] = {}
        self._category_names: list[str] | None = None
        self.found = False

    def add(self, tile: int, memory: Any) -> None:
        always = attr(memory, "alwaysLiveBytes")
        not_always = attr(memory, "notAlwaysLiveBytes")
        if always is not None or not_always is not None:
            self.found = True
        self.always[tile] = as_int(always)
        self.not_always[tile] = as_int(not_always)
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
                self.categories[name][tile] = as_int(total)

    def record(self) -> dict[str, Any] | None:
        if not (self.found or self.categories):
            return None
        none: dict[str, Any] = {"runs": []}
        out: dict[str, Any] = {
            "alwaysLive": encode_tilevector(self.always) or none,
            "notAlwaysLivePeak": encode_tilevector(self.not_always) or none,
        }
        out["categories"] = {k: encode_tilevector(v) or none for k, v in self.categories.items()}
        return out


def _category_names(category: Any) -> list[str]:
    """Known category names plus any other public attribute with a ``total``."""
    names = list(CATEGORY_NAMES)
    for name in dir(category):
        if name.startswith("_") or name in names:
            continue
        if attr(getattr(category, name, None), "total") is not None:
            names.append(name)
    return [n for n in names if attr(getattr(category, n, None), "total") is not None]

