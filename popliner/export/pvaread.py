"""Defensive readers for libpva (``pva``) objects.

Several libpva attributes are known only from how other tools use them
(marked [I] or [U] in the libpva reference), so every read here goes through
``getattr`` with fallbacks and a tolerant conversion. Nothing in this module
imports ``pva``: the objects arrive from the caller. docs/libpva-mapping.md
lists every attribute read and the assumption behind it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from popliner.profile.model import PROGRAM_TYPES

__all__ = [
    "ContextRecord",
    "as_int",
    "attr",
    "context_id",
    "encode_tilevector",
    "enum_name",
    "ident",
    "per_tile",
    "program_type",
    "read_context",
    "read_intervals",
    "safe_len",
]

log = logging.getLogger(__name__)

#: Debug-context ids are uint64 in Poplar; the format (and the loader) keep
#: them in int64. Ids beyond that range are folded into it.
_MAX_ID = 2**63 - 1
_MISSING = object()


def attr(obj: Any, *names: str, default: Any = None) -> Any:
    """The first of ``names`` that ``obj`` has and that is not None."""
    for name in names:
        value = getattr(obj, name, _MISSING)
        if value is not _MISSING and value is not None:
            return value
    return default


def as_int(value: Any, default: int = 0) -> int:
    """An integer from an int, a numpy scalar or a libpva size object.

    Memory figures are plain ints in the code we have seen, but tile totals
    are objects with ``includingGaps``/``excludingGaps``; accept both.
    """
    if value is None:
        return default
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    for name in ("includingGaps", "excludingGaps", "bytes", "value"):
        inner = getattr(value, name, None)
        if isinstance(inner, (int, np.integer)):
            return int(inner)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def ident(obj: Any) -> int:
    """The id of a program or lowered variable (``_id`` in libpva, else ``id``)."""
    value = attr(obj, "_id", "id")
    if value is None:
        raise ValueError(f"a libpva {type(obj).__name__} has neither _id nor id")
    return int(value)


def safe_len(seq: Any) -> int | None:
    try:
        return len(seq)
    except TypeError:
        return None


def per_tile(values: Any, tiles: int) -> np.ndarray:
    """A libpva per-tile list as int64[tiles].

    Lists cover every tile of the target (all IPUs and replicas); only the
    first ``tiles`` (IPU 0) are kept. A missing or short list is padded with 0.
    """
    out = np.zeros(tiles, np.int64)
    if values is None:
        return out
    arr = np.asarray(values, dtype=np.int64).ravel()
    n = min(len(arr), tiles)
    out[:n] = arr[:n]
    # libpva sizes are unsigned; a negative value can only be an overflow.
    np.maximum(out, 0, out=out)
    return out


def encode_tilevector(values: np.ndarray) -> list[int] | dict[str, Any] | None:
    """The shortest of the format's TileVector forms; None when all zero."""
    nonzero = np.flatnonzero(values)
    if nonzero.size == 0:
        return None
    change = np.flatnonzero(np.diff(values)) + 1
    first = np.concatenate(([0], change))
    stop = np.concatenate((change, [len(values)]))
    value = values[first]
    keep = value != 0
    runs = np.stack([first[keep], stop[keep], value[keep]], axis=1)
    if 3 * len(runs) < len(values):
        return {"runs": runs.tolist()}
    dense: list[int] = values.tolist()
    return dense


def enum_name(value: Any) -> str:
    """``OnTileExecute`` from a pybind11 enum, a Python enum or a string."""
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    return str(value).rsplit(".", 1)[-1]


#: libpva program type names that are not format-v1 names, and their nearest
#: format type. The full libpva enum is not documented ([U]); anything else
#: unknown becomes "Other".
_TYPE_ALIASES = {
    "OnEveryTileSwitch": "Switch",
    "SwitchProgram": "Switch",
    "Execute": "OnTileExecute",
    "SyncAns": "Sync",
    "Sans": "Sync",
    "Loop": "Repeat",
}
_FORMAT_TYPES = frozenset(PROGRAM_TYPES)


def program_type(program: Any) -> str:
    raw = enum_name(attr(program, "type", default="Other"))
    if raw in _FORMAT_TYPES:
        return raw
    if raw in _TYPE_ALIASES:
        return _TYPE_ALIASES[raw]
    for prefix in ("Repeat", "Sync", "Call", "Copy", "If"):
        if raw.startswith(prefix):
            return prefix
    return "Other"


def read_intervals(eq_class: Any, num_steps: int) -> list[list[int]]:
    """``equivalenceClass.steps`` as ``[[start, end], ...]`` clipped to the steps.

    Intervals are objects with ``start``/``end`` in the code we have seen;
    pairs are accepted too. ``end`` is exclusive.
    """
    out: list[list[int]] = []
    for iv in attr(eq_class, "steps", default=()) or ():
        start = attr(iv, "start")
        end = attr(iv, "end")
        if start is None or end is None:
            start, end = iv[0], iv[1]
        s, e = max(0, int(start)), min(num_steps, int(end))
        if e > s:
            out.append([s, e])
    return out


@dataclass(frozen=True)
class ContextRecord:
    """One debug context, ready for the format (``parent`` still an object)."""

    id: int
    parent: Any
    layer: str
    name: str
    data: dict[str, Any] | None

    def as_json(self, parent_id: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "parent": parent_id, "layer": self.layer, "name": self.name}
        if self.data:
            out["data"] = self.data
        return out


def context_id(ctx: Any) -> int:
    raw = int(attr(ctx, "id", "_id", default=0))
    return raw if 0 <= raw <= _MAX_ID else raw & _MAX_ID


def read_context(ctx: Any) -> ContextRecord:
    """Id, parent, layer, name and layer data of a libpva debug context.

    ``parents`` is documented only as a list: the first entry is taken as the
    direct parent ([I]). ``json`` is text; its keys become ``data``, minus
    those that repeat the structured fields. The name comes from a ``name``
    attribute when libpva has one, else from the JSON's ``name`` ([U]).
    """
    cid = context_id(ctx)
    parents = attr(ctx, "parents", default=())
    parent = parents[0] if safe_len(parents) else attr(ctx, "parent")
    data = _json_object(attr(ctx, "json"), cid)
    layer = _layer(attr(ctx, "layer"), data)
    name = attr(ctx, "name")
    if not isinstance(name, str):
        name = data.pop("name") if isinstance(data.get("name"), str) else ""
    _drop_repeats(data, cid, layer)
    return ContextRecord(cid, parent, layer, name, data or None)


def _json_object(raw: Any, cid: int) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    value = raw
    if isinstance(raw, (str, bytes)):
        try:
            value = json.loads(raw)
        except ValueError:
            log.debug("debug context %d: json is not valid JSON; data left out", cid)
            return {}
    if not isinstance(value, dict):
        log.debug("debug context %d: json is not an object; data left out", cid)
        return {}
    return _sanitise(value)


def _sanitise(data: dict[str, Any]) -> dict[str, Any]:
    # The loader requires data.inputs to be a list of strings; real debug
    # info could carry tensor ids as numbers.
    inputs = data.get("inputs")
    if inputs is not None and not (isinstance(inputs, list) and all(isinstance(s, str) for s in inputs)):
        if isinstance(inputs, list):
            data["inputs"] = [s if isinstance(s, str) else json.dumps(s) for s in inputs]
        else:
            data["inputs"] = [str(inputs)]
    return data


def _layer(raw: Any, data: dict[str, Any]) -> str:
    # One SDK's test json.loads() the layer, so it may be JSON text ([U]).
    if isinstance(raw, str) and raw[:1] in ('"', "{"):
        try:
            raw = json.loads(raw)
        except ValueError:
            pass
        if isinstance(raw, dict):
            raw = raw.get("layer", "")
    if raw is None:
        raw = data.get("layer", "")
    return raw if isinstance(raw, str) else enum_name(raw)


def _drop_repeats(data: dict[str, Any], cid: int, layer: str) -> None:
    """Remove keys that only repeat the id, parent link or layer."""
    if data.get("id") == cid:
        del data["id"]
    if data.get("layer") == layer:
        del data["layer"]
    data.pop("parentId", None)
