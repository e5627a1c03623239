"""Read a format-v1 profile (``.json`` or ``.json.gz``), validate it, build a Profile.

Every problem is a :class:`ProfileFormatError` naming the file, the place in
the document (``programs[812].children[3]``) and what is wrong. Columnar data
goes straight into numpy arrays; per-program work is one short Python loop
over programs (tens of thousands), never over variables (millions).
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import hashlib
import importlib
import io
import itertools
import json
import logging
import os
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from popliner.errors import ProfileFormatError
from popliner.profile import zcodec
from popliner.profile.columns import Extracted, extract_columns
from popliner.profile.files import read_profile_bytes
from popliner.profile.model import (
    TYPE_CODE,
    Contexts,
    NameTable,
    Profile,
    Programs,
    Target,
    Variables,
    VertexTypes,
    recompute_tensors,
)
from popliner.profile.tilevector import (
    MAX_VALUE,
    RunTable,
    RunTableBuilder,
    decode_tilevector,
    decode_tilevector_lists,
    dense_runs,
)

__all__ = ["MAX_TILES", "load_profile", "parse_profile_bytes", "read_profile_bytes", "small_pages"]

log = logging.getLogger(__name__)

#: Refuse targets beyond this many tiles per IPU (Mk2 has 1472): a typo or a
#: corrupt number would otherwise make every per-tile array absurdly large.
MAX_TILES = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"
_DEFAULT_MAX_BYTES = 8 << 30
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read, decompress, parse and validate one profile file."""
    raw = read_profile_bytes(path)
    return parse_profile_bytes(raw, str(path))


def parse_profile_bytes(raw: bytes, path: str, sha256: str | None = None) -> Profile:
    digest = sha256 or hashlib.sha256(raw).hexdigest()
    with _gc_paused(), small_pages():
        fast = _parse_fast(raw, path, digest)
        if fast is not None:
            return fast
        doc = _parse_json(_decompress(raw, path), path)
        return _Builder(doc, path, digest).build()


class _NotFast(Exception):
    """The shortcut's placeholders are not where expected: parse the ordinary way."""


def _parse_fast(raw: bytes, path: str, digest: str) -> Profile | None:
    """The profile read through :mod:`popliner.profile.columns`, or None to take the ordinary path.

    The shortcut never reports a problem itself: on anything unexpected,
    including an invalid document, the ordinary path runs from the start and
    words the error.
    """
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency
        return None
    text = _decompress(raw, path)
    # The names are packed on another thread while this one reads the other columns and
    # parses the rest of the document; the text goes once they are packed.
    with ThreadPoolExecutor(1) as pool:
        found = extract_columns(text, pool)
        del text  # the bulky lists are arrays now; the rest is a small document
        if found is None:
            return None
        rest, extracted = found
        if _objects_nested_deeper(rest, _ORJSON_SAFE_DEPTH):
            return None  # the ordinary path reads it without orjson
        try:
            doc = orjson.loads(rest)
        except orjson.JSONDecodeError:
            return None
        del rest
        extracted.wait_for_names()
    try:
        return _Builder(doc, path, digest, extracted).build()
    except (ProfileFormatError, _NotFast):
        return None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the document is parsed and read.

    The parsed document is millions of lists and dicts with no reference
    cycles; every full collection during the parse walks all of them again,
    which made parsing grow faster than the file (bert-large at 2x: 6.2 s
    with the collector, 3.8 s without). The previous state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Turn numpy's huge-page advice off while the document is read (the previous state is restored).

    numpy asks the kernel for transparent huge pages on every array of 4 MB
    or more. A cold load makes several gigabytes of such arrays that live for
    moments; once the machine's memory is fragmented, each huge page costs a
    compaction, which took more system time than the ordinary page faults it
    saves (bert-large 4x: 4.2-4.3 s of system time with the advice, 2.9-3.1 s
    without, in pairs of fresh processes).
    """
    setter = _huge_page_setter()
    previous = setter(False) if setter is not None else None
    try:
        yield
    finally:
        if setter is not None and previous is not None:
            setter(previous)


def _huge_page_setter() -> Any:
    """numpy's switch for its huge-page advice (private, in ``numpy._core`` or, before 2.0, ``numpy.core``)."""
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = importlib.import_module(name)
        except ImportError:  # pragma: no cover - depends on the numpy version
            continue
        return getattr(module, "_set_madvise_hugepage", None)
    return None  # pragma: no cover


def max_profile_bytes() -> int:
    """Largest decompressed profile accepted (``$POPLINER_MAX_PROFILE_BYTES``, default 8 GiB)."""
    try:
        return int(os.environ.get("POPLINER_MAX_PROFILE_BYTES", "")) or _DEFAULT_MAX_BYTES
    except ValueError:
        return _DEFAULT_MAX_BYTES


def _decompress(raw: bytes, path: str) -> bytes:
    limit = max_profile_bytes()
    if not (path.endswith(".gz") or raw[:2] == _GZIP_MAGIC):
        if len(raw) > limit:
            raise ProfileFormatError(path, "", _too_big(limit))
        return raw
    fast = _gunzip_one_member(raw, limit)
    if fast is not None:
        return fast
    # Decompress in pieces so that a gzip bomb is refused, not an out-of-memory kill.
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
            while chunk := stream.read(1 << 24):
                out += chunk
                if len(out) > limit:
                    raise ProfileFormatError(path, "", _too_big(limit))
    except (OSError, EOFError, zlib.error) as exc:
        reason = str(exc).split(" 0x")[0]  # drop checksum values: same message for the same fault
        raise ProfileFormatError(path, "", f"corrupt gzip stream ({reason}); re-export or re-copy the file") from None
    return bytes(out)


def _gunzip_one_member(raw: bytes, limit: int) -> bytes | None:
    """The usual case in one zlib call: a single gzip member, nothing after it.

    At most ``limit + 1`` bytes come out, so a bomb still stops early. Anything
    else (over the limit, several members, trailing bytes, a corrupt or
    truncated stream) returns None, and the stream reader decides, with its
    own messages.
    """
    try:
        d = zcodec.decompressobj(wbits=31)  # gzip header and trailer (CRC-32, size) checked
        out = d.decompress(raw, limit + 1)
    except zcodec.ERRORS:
        return None
    if len(out) > limit or not d.eof or d.unused_data or d.unconsumed_tail:
        return None
    return bytes(out)


def _too_big(limit: int) -> str:
    return (f"decompressed profile is larger than {limit:,} bytes; if it is genuine, raise "
            "POPLINER_MAX_PROFILE_BYTES")


def _parse_json(text: bytes, path: str) -> Any:
    # isspace() stops at the first other byte; strip() would copy a big file.
    if not text or text.isspace():
        raise ProfileFormatError(path, "", "empty file; a profile is one JSON object")
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency, but the fallback stays correct
        orjson = None  # type: ignore[assignment]
    if orjson is not None and not _objects_nested_deeper(text, _ORJSON_SAFE_DEPTH):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            # Only bad input gets here. orjson's wording changes between its
            # versions, so the standard parser re-reads the text to name the
            # fault in the same words everywhere (or to accept what orjson
            # cannot hold, such as integers beyond 64 bits, for the checks below).
            pass
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileFormatError(path, f"byte {exc.start}", "not UTF-8 text; a profile is UTF-8 JSON") from None
    try:
        return json.loads(decoded, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ProfileFormatError(path, f"line {exc.lineno} column {exc.colno}", f"not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        # NaN/Infinity (refused below) or an integer literal beyond Python's digit limit.
        raise ProfileFormatError(path, "", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ProfileFormatError(path, "", "JSON nested too deeply") from None


#: orjson before 3.9.15 (CVE-2024-27454) has no depth limit when it reads: some 100,000 nested objects overflow
#: the C stack and end the process with SIGSEGV (arrays it reads fine). Deeper text goes to the standard parser.
_ORJSON_SAFE_DEPTH = 1000


def _objects_nested_deeper(text: bytes, limit: int) -> bool:
    """Whether ``{`` minus ``}`` counted from the start passes ``limit`` anywhere (braces in strings count too).

    An over-count only sends the text to the slower parser. The braces are
    picked out with ``bytes.translate`` (C speed), then counted with numpy.
    """
    if text.count(b"{") <= limit:
        return False
    braces = np.frombuffer(text.translate(None, _NOT_BRACES), np.uint8)
    depth = np.cumsum(np.where(braces == 0x7B, 1, -1).astype(np.int32))
    return bool(depth.max() > limit)


_NOT_BRACES = bytes(b for b in range(256) if b not in (0x7B, 0x7D))


def _refuse_constant(name: str) -> Any:
    # json.loads accepts NaN and Infinity, which are not JSON; orjson refuses them too.
    raise ValueError(f"{name} is not a JSON number")


def _is_int64(value: Any) -> bool:
    return type(value) is int and _INT64_MIN <= value <= _INT64_MAX


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object"}.get(
        type(value), type(value).__name__
    )


class _Builder:
    """Validates the document section by section while building arrays."""

    def __init__(self, doc: Any, path: str, sha256: str, extracted: Extracted | None = None) -> None:
        self.doc = doc
        self.path = path
        self.sha256 = sha256
        self.extracted = extracted

    # -- errors -------------------------------------------------------------

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
            self.fail(where, f"expected {what}, got {_kind(value)}")
        return value

    def int_at(self, value: Any, where: str, lo: int = 0, hi: int | None = None) -> int:
        self.check(value, where, (int,), "an integer")
        if value < lo:
            self.fail(where, f"{value} is below the minimum {lo}")
        if hi is not None and value > hi:
            self.fail(where, f"{value} is above the maximum {hi}")
        return int(value)

    # -- sections -----------------------------------------------------------

    def build(self) -> Profile:
        doc = self.check(self.doc, "", (dict,), "a JSON object at the top level")
        if "format" not in doc:
            self.fail("", 'missing required key "format"; is this a popliner profile?')
        fmt = doc["format"]
        if fmt != "popliner-profile":
            self.fail("format", f'expected "popliner-profile", got {json.dumps(fmt)}; is this a popliner profile?')
        if "version" not in doc:
            self.fail("", 'missing required key "version"')
        version = doc["version"]
        # true == 1 and 1.0 == 1 in Python; only the JSON integer 1 is version 1.
        if type(version) is not int or version != 1:
            self.fail("version", f"unsupported version {json.dumps(version)}; this popliner reads version 1")
        self.target = self.build_target(self.need(doc, "target", "", (dict,), "an object"))
        self.tiles = self.target.tiles_per_ipu
        steps_raw = self.need(doc, "steps", "", (list,), "a list of program ids")
        self.num_steps = len(steps_raw)
        self.contexts = self.build_contexts(self.need(doc, "debugContexts", "", (list,), "a list"))
        classes = self.build_classes(self.need(doc, "livenessClasses", "", (list,), "a list"))
        raw_vars = self.need(doc, "variables", "", (dict,), "an object")
        if self.extracted is not None and raw_vars != Extracted.VARIABLES_PLACEHOLDER:
            raise _NotFast
        variables = self.build_variables(raw_vars, len(classes[0]) - 1)
        self.num_vars = variables.count
        vertex_types = self.build_vertex_types(self.need(doc, "vertexTypes", "", (list,), "a list"))
        programs = self.build_programs(self.need(doc, "programs", "", (list,), "a list"), variables, vertex_types)
        controls = self.program_refs(self.need(doc, "controlPrograms", "", (list,), "a list"), "controlPrograms")
        steps = self.program_refs(steps_raw, "steps")
        tile_memory = self.build_tile_memory(doc.get("tileMemory"))
        source = doc.get("source")
        if source is None:
            source = {}
        self.check(source, "source", (dict,), "an object")
        return Profile(
            path=self.path,
            sha256=self.sha256,
            target=self.target,
            vertex_types=vertex_types,
            programs=programs,
            control_programs=controls,
            steps=steps,
            variables=variables,
            class_ptr=classes[0],
            iv_start=classes[1],
            iv_end=classes[2],
            contexts=self.contexts,
            tile_memory=tile_memory,
            source=source,
        )

    def build_target(self, t: dict[str, Any]) -> Target:
        tiles = self.int_at(self.need(t, "tilesPerIpu", "target", (int,), "an integer"), "target.tilesPerIpu", 1)
        if tiles > MAX_TILES:
            self.fail("target.tilesPerIpu", f"{tiles} tiles per IPU is beyond any IPU (limit {MAX_TILES})")
        num_tiles = self.int_at(self.need(t, "numTiles", "target", (int,), "an integer"), "target.numTiles", 1,
                                MAX_VALUE)
        num_ipus = self.int_at(self.need(t, "numIpus", "target", (int,), "an integer"), "target.numIpus", 1,
                               MAX_VALUE)
        bpt = self.int_at(self.need(t, "bytesPerTile", "target", (int,), "an integer"), "target.bytesPerTile", 1,
                          MAX_VALUE)
        clock = self.need(t, "clockFrequency", "target", (int, float), "a number")
        if not clock > 0 or clock != clock or clock == float("inf"):
            self.fail("target.clockFrequency", f"expected a positive frequency in Hz, got {clock}")
        arch = t.get("arch")
        if arch is not None:
            self.check(arch, "target.arch", (str,), "a string")
        if num_tiles != tiles:
            log.warning(
                "%s: target.numTiles (%d) differs from tilesPerIpu (%d): the profile covers several IPUs or "
                "replicas; popliner models one IPU and uses its first %d tiles",
                self.path, num_tiles, tiles, tiles,
            )
        return Target(tiles, num_tiles, num_ipus, bpt, float(clock), arch)

    def build_contexts(self, raw: list[Any]) -> Contexts:
        n = len(raw)
        ids = np.empty(n, np.int64)
        parent_ids: list[int | None] = []
        layers: list[str] = []
        names: list[str] = []
        data: list[dict[str, Any] | None] = []
        for i, c in enumerate(raw):
            where = f"debugContexts[{i}]"
            self.check(c, where, (dict,), "an object")
            ids[i] = self.int_at(self.need(c, "id", where, (int,), "an integer"), f"{where}.id", 0, 2**63 - 1)
            if "parent" not in c:
                self.fail(where, 'missing required key "parent" (null for a root)')
            par = c["parent"]
            if par is not None:
                self.int_at(par, f"{where}.parent", 0, 2**63 - 1)
            parent_ids.append(par)
            layers.append(self.need(c, "layer", where, (str,), "a string"))
            names.append(self.need(c, "name", where, (str,), "a string"))
            d = c.get("data")
            if d is not None:
                self.check(d, f"{where}.data", (dict,), "an object")
                inputs = d.get("inputs")
                if inputs is not None and not (isinstance(inputs, list) and all(isinstance(s, str) for s in inputs)):
                    self.fail(f"{where}.data.inputs", "expected a list of strings")
            data.append(d)
        index = self._index_of(ids, "debugContexts", "debug context")
        self.ctx_index = index
        parent = np.full(n, -1, np.int64)
        for i, par in enumerate(parent_ids):
            if par is not None:
                j = index.get(par)
                if j is None:
                    self.fail(f"debugContexts[{i}].parent", f"no debug context has id {par}")
                parent[i] = j
        self._check_context_cycles(parent)
        return Contexts(ids, parent, tuple(layers), tuple(names), tuple(data))

    def _index_of(self, ids: np.ndarray, section: str, what: str) -> dict[int, int]:
        index: dict[int, int] = {}
        for i, v in enumerate(ids.tolist()):
            if v in index:
                self.fail(f"{section}[{i}].id", f"{what} id {v} is used twice (also at {section}[{index[v]}])")
            index[v] = i
        return index

    def _check_context_cycles(self, parent: np.ndarray) -> None:
        # Follow parent links with a per-walk visited mark; a node reached again
        # within one walk is on a cycle. Finished nodes are skipped later.
        state = np.zeros(len(parent), np.int8)  # 0 new, 1 on current walk, 2 done
        par = parent.tolist()
        for start in range(len(par)):
            node, walk = start, []
            while node != -1 and state[node] == 0:
                state[node] = 1
                walk.append(node)
                node = par[node]
            if node != -1 and state[node] == 1:
                self.fail(f"debugContexts[{node}].parent", "the parent links form a cycle")
            for w in walk:
                state[w] = 2

    def build_classes(self, raw: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lens = np.zeros(len(raw), np.int64)
        flat: list[Any] = []
        for i, intervals in enumerate(raw):
            if not isinstance(intervals, list):
                self.fail(f"livenessClasses[{i}]", f"expected a list of [start, end] intervals, got {_kind(intervals)}")
            lens[i] = len(intervals)
            flat.extend(intervals)
        ptr = np.zeros(len(raw) + 1, np.int64)
        np.cumsum(lens, out=ptr[1:])
        if not flat:
            return ptr, np.zeros(0, np.int64), np.zeros(0, np.int64)
        try:
            arr = np.asarray(flat, dtype=np.int64)
            ok = arr.ndim == 2 and arr.shape[1] == 2 and all(type(v) is int for pair in flat for v in pair)
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            k = next((j for j, p in enumerate(flat) if not _is_int_pair(p)), -1)
            if k < 0:
                # Integer pairs that failed to convert: a bound beyond int64, far outside any step.
                k = next(j for j, p in enumerate(flat) if not all(map(_is_int64, p)))
                self.fail(self._class_place(ptr, k),
                          f"interval [{flat[k][0]}, {flat[k][1]}) is outside the steps [0, {self.num_steps})")
            self.fail(self._class_place(ptr, k), "expected an interval [start, end] of two integers")
        start, end = arr[:, 0], arr[:, 1]
        reversed_ = np.flatnonzero(end < start)
        if reversed_.size:
            k = int(reversed_[0])
            self.fail(self._class_place(ptr, k), f"interval [{start[k]}, {end[k]}) ends before it starts")
        bad = np.flatnonzero((start < 0) | (end > self.num_steps))
        if bad.size:
            k = int(bad[0])
            self.fail(
                self._class_place(ptr, k),
                f"interval [{start[k]}, {end[k]}) is outside the steps [0, {self.num_steps})",
            )
        return _merge_intervals(ptr, start, end)

    @staticmethod
    def _class_place(ptr: np.ndarray, k: int) -> str:
        c = int(np.searchsorted(ptr, k, side="right") - 1)
        return f"livenessClasses[{c}][{k - int(ptr[c])}]"

    def build_variables(self, v: dict[str, Any], num_classes: int) -> Variables:
        if self.extracted is not None:
            cols = self.extracted.columns
        else:
            cols = {}
            for key in ("id", "bytes", "tile", "class"):
                col = self.need(v, key, "variables", (list,), "a list of integers")
                cols[key] = self._int_column(col, f"variables.{key}")
        n = len(cols["id"])
        for key, arr in cols.items():
            if len(arr) != n:
                self.fail(f"variables.{key}", f"has {len(arr)} entries but variables.id has {n}")
        self._first_bad(cols["bytes"] < 0, "variables.bytes", "negative size")
        self._first_bad(cols["bytes"] > MAX_VALUE, "variables.bytes", f"size above {MAX_VALUE} bytes")
        self._first_bad((cols["tile"] < 0) | (cols["tile"] >= self.tiles), "variables.tile",
                        f"tile outside [0, {self.tiles})")
        self._first_bad((cols["class"] < 0) | (cols["class"] >= num_classes), "variables.class",
                        f"no such liveness class (there are {num_classes})")
        ids = cols["id"]
        # Ids 0..n-1 in order (the usual numbering): an id is its own index, nothing to scatter or gather.
        self.var_ids_in_order = _rising_from_zero(ids)
        order = np.arange(n, dtype=np.int64) if self.var_ids_in_order else _permutation_order(ids)
        self.var_ids_dense = order is not None
        if order is None:
            order = np.argsort(ids, kind="stable")
            dup = np.flatnonzero(ids[order][1:] == ids[order][:-1])
            if dup.size:
                i = int(order[dup[0] + 1])
                self.fail(f"variables.id[{i}]", f"variable id {ids[i]} is used twice")
        self.var_order = order
        # With ids 0..n-1 the sorted ids are 0..n-1 again and never read: no gather of n ids.
        self.var_sorted_ids = ids[:0] if self.var_ids_dense else ids[order]
        if self.extracted is not None:
            names, recompute = self._extracted_names(n)
        else:
            names = NameTable(*self._names(v.get("name"), n))
            recompute = recompute_tensors(names)
        return Variables(
            ids=ids,
            bytes=cols["bytes"],
            tile=cols["tile"].astype(np.int32),
            klass=cols["class"].astype(np.int32),
            names=names,
            recompute_tensor=recompute,
        )

    def _extracted_names(self, n: int) -> tuple[NameTable, np.ndarray]:
        """The names the column reader took out (packed already), and their recompute flags."""
        assert self.extracted is not None
        names = self.extracted.names
        if names is None:
            return NameTable(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)), np.zeros(n, bool)
        if len(names.ptr) != n + 1:
            raise _NotFast  # the ordinary path words the length mismatch
        assert self.extracted.recompute is not None
        return names, self.extracted.recompute

    def _names(self, names: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
        if names is None:
            return np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
        self.check(names, "variables.name", (list,), "a list of strings")
        if len(names) != n:
            self.fail("variables.name", f"has {len(names)} entries but variables.id has {n}")
        fast = _ascii_names(names, n)
        if fast is not None:
            return fast
        try:
            encoded = [s.encode("utf-8") for s in names]
        except AttributeError:
            k = next(i for i, s in enumerate(names) if not isinstance(s, str))
            self.fail(f"variables.name[{k}]", f"expected a string, got {_kind(names[k])}")
        except UnicodeEncodeError:
            k = next(i for i, s in enumerate(names) if not _encodable(s))
            self.fail(f"variables.name[{k}]", "not valid Unicode (a lone surrogate escape)")
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum([len(b) for b in encoded], out=ptr[1:])
        return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), ptr

    def _int_column(self, col: list[Any], where: str) -> np.ndarray:
        try:
            arr = np.asarray(col, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            k = next((i for i, x in enumerate(col) if not _is_int64(x)), 0)
            if k < len(col) and type(col[k]) is int:
                self.fail(f"{where}[{k}]", f"{col[k]} does not fit in a 64-bit integer")
            self.fail(f"{where}[{k}]", f"expected an integer, got {_kind(col[k]) if k < len(col) else 'nothing'}")
        if arr.ndim != 1:
            self.fail(where, "expected a flat list of integers")
        # Floats (and booleans) convert silently under dtype=int64: look for them explicitly.
        if len(col) and not _only_ints(col):
            k = next(i for i, x in enumerate(col) if type(x) is not int)
            self.fail(f"{where}[{k}]", f"expected an integer, got {_kind(col[k])}")
        return arr

    def _first_bad(self, mask: np.ndarray, where: str, problem: str) -> None:
        bad = np.flatnonzero(mask)
        if bad.size:
            self.fail(f"{where}[{int(bad[0])}]", problem)

    def build_vertex_types(self, raw: list[Any]) -> VertexTypes:
        names: list[str] = []
        sizes = np.zeros(len(raw), np.int64)
        code = RunTableBuilder()
        for i, vt in enumerate(raw):
            where = f"vertexTypes[{i}]"
            self.check(vt, where, (dict,), "an object")
            names.append(self.need(vt, "name", where, (str,), "a string"))
            sizes[i] = self.int_at(self.need(vt, "size", where, (int,), "an integer"), f"{where}.size", 0, MAX_VALUE)
            if "codeBytes" in vt:  # absent: like every TileVector, all zeros (a type no tile uses)
                code.add(*decode_tilevector(vt["codeBytes"], self.tiles, f"{where}.codeBytes", self.err))
            code.end_row()
        return VertexTypes(tuple(names), sizes, code.build())

    def build_programs(self, raw: list[Any], variables: Variables, vtypes: VertexTypes) -> Programs:
        n = len(raw)
        num_types = len(vtypes.names)
        try:
            rows = self._program_rows_bulk(raw, num_types)
        except _Slow:
            rows = self._program_rows(raw, num_types)  # finds and words the first problem, in document order
        index = self._index_of(rows.ids, "programs", "program")
        self.prog_index = index
        child_ptr, child_idx = self._children(rows.child_ids, index)
        _check_program_cycles(child_ptr, child_idx, self)
        var_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(rows.var_lens, out=var_ptr[1:])
        fast_lens = None if self.extracted is None else self.extracted.program_var_lens
        if fast_lens is not None:
            if rows.fast_count != len(fast_lens):
                raise _NotFast  # a list was taken from somewhere other than a program
            assert self.extracted is not None and self.extracted.program_vars is not None
            var_idx = self._var_positions(self.extracted.program_vars, var_ptr)
        else:
            var_idx = self._var_refs(rows.var_ids, var_ptr)
        return Programs(
            ids=rows.ids,
            type=rows.types,
            names=tuple(rows.names),
            child_ptr=child_ptr,
            child_idx=child_idx,
            context=rows.context,
            control=rows.tables["controlCode"],
            exchange=rows.tables["exchangeCode"],
            cycles=rows.tables["cycles"],
            vertices=rows.vertices,
            var_ptr=var_ptr,
            var_idx=var_idx,
            repeat_count=rows.repeat,
            has_cycles=rows.has_cycles,
        )

    def _program_rows(self, raw: list[Any], num_types: int) -> _ProgramRows:
        """Each program checked in turn, every problem worded where it is (the reference path)."""
        n = len(raw)
        ids = np.empty(n, np.int64)
        types = np.empty(n, np.int8)
        names: list[str] = []
        context = np.full(n, -1, np.int64)
        repeat = np.ones(n, np.int64)
        child_ids: list[list[Any]] = []
        var_ids: list[Any] = []
        var_lens = np.zeros(n, np.int64)
        tables = {k: RunTableBuilder() for k in _PROGRAM_VECTORS}
        verts = RunTableBuilder(keyed=True)
        has_cycles = False
        fast_lens = None if self.extracted is None else self.extracted.program_var_lens
        fast_count = 0
        for i, p in enumerate(raw):
            where = f"programs[{i}]"
            self.check(p, where, (dict,), "an object")
            ids[i] = self.int_at(self.need(p, "id", where, (int,), "an integer"), f"{where}.id", 0, 2**63 - 1)
            ptype = self.need(p, "type", where, (str,), "a string")
            code = TYPE_CODE.get(ptype)
            if code is None:
                self.fail(f"{where}.type", f'unknown program type "{ptype}"; expected one of {", ".join(TYPE_CODE)}')
            types[i] = code
            name = p.get("name", "")
            names.append(self.check(name, f"{where}.name", (str,), "a string"))
            children = p.get("children")
            if children is None:
                children = []
            self.check(children, f"{where}.children", (list,), "a list of program ids")
            child_ids.append(children)
            ctx = p.get("debugContext")
            if ctx is not None:
                self.int_at(ctx, f"{where}.debugContext", 0, 2**63 - 1)
                j = self.ctx_index.get(ctx)
                if j is None:
                    self.fail(f"{where}.debugContext", f"no debug context has id {ctx}")
                context[i] = j
            if "repeatCount" in p:
                repeat[i] = self.int_at(p["repeatCount"], f"{where}.repeatCount", 0, MAX_VALUE)
            for key, table in tables.items():
                if key in p:
                    table.add(*decode_tilevector_lists(p[key], self.tiles, f"{where}.{key}", self.err))
                table.end_row()
            has_cycles = has_cycles or "cycles" in p
            self._program_vertices(p.get("vertices"), where, num_types, verts)
            pvars = p.get("vars")
            if pvars is None:
                continue
            if fast_lens is not None:
                # The k-th list taken out of the document must be this program's, in order.
                if type(pvars) is not int or pvars != fast_count:
                    raise _NotFast
                var_lens[i] = fast_lens[fast_count]
                fast_count += 1
                continue
            self.check(pvars, f"{where}.vars", (list,), "a list of variable ids")
            var_ids.append(pvars)
            var_lens[i] = len(pvars)
        return _ProgramRows(ids, types, names, context, repeat, child_ids, var_ids, var_lens,
                            {k: t.build() for k, t in tables.items()}, verts.build(), has_cycles, fast_count)

    def _program_rows_bulk(self, raw: list[Any], num_types: int) -> _ProgramRows:
        """What :meth:`_program_rows` gives for a document in the usual form, with the TileVectors read in bulk.

        One light pass over the programs collects the TileVector objects;
        then each table's runs are checked and converted at once, with the
        same rules as :func:`decode_tilevector_lists` takes its shortcut
        under. Anything unusual (a problem, dense or unordered TileVectors)
        raises ``_Slow``, and the reference path reads the programs instead.
        """
        n = len(raw)
        ids: list[int] = []
        types: list[int] = []
        names: list[str] = []
        context: list[int] = []
        repeat: list[int] = []
        child_ids: list[list[Any]] = []
        var_ids: list[Any] = []
        var_lens: list[int] = []
        vectors: dict[str, tuple[list[int], list[Any]]] = {k: ([], []) for k in _PROGRAM_VECTORS}
        vert_rows: list[int] = []
        vert_keys: list[int] = []
        vert_objs: list[Any] = []
        has_cycles = False
        lens = None if self.extracted is None else self.extracted.program_var_lens
        fast_lens = None if lens is None else lens.tolist()  # None also when no program lists variables
        fast_count = 0
        ctx_index = self.ctx_index
        for i, p in enumerate(raw):
            if type(p) is not dict:
                raise _Slow
            pid, ptype, name = p.get("id"), p.get("type"), p.get("name", "")
            if type(pid) is not int or not 0 <= pid <= _INT64_MAX or type(ptype) is not str or type(name) is not str:
                raise _Slow
            code = TYPE_CODE.get(ptype)
            children = p.get("children", [])
            if code is None or type(children) is not list:
                raise _Slow  # (children null is read as none by the reference path)
            ctx = p.get("debugContext")
            j = -1
            if ctx is not None:
                j = ctx_index.get(ctx, -1) if type(ctx) is int else -1
                if j < 0:
                    raise _Slow
            count = 1
            if "repeatCount" in p:
                count = p["repeatCount"]
                if type(count) is not int or not 0 <= count <= MAX_VALUE:
                    raise _Slow
            for key, (rows, objs) in vectors.items():
                if key in p:
                    rows.append(i)
                    objs.append(p[key])
            if "cycles" in p:
                has_cycles = True
            verts = p.get("vertices")
            if verts is not None:
                if type(verts) is not list:
                    raise _Slow
                for entry in verts:
                    if type(entry) is not list or len(entry) != 2:
                        raise _Slow
                    vt = entry[0]
                    if type(vt) is not int or not 0 <= vt < num_types:
                        raise _Slow
                    vert_rows.append(i)
                    vert_keys.append(vt)
                    vert_objs.append(entry[1])
            pvars = p.get("vars")
            length = 0
            if pvars is not None:
                if fast_lens is not None:
                    if type(pvars) is not int or pvars != fast_count:
                        raise _Slow
                    length = fast_lens[fast_count]
                    fast_count += 1
                elif type(pvars) is list:
                    var_ids.append(pvars)
                    length = len(pvars)
                else:
                    raise _Slow
            ids.append(pid)
            types.append(code)
            names.append(name)
            context.append(j)
            repeat.append(count)
            child_ids.append(children)
            var_lens.append(length)
        tables = {k: _bulk_runs(rows, objs, None, n, self.tiles) for k, (rows, objs) in vectors.items()}
        return _ProgramRows(
            np.array(ids, np.int64), np.array(types, np.int8), names, np.array(context, np.int64),
            np.array(repeat, np.int64), child_ids, var_ids, np.array(var_lens, np.int64), tables,
            _bulk_runs(vert_rows, vert_objs, vert_keys, n, self.tiles), has_cycles, fast_count)

    def _program_vertices(self, raw: Any, where: str, num_types: int, out: RunTableBuilder) -> None:
        if raw is not None:
            self.check(raw, f"{where}.vertices", (list,), "a list of [vertexTypeId, TileVector]")
            for k, entry in enumerate(raw):
                at = f"{where}.vertices[{k}]"
                if not (isinstance(entry, list) and len(entry) == 2):
                    self.fail(at, "expected [vertexTypeId, TileVector]")
                vt = self.int_at(entry[0], f"{at}[0]", 0)
                if vt >= num_types:
                    self.fail(f"{at}[0]", f"no vertex type {vt} (there are {num_types})")
                first, stop, value = decode_tilevector_lists(entry[1], self.tiles, f"{at}[1]", self.err)
                out.add(first, stop, value, [vt] * len(first))
        out.end_row()

    def _children(self, child_ids: list[list[Any]], index: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
        lens = np.fromiter((len(c) for c in child_ids), np.int64, len(child_ids))
        ptr = np.zeros(len(child_ids) + 1, np.int64)
        np.cumsum(lens, out=ptr[1:])
        idx = np.empty(int(ptr[-1]), np.int64)
        k = 0
        for i, children in enumerate(child_ids):
            for j, cid in enumerate(children):
                if type(cid) is not int:
                    self.fail(f"programs[{i}].children[{j}]", f"expected a program id, got {_kind(cid)}")
                target = index.get(cid)
                if target is None:
                    self.fail(f"programs[{i}].children[{j}]", f"no program has id {cid}")
                idx[k] = target
                k += 1
        return ptr, idx

    def _var_refs(self, var_ids: list[Any], var_ptr: np.ndarray) -> np.ndarray:
        flat = list(itertools.chain.from_iterable(var_ids))
        if not flat:
            return np.zeros(0, np.int64)
        try:
            arr = np.asarray(flat, dtype=np.int64)
            ok = arr.ndim == 1 and _only_ints(flat)
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            k = next(i for i, x in enumerate(flat) if not _is_int64(x))
            p, j = self._var_place(var_ptr, k)
            if type(flat[k]) is int:  # beyond int64, so no variable can have it
                self.fail(f"programs[{p}].vars[{j}]", f"no variable has id {flat[k]}")
            self.fail(f"programs[{p}].vars[{j}]", f"expected a variable id, got {_kind(flat[k])}")
        return self._var_positions(arr, var_ptr)

    def _var_positions(self, arr: np.ndarray, var_ptr: np.ndarray) -> np.ndarray:
        """Variable ids (int64, in program order) to variable indices."""
        n = len(self.var_order)
        if self.var_ids_dense:
            # Ids 0..n-1: an id is its own position in sorted order, no search needed.
            if len(arr) and (int(arr.min()) < 0 or int(arr.max()) >= n):
                k = int(np.flatnonzero((arr < 0) | (arr >= n))[0])
                p, j = self._var_place(var_ptr, k)
                self.fail(f"programs[{p}].vars[{j}]", f"no variable has id {arr[k]}")
            if self.var_ids_in_order:
                return arr  # int64, made for this and held nowhere else
            dense: np.ndarray = np.asarray(self.var_order[arr], np.int64)  # int64 already: no second copy
            return dense
        pos = np.searchsorted(self.var_sorted_ids, arr)
        pos_clip = np.minimum(pos, max(len(self.var_sorted_ids) - 1, 0))
        found = (pos < len(self.var_sorted_ids)) & (self.var_sorted_ids[pos_clip] == arr) if len(
            self.var_sorted_ids) else np.zeros(len(arr), bool)
        if not found.all():
            k = int(np.flatnonzero(~found)[0])
            p, j = self._var_place(var_ptr, k)
            self.fail(f"programs[{p}].vars[{j}]", f"no variable has id {arr[k]}")
        return self.var_order[pos].astype(np.int64)

    @staticmethod
    def _var_place(var_ptr: np.ndarray, k: int) -> tuple[int, int]:
        p = int(np.searchsorted(var_ptr, k, side="right") - 1)
        return p, k - int(var_ptr[p])

    def program_refs(self, raw: list[Any], section: str) -> np.ndarray:
        out = np.empty(len(raw), np.int64)
        for i, pid in enumerate(raw):
            if type(pid) is not int:
                self.fail(f"{section}[{i}]", f"expected a program id, got {_kind(pid)}")
            j = self.prog_index.get(pid)
            if j is None:
                self.fail(f"{section}[{i}]", f"no program has id {pid}")
            out[i] = j
        return out

    def build_tile_memory(self, raw: Any) -> dict[str, np.ndarray] | None:
        if raw is None:
            return None
        self.check(raw, "tileMemory", (dict,), "an object")
        out: dict[str, np.ndarray] = {}
        tables: list[tuple[str, Any, str]] = []
        for key in ("alwaysLive", "notAlwaysLivePeak"):
            if key in raw:
                tables.append((key, raw[key], f"tileMemory.{key}"))
        cats = raw.get("categories", {})
        self.check(cats, "tileMemory.categories", (dict,), "an object")
        for name, vec in cats.items():
            tables.append((f"category.{name}", vec, f"tileMemory.categories.{name}"))
        for key, vec, where in tables:
            b = RunTableBuilder()
            b.add(*decode_tilevector(vec, self.tiles, where, self.err))
            b.end_row()
            out[key] = b.build().dense(0, self.tiles)
        return out


_PROGRAM_VECTORS = ("controlCode", "exchangeCode", "cycles")


class _Slow(Exception):
    """The bulk reading of the programs met something unusual: read them one by one instead."""


@dataclass
class _ProgramRows:
    """Everything read from the programs, row by row, before ids become positions."""

    ids: np.ndarray
    types: np.ndarray
    names: list[str]
    context: np.ndarray
    repeat: np.ndarray
    child_ids: list[list[Any]]
    var_ids: list[Any]  # the programs' own lists (ordinary path only)
    var_lens: np.ndarray
    tables: dict[str, RunTable]
    vertices: RunTable
    has_cycles: bool
    fast_count: int  # lists taken out by the column reader that the programs point at


def _slow(where: str, problem: str) -> Exception:
    return _Slow()


def _bulk_runs(rows: list[int], objs: list[Any], keys: list[int] | None, n: int, tiles: int) -> RunTable:
    """One table (a row per program) from TileVectors: dense, or ``{"runs": ...}`` or ``{"sparse": ...}`` in order.

    Accepts exactly what :func:`decode_tilevector_lists` reads without
    numpy (runs in order within tiles, sparse tiles ascending, values in
    range; dense lists go through the same :func:`dense_runs`) and gives the
    same runs, zero values dropped; raises ``_Slow`` on anything else.
    """
    runs_at: list[int] = []
    runs_lists: list[Any] = []
    sparse_at: list[int] = []
    sparse_lists: list[Any] = []
    dense_at: list[int] = []
    dense: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for k, obj in enumerate(objs):
        if type(obj) is list:  # a value per tile
            dense_at.append(k)
            dense.append(dense_runs(obj, tiles, "", _slow))
            continue
        if type(obj) is not dict or len(obj) != 1:
            raise _Slow
        runs = obj.get("runs")
        if type(runs) is list:
            runs_at.append(k)
            runs_lists.append(runs)
            continue
        sparse = obj.get("sparse")
        if runs is not None or type(sparse) is not list:
            raise _Slow
        sparse_at.append(k)
        sparse_lists.append(sparse)
    parts = [(runs_at, *_int_rows(runs_lists, 3))]
    if sparse_lists:
        # A sparse entry [tile, value] is the run [tile, tile + 1, value]; "tiles ascending
        # from 0" is then "each run starts at or after the previous one's stop".
        pairs, lens = _int_rows(sparse_lists, 2)
        parts.append((sparse_at, np.stack([pairs[:, 0], pairs[:, 0] + 1, pairs[:, 1]], axis=1), lens))
    if dense:
        parts.append((dense_at, np.stack([np.concatenate(c).astype(np.int64) for c in zip(*dense)], axis=1),
                      np.array([len(d[0]) for d in dense], np.int64)))
    arr, counts = _in_object_order(parts, len(objs))
    first, stop, value = arr[:, 0], arr[:, 1], arr[:, 2]
    prev = np.empty_like(stop)
    if len(prev):
        prev[1:] = stop[:-1]
        starts = np.cumsum(counts) - counts
        prev[starts[counts > 0]] = 0  # each TileVector's first run starts at or after tile 0
    ok = (first >= prev) & (first < stop) & (stop <= tiles) & (value >= 0) & (value <= MAX_VALUE)
    if not ok.all():
        raise _Slow
    keep = value != 0
    owner = np.repeat(np.array(rows, np.int64), counts)[keep]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    key = None if keys is None else np.repeat(np.array(keys, np.int64), counts)[keep].astype(np.int32)
    return RunTable(ptr=ptr, first=first[keep].astype(np.int32), stop=stop[keep].astype(np.int32),
                    value=value[keep], key=key)


def _int_rows(lists: list[Any], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Lists of ``width``-integer lists, back to back, as an int64 array; and how many rows each list had."""
    lens = np.fromiter(map(len, lists), np.int64, len(lists))
    rows = list(itertools.chain.from_iterable(lists))
    if not (set(map(type, rows)) <= {list} and set(map(len, rows)) <= {width}):
        raise _Slow
    flat = list(itertools.chain.from_iterable(rows))
    if not set(map(type, flat)) <= {int}:
        raise _Slow  # (booleans and floats included)
    try:
        return np.array(flat, np.int64).reshape(-1, width), lens
    except OverflowError:
        raise _Slow from None


def _in_object_order(parts: list[tuple[list[int], np.ndarray, np.ndarray]], count: int) -> tuple[
        np.ndarray, np.ndarray]:
    """Runs of several groups of objects (object positions, runs, runs per object) merged in object order."""
    if len(parts) == 1:
        return parts[0][1], parts[0][2]
    counts = np.zeros(count, np.int64)
    for at, _, lens in parts:
        counts[at] = lens
    owner = np.concatenate([np.repeat(np.array(at, np.int64), lens) for at, _, lens in parts])
    runs = np.concatenate([r for _, r, _ in parts])
    return runs[np.argsort(owner, kind="stable")], counts


def _only_ints(values: list[Any]) -> bool:
    """Every item is a Python int (not a bool, not a float): one C-level pass over the types."""
    return set(map(type, values)) <= {int}


def _rising_from_zero(ids: np.ndarray) -> bool:
    """``ids`` is exactly 0, 1, ..., n-1: n distinct rising integers from 0 to n-1 can be nothing else."""
    n = len(ids)
    return bool(n and int(ids[0]) == 0 and int(ids[-1]) == n - 1 and np.greater(ids[1:], ids[:-1]).all())


def _permutation_order(ids: np.ndarray) -> np.ndarray | None:
    """``argsort(ids)`` when the ids are exactly 0..n-1 (the usual numbering), else None.

    With no repeats the stable argsort is the inverse permutation, built in
    one scatter instead of a sort.
    """
    n = len(ids)
    if n == 0 or int(ids.min()) != 0 or int(ids.max()) != n - 1:
        return None
    seen = np.zeros(n, bool)
    seen[ids] = True
    if not seen.all():
        return None  # a repeated id: the sort path names it
    order = np.empty(n, np.int64)
    order[ids] = np.arange(n, dtype=np.int64)
    return order


def _ascii_names(names: list[Any], n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Name blob and offsets when every name is an ASCII string (one join, one encode), else None."""
    try:
        joined = "".join(names)
    except TypeError:
        return None  # a name that is not a string: the slow path names it
    if not joined.isascii():
        return None  # UTF-8 lengths differ from string lengths
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, names), np.int64, n), out=ptr[1:])
    # Encoded straight into a bytearray: a writable array with no second copy.
    return np.frombuffer(bytearray(joined, "ascii"), dtype=np.uint8), ptr


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_int_pair(p: Any) -> bool:
    return isinstance(p, list) and len(p) == 2 and all(type(v) is int for v in p)


def _merge_intervals(ptr: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort each class's intervals and merge overlaps, dropping empty ones.

    Liveness is the union of a class's intervals; merged, a sweep can add a
    class's bytes once per interval without double counting.
    """
    cls = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    keep = end > start
    cls, start, end = cls[keep], start[keep], end[keep]
    order = np.lexsort((start, cls))
    cls, start, end = cls[order], start[order], end[order]
    if len(cls) > 1:
        same = cls[1:] == cls[:-1]
        # Running max of ends within a class: offset each class so one global
        # maximum.accumulate cannot leak across class boundaries.
        offset = cls.astype(np.int64) * (int(end.max()) + 1)
        run_end = np.maximum.accumulate(end + offset) - offset
        new = np.ones(len(cls), bool)
        new[1:] = ~(same & (start[1:] <= run_end[:-1]))
        group = np.cumsum(new) - 1
        starts = start[new]
        ends = np.zeros(int(group[-1]) + 1, np.int64)
        np.maximum.at(ends, group, end)
        cls = cls[new]
        start, end = starts, ends
    new_ptr = np.zeros(len(ptr), np.int64)
    np.cumsum(np.bincount(cls, minlength=len(ptr) - 1), out=new_ptr[1:])
    return new_ptr, start.astype(np.int64), end.astype(np.int64)


def _check_program_cycles(child_ptr: np.ndarray, child_idx: np.ndarray, b: _Builder) -> None:
    """Iterative three-colour DFS over the whole program graph."""
    n = len(child_ptr) - 1
    colour = bytearray(n)  # 0 white, 1 grey (on stack), 2 black
    ptr = child_ptr.tolist()
    idx = child_idx.tolist()
    for root in range(n):
        if colour[root]:
            continue
        stack: list[tuple[int, int]] = [(root, ptr[root])]
        colour[root] = 1
        while stack:
            node, k = stack[-1]
            if k < ptr[node + 1]:
                stack[-1] = (node, k + 1)
                child = idx[k]
                if colour[child] == 1:
                    b.fail(f"programs[{node}].children[{k - ptr[node]}]",
                           f"program {b.doc['programs'][child].get('id')} is its own ancestor (cycle in the tree)")
                if colour[child] == 0:
                    colour[child] = 1
                    stack.append((child, ptr[child]))
            else:
                colour[node] = 2
                stack.pop()

