"""Safe file writing: a temporary file in the target's folder, renamed into place.

An interrupted run (an error, Ctrl-C, a kill between write and rename) never
leaves a half-written file under the user's name, and an existing file is
only replaced when the caller says ``force=True``.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal, overload

from popliner.errors import OutputExistsError, UsageProblem

__all__ = ["atomic_write", "check_writable"]


def check_writable(path: str | os.PathLike[str], force: bool) -> Path:
    """Fail early, before any work, when ``path`` exists and ``force`` is off."""
    target = Path(path)
    if target.exists() and not force:
        raise OutputExistsError(str(target))
    if target.exists() and target.is_dir():
        raise UsageProblem(f"{target}: is a directory; give a file name")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise UsageProblem(f"{target}: folder {parent} does not exist; create it first")
    return target


@overload
def atomic_write(
    path: str | os.PathLike[str], *, force: bool, binary: Literal[False] = ..., newline: str | None = ...
) -> contextlib.AbstractContextManager[IO[str]]: ...


@overload
def atomic_write(
    path: str | os.PathLike[str], *, force: bool, binary: Literal[True], newline: str | None = ...
) -> contextlib.AbstractContextManager[IO[bytes]]: ...


def atomic_write(
    path: str | os.PathLike[str], *, force: bool, binary: bool = False, newline: str | None = None
) -> contextlib.AbstractContextManager[IO[str]] | contextlib.AbstractContextManager[IO[bytes]]:
    """Open a temporary file next to ``path``; on success rename it onto ``path``."""
    return _atomic(Path(path), force, binary, newline)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _atomic(target: Path, force: bool, binary: bool, newline: str | None) -> Iterator[IO]:  # type: ignore[type-arg]
    check_writable(target, force)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    tmp = Path(tmp_name)
    try:
        raw = os.fdopen(fd, "wb")
        stream: IO = raw if binary else io.TextIOWrapper(raw, encoding="utf-8", newline=newline)  # type: ignore[type-arg]
        with stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        # mkstemp creates 0600; give the file the mode a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        # Re-check at rename time: the file may have appeared while we worked.
        if target.exists() and not force:
            raise OutputExistsError(str(target))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
