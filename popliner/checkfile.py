"""Reading a result file of ``popliner check -o result.json`` back, as the baseline of another check.

Every fault is one :class:`~popliner.errors.BaselineError` line naming the
file, the place in it (``ipus[1].worst_tile_bytes``) and the fix. The file
is read whole but bounded: a result file is a few KB per IPU.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from popliner.checkrecord import CHECK_FORMAT, CHECK_VERSION, CheckedIpu, CheckRecord, LayerBytes
from popliner.errors import BaselineError
from popliner.memory.overflow import LiveVariable
from popliner.profile.limits import limit

__all__ = ["MAX_RESULT_BYTES_ENV", "read_record"]

#: The largest result file read (bytes), and the variable that raises it.
MAX_RESULT_BYTES_ENV = "POPLINER_MAX_RESULT_BYTES"

T = TypeVar("T")


def read_record(path: str) -> CheckRecord:
    """The check saved in ``path`` (a ``popliner check -o FILE.json``), checked field by field."""
    doc = _parse(path, _read(path))
    r = _Reader(path)
    r.need(isinstance(doc, dict), "", "not a JSON object; give a result file of `popliner check -o FILE.json`")
    if doc.get("format") != CHECK_FORMAT:
        r.fail("format", f"not a popliner check result (format {doc.get('format')!r}, expected {CHECK_FORMAT!r}); "
                         "give the file `popliner check -o FILE.json` wrote")
    if doc.get("version") != CHECK_VERSION:
        r.fail("version", f"result format version {doc.get('version')!r}; this popliner reads version "
                          f"{CHECK_VERSION}: write the baseline again with this popliner")
    profile = r.obj(doc, "profile")
    options = r.obj(doc, "options")
    ipus = r.items(doc, "ipus", lambda item, where: _ipu(r, item, where))
    return CheckRecord(
        popliner_version=r.string(doc, "popliner_version"), profile_path=r.string(profile, "path", "profile."),
        profile_sha256=r.string(profile, "sha256", "profile."),
        config_path=r.string(r.obj(doc, "config"), "path", "config."),
        mode=r.string(options, "mode", "options."), options=options, budget=r.whole(doc, "budget_bytes_per_tile"),
        ipus=tuple(ipus))


def _read(path: str) -> bytes:
    most = limit(MAX_RESULT_BYTES_ENV)
    try:
        with open(path, "rb") as f:
            data = f.read(most + 1)
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such file; give the result file the base branch's `popliner check -o "
                            "FILE.json` wrote (a first run has none: leave out --baseline)") from None
    except IsADirectoryError:
        raise BaselineError(f"{path}: is a folder; give the result file (FILE.json) in it") from None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}; check the path and "
                            "permissions") from None
    if len(data) > most:
        raise BaselineError(f"{path}: larger than {most:,} bytes; a check result is a few KB per IPU, so this is "
                            f"no result popliner wrote (if it is genuine, raise {MAX_RESULT_BYTES_ENV})")
    return data


def _parse(path: str, data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BaselineError(f"{path}: not UTF-8 text (byte {exc.start}); give the result file popliner wrote") from None
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{path} at line {exc.lineno} column {exc.colno}: not valid JSON: {exc.msg}; "
                            "give the result file popliner wrote") from None
    except RecursionError:
        raise BaselineError(f"{path}: JSON nested too deeply; give the result file popliner wrote") from None


def _ipu(r: _Reader, item: Any, where: str) -> CheckedIpu:
    r.need(isinstance(item, dict), where, "not an object")
    components = r.obj(item, "worst_tile_components", where)
    return CheckedIpu(
        ipu=r.whole(item, "ipu", where), layers=tuple(r.items(item, "layers", r.string_item, where)),
        worst_tile=r.whole(item, "worst_tile", where), worst_tile_bytes=r.whole(item, "worst_tile_bytes", where),
        budget=r.whole(item, "budget_bytes", where),
        components=tuple((str(k), r.whole(components, str(k), f"{where}worst_tile_components.")) for k in components),
        stash_entries=r.whole(item, "stash_entries", where),
        copy_buffer=r.whole(item, "copy_buffer_bytes_per_tile", where),
        layer_bytes=tuple(r.items(item, "layer_bytes", lambda x, w: LayerBytes(
            r.string(r.dict_item(x, w), "layer", w), r.whole(x, "total_bytes", w), r.whole(x, "worst_tile_bytes", w)),
            where)),
        peak_step=r.whole(item, "peak_step", where, low=-1),
        largest_live=tuple(r.items(item, "largest_live_variables", lambda x, w: LiveVariable(
            r.string(r.dict_item(x, w), "name", w), r.whole(x, "bytes", w)), where)))


class _Reader:
    """Typed fields of the document, each fault one line with its place."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> NoReturn:
        place = f" at {where.rstrip('.')}" if where else ""
        raise BaselineError(f"{self.path}{place}: {problem}")

    def need(self, ok: bool, where: str, problem: str) -> None:
        if not ok:
            self.fail(where, problem)

    def _get(self, doc: dict[str, Any], key: str, where: str) -> Any:
        if key not in doc:
            self.fail(f"{where}{key}", "missing; give a result file popliner wrote")
        return doc[key]

    def obj(self, doc: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
        return self.dict_item(self._get(doc, key, where), f"{where}{key}")

    def string(self, doc: dict[str, Any], key: str, where: str = "") -> str:
        return self.string_item(self._get(doc, key, where), f"{where}{key}")

    def whole(self, doc: dict[str, Any], key: str, where: str = "", *, low: int = 0) -> int:
        value = self._get(doc, key, where)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
        self.need(ok, f"{where}{key}", f"not a whole number of at least {low}")
        return int(value)

    def string_item(self, value: Any, where: str) -> str:
        self.need(isinstance(value, str), where, "not a string")
        return str(value)

    def dict_item(self, value: Any, where: str) -> dict[str, Any]:
        self.need(isinstance(value, dict), where, "not an object")
        return dict(value)

    def items(self, doc: dict[str, Any], key: str, read: Callable[[Any, str], T], where: str = "") -> list[T]:
        value = self._get(doc, key, where)
        self.need(isinstance(value, list), f"{where}{key}", "not a list")
        return [read(item, f"{where}{key}[{k}].") for k, item in enumerate(value)]
