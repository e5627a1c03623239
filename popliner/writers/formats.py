"""Every output format popliner writes, and the one map from a file name's suffix to its writer.

What a writer is, how every command picks one from the name given to ``-o``
(or to a flag of its own, such as ``--trace``), and how a new format is one
module and one line in :data:`WRITERS`: docs/writers.md. The protocol is
:mod:`popliner.writers.writer`'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from popliner.errors import UsageProblem
from popliner.fileio import check_writable, is_stdout, writes_in_place
from popliner.writers.writer import Writer

__all__ = ["WRITERS", "check_output", "suffixes_for", "writer_among", "writer_for"]


def _declared(name: str, suffixes: tuple[str, ...], kinds: str, module: str, attr: str, *, binary: bool = False,
              newline: str | None = None) -> Writer:
    return Writer(name, suffixes, frozenset(kinds.split()), f"popliner.writers.{module}", attr, binary, newline)


#: The one map: every writer, each with the suffixes that choose it. A suffix may belong to two writers
#: only when they write different kinds (``.json``: a split or a simulation, an optimum IPU config, or a check's
#: result file).
WRITERS: Sequence[Writer] = (
    _declared("text", (".txt",), "Simulation CheckReport Tables", "text", "TEXT", newline=""),
    _declared("csv", (".csv",), "Tables", "tables", "CSV", newline=""),
    _declared("tsv", (".tsv",), "Tables", "tables", "TSV", newline=""),
    _declared("xlsx", (".xlsx",), "Tables", "xlsx", "XLSX", binary=True),
    _declared("json", (".json",), "Simulation SplitPlan PlanDocument", "jsondoc", "JSON"),
    _declared("trace", (".trace.json",), "Simulation", "trace", "TRACE"),
    _declared("yaml", (".yaml", ".yml"), "PipelineConfig", "pipeline_yaml", "YAML"),
    _declared("ipu_config", (".json",), "PipelineConfig", "ipu_config", "IPU_CONFIG"),
    _declared("html", (".html", ".htm"), "Report", "html", "HTML", newline=""),
    _declared("check_json", (".json",), "CheckReport", "check_json", "CHECK_JSON"),
    _declared("markdown", (".md", ".markdown"), "CheckReport", "check_md", "MARKDOWN"),
    _declared("junit", (".xml",), "CheckReport", "junit", "JUNIT", binary=True),
    _declared("png", (".png",), "Figure Simulation", "plots", "PNG", binary=True),
    _declared("svg", (".svg",), "Figure Simulation", "plots", "SVG", binary=True),
)


def suffixes_for(kind: str) -> tuple[str, ...]:
    """The suffixes that write ``kind``, in the map's order."""
    return tuple(dict.fromkeys(s for w in WRITERS if kind in w.kinds for s in w.suffixes))


def _listed(suffixes: Sequence[str]) -> str:
    return suffixes[0] if len(suffixes) == 1 else f"{', '.join(suffixes[:-1])} or {suffixes[-1]}"


def _by_name(name: str, kind: str) -> Writer:
    for w in WRITERS:
        if w.name == name and kind in w.kinds:
            return w
    raise KeyError(f"no {name} writer for {kind}")


def _claims(path: str | os.PathLike[str] | None) -> list[Writer] | None:
    """The writers of ``path``'s longest ending in the map; None for stdout (and a file written in place)."""
    if path is None or is_stdout(os.fspath(path)) or writes_in_place(os.fspath(path)):
        return None
    name = os.fspath(path).lower()
    claims = [(s, w) for w in WRITERS for s in w.suffixes if name.endswith(s)]
    longest = max((len(s) for s, _ in claims), default=0)
    return [w for s, w in claims if len(s) == longest]


def writer_for(path: str | os.PathLike[str] | None, kind: str, default: str, *, option: str = "-o",
               what: str = "") -> Writer:
    """The writer of ``path`` for a value of ``kind``: by its suffix; stdout and other names: ``default``.

    A suffix the map gives only to formats that do not write ``kind`` is refused, naming the suffixes that do.
    """
    return writer_among(path, (kind,), kind, default, option=option, what=what)[1]


def writer_among(path: str | os.PathLike[str] | None, kinds: Sequence[str], default_kind: str, default: str, *,
                 option: str = "-o", what: str = "") -> tuple[str, Writer]:
    """For a command that writes several kinds of value: the kind ``path`` asks for, and its writer.

    ``kinds`` are in order of preference: an ending two formats share goes to
    the first kind one of them writes (the main command's ``.json`` is its
    split JSON, never optimum's ``ipu_config.json``). Stdout and names the map
    does not know get ``default`` for ``default_kind``; an ending no format of
    ``kinds`` writes is refused, naming the endings that work.
    """
    claims = _claims(path)
    if not claims:
        return default_kind, _by_name(default, default_kind)
    for kind in kinds:
        for w in claims:
            if kind in w.kinds:
                return kind, w
    endings = tuple(dict.fromkeys(s for kind in kinds for s in suffixes_for(kind)))
    # The ending is one the map knows, for another kind of output: say so, so that the default for names
    # the map does not know ("any other name") does not read as if it applied to this one.
    ending = max((s for w in claims for s in w.suffixes if os.fspath(path or "").lower().endswith(s)), key=len)
    raise UsageProblem(f"{option} {os.fspath(path or '')}: {what or kinds[0]} can be written as {_listed(endings)}, "
                       f"not as {ending} ({_listed(tuple(w.name for w in claims))} output); a name with none of "
                       f"popliner's endings gets {_by_name(default, default_kind).name}")


def check_output(path: str | None, force: bool, kind: str, default: str, *, option: str = "-o",
                 what: str = "") -> Writer:
    """Before any work: the writer ``path`` gets, and that ``path`` can be written (suffix, folder, --force)."""
    w = writer_for(path, kind, default, option=option, what=what)
    if path:
        check_writable(path, force)
    return w
