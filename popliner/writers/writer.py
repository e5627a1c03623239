"""The writer protocol: one output format, and how a value goes through it into a file or stdout.

The map from file names to writers is :mod:`popliner.writers.formats`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from popliner.errors import OutputTooLarge, UsageProblem
from popliner.fileio import atomic_write, is_stdout

__all__ = ["Functions", "WriteFunction", "Writer", "json_of", "write_json", "write_output"]


#: One kind of value written to a stream: a function of the value and the stream.
WriteFunction = Callable[[Any, IO[Any]], None]
#: A format's functions, one per kind of value, by the name of the value's type (``Simulation``, ``Tables`` ...).
Functions = Mapping[str, WriteFunction]


@dataclass(frozen=True)
class Writer:
    """One output format: its name, the suffixes that choose it, how its file is opened, the kinds of value
    it writes, and the module attribute that holds its :data:`Functions`.

    The module is imported on the first write, not when the map of
    :mod:`popliner.writers.formats` is read: every command consults the map,
    and the HTML, XLSX and JUnit modules (with what they import) would cost a
    command that writes CSV tens of milliseconds. ``tests/test_writers.py``
    checks that each format's functions write exactly its ``kinds``.
    """

    name: str  # what messages and --format call it: csv, junit, png ...
    suffixes: tuple[str, ...]  # the file name endings that choose it, lower case with the dot (.trace.json)
    kinds: frozenset[str]
    module: str
    attr: str
    binary: bool = False  # bytes, or text
    newline: str | None = None  # the text stream's newline ("": the writer writes its line ends itself)

    def functions(self) -> Functions:
        """The format's functions, from its module."""
        found: Functions = getattr(importlib.import_module(self.module), self.attr)
        return found

    def write(self, value: Any, stream: IO[Any]) -> None:
        """Write ``value`` (of one of :attr:`kinds`) to ``stream``."""
        self.functions()[type(value).__name__](value, stream)


@contextlib.contextmanager
def _stream(path: str, force: bool, w: Writer) -> Iterator[IO[Any]]:
    if w.binary:
        with atomic_write(path, force=force, binary=True) as b:
            yield b
    else:
        with atomic_write(path, force=force, newline=w.newline) as t:
            yield t


def write_output(value: object, path: str | None, force: bool, w: Writer) -> None:
    """``value`` through ``w`` to ``path`` (stdout when None or ``-``), atomically."""
    try:
        with _stream(path or "-", force, w) as stream:
            w.write(value, stream)
    except OutputTooLarge as exc:  # refused before a byte was written: no file is left
        raise UsageProblem(f"{path if path and not is_stdout(path) else 'stdout'}: {exc}") from None


def write_json(document: dict[str, Any], stream: IO[str]) -> None:
    """A JSON document as popliner writes one: indented, keys in the document's order, a final newline."""
    json.dump(document, stream, indent=2, allow_nan=False)  # strict JSON: finite numbers only
    stream.write("\n")


def json_of(document: Callable[[Any], dict[str, Any]]) -> Callable[[Any, IO[str]], None]:
    """A writer's function for one kind of value: the JSON ``document`` makes of it, as :func:`write_json` writes."""
    return lambda value, stream: write_json(document(value), stream)
