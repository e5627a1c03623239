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
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from popliner.profile.model import PROGRAM_TYPES
from popliner.profile.rules import INT64_MAX, is_int64
from popliner.profile.tilevector import MAX_VALUE, value_runs

__all__ = [
    "BadValue",
    "ContextRecord",
    "as_int",
    "check_size",
    "attr",
    "arch_name",
    "context_id",
    "context_list",
    "raw_context_id",
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
_MAX_ID = INT64_MAX
_MISSING: Any = object()


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


def context_list(value: Any, where: str) -> list[Any]:
    """The debug contexts in ``value``: one context, none, or any sequence of them.

    libpva gives ``Operation.replacedDebugContext`` as a list (PopTorch's
    tests index it); a program's ``debugContext`` is one context or None. A
    sequence type other than ``list`` (a bound vector) is unwrapped the same
    way. A value that is neither a context nor a sequence is refused: taking
    it as one context would give every program the same wrong id.
    """
    if value is None:
        return []
    if getattr(value, "id", None) is not None or getattr(value, "_id", None) is not None:
        return [value]
    if isinstance(value, (str, bytes, dict)) or safe_len(value) is None:
        raise ValueError(f"{where} has type {type(value).__name__}, neither a debug context nor a list of them")
    items = list(value)
    for item in items:
        if getattr(item, "id", None) is None and getattr(item, "_id", None) is None:
            raise ValueError(f"{where} holds a value of type {type(item).__name__}, not a debug context")
    return items


def arch_name(value: Any) -> str | None:
    """``ipu2`` from libpva's ``target.architecture`` (``pva.IPU.Architecture.Ipu2``) or a string."""
    if value is None:
        return None
    name = value if isinstance(value, str) else enum_name(value)
    name = name.strip().lower()
    return name if name and name.isascii() and name.replace("_", "").isalnum() else None


def ident(obj: Any) -> int:
    """The id of a program or lowered variable (``_id`` in libpva, else ``id``): 0 to 2**63 - 1, as the format's."""
    value = attr(obj, "_id", "id")
    if value is None:
        raise ValueError(f"a libpva {type(obj).__name__} has neither _id nor id")
    value = int(value)
    if not 0 <= value <= _MAX_ID:
        raise BadValue(f"a libpva {type(obj).__name__} has id {value}, outside 0 to {_MAX_ID} (the format's ids): "
                       "the report is corrupt")
    return value


def safe_len(seq: Any) -> int | None:
    try:
        return len(seq)
    except TypeError:
        return None


class BadValue(ValueError):
    """A number libpva gave that no profile can hold (the loader would refuse the document)."""


def check_size(value: int, what: str) -> int:
    """``value`` when it is a size the format holds (0 to 2**40), else :class:`BadValue`."""
    if not 0 <= value <= MAX_VALUE:
        raise BadValue(f"{what} is {value:,}, outside 0 to {MAX_VALUE:,} (libpva sizes are unsigned and far "
                       "smaller): the report is corrupt")
    return value


def per_tile(values: Any, tiles: int, what: str = "a per-tile list") -> np.ndarray:
    """A libpva per-tile list as int64[tiles].

    Lists cover every tile of the target (all IPUs and replicas); only the
    first ``tiles`` (IPU 0) are kept. A missing or short list is padded with 0.
    A value outside what the format holds (negative, or beyond 2**40) is
    refused: the loader would refuse the exported document.
    """
    out = np.zeros(tiles, np.int64)
    if values is None:
        return out
    try:
        arr = np.asarray(values, dtype=np.int64).ravel()
    except OverflowError:
        raise BadValue(f"{what} holds a value beyond 64 bits: the report is corrupt") from None
    n = min(len(arr), tiles)
    out[:n] = arr[:n]
    if n and (int(out.min()) < 0 or int(out.max()) > MAX_VALUE):
        bad = int(np.flatnonzero((out < 0) | (out > MAX_VALUE))[0])
        check_size(int(out[bad]), f"{what} at tile {bad}")
    return out


def encode_tilevector(values: np.ndarray) -> list[int] | dict[str, Any] | None:
    """The shortest of the format's TileVector forms; None when all zero."""
    first, stop, value = value_runs(values)
    if not first.size:
        return None
    if 3 * first.size < len(values):
        return {"runs": np.stack([first, stop, value], axis=1).tolist()}
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
    #: The id libpva gave, before folding into int64 (two raw ids must not fold to one).
    raw_id: int
    parent: Any
    layer: str
    name: str
    data: dict[str, Any] | None
    #: Whether libpva's object has a ``parents`` (or ``parent``) attribute at all: a root has one, empty.
    linked: bool

    def as_json(self, parent_id: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "parent": parent_id, "layer": self.layer, "name": self.name}
        if self.data:
            out["data"] = self.data
        return out


def raw_context_id(ctx: Any) -> int:
    return int(attr(ctx, "id", "_id", default=0))


def context_id(ctx: Any) -> int:
    raw = raw_context_id(ctx)
    return raw if 0 <= raw <= _MAX_ID else raw & _MAX_ID


def read_context(ctx: Any) -> ContextRecord:
    """Id, parent, layer, name and layer data of a libpva debug context.

    ``parents`` is a list (PopTorch's test walks ``parents[0]``); its first
    entry is taken as the direct parent, and an empty list means a root. A
    context with neither ``parents`` nor ``parent`` says nothing about its
    place. ``json`` is text; its keys become ``data``, minus those that
    repeat the structured fields. The name comes from a ``name`` attribute
    when libpva has one, else from the JSON's ``name`` ([U]).
    """
    raw = raw_context_id(ctx)
    cid = context_id(ctx)
    parents = getattr(ctx, "parents", _MISSING)
    single = getattr(ctx, "parent", _MISSING)
    linked = parents is not _MISSING or single is not _MISSING
    if parents is not _MISSING and parents is not None and safe_len(parents):
        parent = parents[0]
    else:
        parent = None if single is _MISSING else single
    data = _json_object(attr(ctx, "json"), cid)
    layer = _layer(attr(ctx, "layer"), data)
    name = attr(ctx, "name")
    if not isinstance(name, str):
        name = data.pop("name") if isinstance(data.get("name"), str) else ""
    _drop_repeats(data, cid, layer)
    return ContextRecord(cid, raw, parent, layer, name, data or None, linked)


#: Nesting kept in a context's free-form data; deeper data is left out (the JSON encoder stops at 255).
MAX_DATA_DEPTH = 64


class _TooDeep(Exception):
    pass


def _json_object(raw: Any, cid: int) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    value = raw
    if isinstance(raw, (str, bytes)):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            log.debug("debug context %d: json is not valid JSON; data left out", cid)
            return {}
    if not isinstance(value, dict):
        log.debug("debug context %d: json is not an object; data left out", cid)
        return {}
    try:
        clean = _plain(value, 0)
    except _TooDeep:
        log.warning("debug context %d: its json nests deeper than %d levels; its data is left out", cid,
                    MAX_DATA_DEPTH)
        return {}
    return _sanitise(clean)


def _plain(value: Any, depth: int) -> Any:
    """``value`` with integers beyond int64 as text (the format's readers stop at 64 bits)."""
    if depth > MAX_DATA_DEPTH:
        raise _TooDeep
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    if type(value) is int and not is_int64(value):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN or infinity
    return value


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
    # PopTorch's test (SDK 3.0-3.4) does json.loads(ctx.layer)["layer"]: the layer may be a JSON object's text.
    if isinstance(raw, str) and raw[:1] in ('"', "{"):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            pass
    if isinstance(raw, dict):
        raw = raw.get("layer")
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
