"""The writer protocol: one output format, and how a value goes through it into a file or stdout.

The map from file names to writers is :mod:`popliner.writers.formats`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from popliner.errors import OutputTooLarge, UsageProblem
from popliner.fileio import atomic_write, is_stdout

__all__ = ["FormatWriter", "Writer", "json_of", "write_json", "write_output"]


class Writer(Protocol):
    """One output format."""

    @property
    def name(self) -> str:
        """What messages and ``--format`` call it: ``csv``, ``junit``, ``png`` ..."""

    @property
    def suffixes(self) -> tuple[str, ...]:
        """The file name endings that choose it, in lower case with the dot (``.trace.json``)."""

    @property
    def binary(self) -> bool:
        """Whether it writes bytes (a stream of bytes) or text."""

    @property
    def newline(self) -> str | None:
        """The text stream's ``newline`` (``""``: the writer writes its line ends itself)."""

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds of value it writes: the names of their types."""

    def write(self, value: Any, stream: IO[Any]) -> None:
        """Write ``value`` (of one of :attr:`kinds`) to ``stream``."""


@dataclass(frozen=True)
class FormatWriter:
    """A :class:`Writer` from one function per kind of value."""

    name: str
    suffixes: tuple[str, ...]
    by_kind: Mapping[str, Callable[[Any, IO[Any]], None]] = field(repr=False)
    binary: bool = False
    newline: str | None = None

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(self.by_kind)

    def write(self, value: Any, stream: IO[Any]) -> None:
        self.by_kind[type(value).__name__](value, stream)


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
