"""Every output file of popliner goes through here.

What happens to each kind of path (a regular file written to a temporary file
and renamed into place, a symbolic link never written through, ``-`` and the
standard streams, devices and FIFOs written into, what is refused), how an
interrupted run leaves no partial file, and the one-line messages for
``OSError``: docs/bad-inputs.md ('Outputs that cannot be written',
'Interrupted runs'). An ``OSError`` becomes :class:`~popliner.errors.OutputError`.

:func:`check_writable` runs the same checks up front (including creating and
removing a probe file in the folder) so that commands fail before any work or
any other output.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Literal, overload

from popliner.errors import OutputError, OutputExistsError, UsageProblem
from popliner.interrupts import uninterrupted

__all__ = ["STDOUT_NAMES", "append_whole", "atomic_write", "check_appendable", "check_writable", "describe_os_error",
           "distinct_files", "is_stdout", "one_stdout", "writes_in_place"]

#: Output names that mean standard output.
STDOUT_NAMES = frozenset({"-", "/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"})
_STDERR_NAMES = frozenset({"/dev/stderr", "/proc/self/fd/2", "/dev/fd/2"})

#: errno -> (cause, fix) for the one-line message.
_CAUSES: dict[int, tuple[str, str]] = {
    errno.EROFS: ("read-only file system", "write somewhere else or pass - for stdout"),
    errno.EACCES: ("permission denied", "write somewhere else or pass - for stdout"),
    errno.EPERM: ("operation not permitted (immutable or protected)", "write somewhere else or pass - for stdout"),
    errno.ENOSPC: ("no space left on device", "free some space or write somewhere else"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or write somewhere else"),
    errno.EFBIG: ("file too large for the file system or the file size limit (ulimit -f)",
                  "raise the limit or write somewhere else"),
    errno.EISDIR: ("is a directory", "give a file name"),
    errno.ENAMETOOLONG: ("file name too long", "use a shorter name"),
    errno.ENOENT: ("no such folder", "create the folder first"),
    errno.ENOTDIR: ("a part of the path is not a folder", "check the path"),
    errno.EIO: ("input/output error on the device", "check the disk or write somewhere else"),
    errno.EBADF: ("closed", "redirect it to a file"),
    errno.ENXIO: ("no reader on the other end", "start the reader first or write to a file"),
    errno.ETXTBSY: ("file is busy", "write somewhere else"),
    errno.ELOOP: ("too many levels of symbolic links", "check the path"),
}


def describe_os_error(exc: OSError, path: str) -> str:
    """``PATH: cause; fix`` for an OS error on an output."""
    return str(_os_error(exc, path))


def is_stdout(path: str | os.PathLike[str]) -> bool:
    """True for the names that mean standard output (``-``, ``/dev/stdout``)."""
    return os.fspath(path) in STDOUT_NAMES


def writes_in_place(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is stdout/stderr, a character device or a FIFO: written into, not replaced.

    Such names carry no suffix to take a format from; callers pick a default.
    """
    shown = os.fspath(path)
    if is_stdout(shown) or shown in _STDERR_NAMES:
        return True
    try:
        mode = os.lstat(shown).st_mode  # a link is replaced, not written into
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def one_stdout(outputs: Mapping[str, str | bool | None]) -> None:
    """Refuse, before any output, when more than one output would go to stdout.

    ``outputs``: how the user names each output (``"--trace -"``) -> its path
    (stdout when :func:`is_stdout`), or a bool for an output whose place is
    already known (the split JSON always goes to stdout).
    """
    taking = [what for what, where in outputs.items()
              if (is_stdout(where) if isinstance(where, str) else bool(where))]
    if len(taking) > 1:
        names = f"{', '.join(taking[:-1])} and {taking[-1]}"
        both = "both" if len(taking) == 2 else "all"
        raise UsageProblem(f"{names} would {both} go to stdout; give all but one of them a file name")


def _output_key(path: str) -> tuple[object, ...] | None:
    """What writing ``path`` replaces: the file or link there (device and inode), else the folder's real path
    and the name. None for what is written into, not replaced (stdout, a device, a FIFO)."""
    if writes_in_place(path):
        return None
    try:
        st = os.lstat(path)
        return ("inode", st.st_dev, st.st_ino)
    except (OSError, ValueError):
        absolute = os.path.abspath(path)
        return ("path", os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))


def _input_keys(path: str) -> set[tuple[object, ...]]:
    """The file an input names, and the link itself when it is one."""
    keys: set[tuple[object, ...]] = set()
    for look in (os.lstat, os.stat):
        try:
            st = look(path)
        except (OSError, ValueError):
            continue
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            keys.add(("inode", st.st_dev, st.st_ino))
    return keys


def distinct_files(inputs: Mapping[str, str | None], outputs: Mapping[str, str | None]) -> None:
    """Refuse, before any work, an output that is one of the inputs or another output of the same command.

    ``inputs`` and ``outputs``: how the user names each (``"--plot"``) -> its path (None: not given).
    Names are compared by what they lead to (``./x`` and ``x``, a hard link, a link to an input), so that
    no output replaces an input, even with ``--force``, and no output replaces another.
    """
    taken: dict[tuple[object, ...], str] = {}
    for what, path in inputs.items():
        for held in _input_keys(path) if path else ():
            taken.setdefault(held, f"the input {what}")
    for what, path in outputs.items():
        key = _output_key(path) if path else None
        if key is None:
            continue
        if key in taken:
            other = taken[key]
            if other.startswith("the input"):
                raise UsageProblem(f"{what} {path} is {other}; popliner never writes over its inputs, "
                                   "even with --force: give the output another name")
            raise UsageProblem(f"{what} {path} and {other} name the same file; give each output its own name")
        taken[key] = f"{what} {path}" if what != path else path


def _os_error(exc: OSError, shown: str) -> OutputError:
    cause, fix = _CAUSES.get(exc.errno or 0, ((exc.strerror or str(exc)).lower(), "write somewhere else"))
    return OutputError(shown, f"{cause}; {fix}")


def _kind(mode: int) -> str | None:
    """What a non-regular file is, or None for a regular file."""
    for test, name in ((stat.S_ISDIR, "is a directory"), (stat.S_ISBLK, "is a block device"),
                       (stat.S_ISSOCK, "is a socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISFIFO, "FIFO")):
        if test(mode):
            return name
    return None


def check_writable(path: str | os.PathLike[str], force: bool, *, suffixes: Iterable[str] | None = None,
                   what: str = "output") -> Path:
    """Fail early, before any work or output, when ``path`` cannot be written.

    Checks the suffix (when ``suffixes`` is given), that an existing regular
    file or a symbolic link is only replaced with ``force``, that the path is
    no directory, block device or socket, that the name is not too long, and
    that the folder exists and takes a new file (by creating and removing a
    probe). Returns the path that will be written.
    """
    shown = os.fspath(path)
    if suffixes is not None and not writes_in_place(shown):
        allowed = tuple(suffixes)
        if not shown.lower().endswith(allowed):
            raise UsageProblem(f"{shown}: {what} file names end in {' or '.join(allowed)}")
    if is_stdout(shown) or shown in _STDERR_NAMES:
        return Path(shown)
    if not shown:
        raise UsageProblem(f"empty {what} file name")
    real = Path(shown)
    try:
        st = os.lstat(real)  # the name itself: a symlink is not followed
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _os_error(exc, shown) from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        _refuse_device_link(real, shown)
        if not force:
            raise OutputError(shown, f"is a symbolic link (to {os.readlink(real)}); popliner does not write through "
                                     "links: pass --force to replace the link itself (its target is left alone), or "
                                     "give another name")
        st = None  # replaced like a file that is not there: the link goes, its target stays
    if st is not None:
        kind = _kind(st.st_mode)
        if kind in ("is a directory", "is a block device", "is a socket"):
            raise OutputError(shown, f"{kind}; give a file name")
        if kind is not None:
            return real  # a character device or FIFO: written into, never replaced
        if not force:
            raise OutputExistsError(shown)
    _check_folder(real, shown)
    return real


def _refuse_device_link(link: Path, shown: str) -> None:
    """A link to a device, FIFO, socket or folder is never replaced, even with --force (nor written through)."""
    try:
        kind = _kind(os.stat(link).st_mode)  # what the link leads to
    except (OSError, ValueError):
        return  # dangling: replaced (with --force) like a file
    if kind is not None:
        what = kind.removeprefix("is a ")
        raise OutputError(shown, f"is a symbolic link to a {what} ({os.readlink(link)}); popliner neither writes "
                                 "through links nor replaces links to devices: give the device's own name, "
                                 "or a file name")


def _in_system_folder(folder: Path) -> str | None:
    """The system folder that ``folder`` is (``/dev``) or is in (``/proc``), by its real path, or None.

    An existing character device or FIFO there is written into, but popliner creates and replaces nothing in
    them (as root, ``-o /dev/stdin --force`` replaced the system's link). /dev itself only: its subfolders such
    as /dev/shm are scratch space.
    """
    real = os.path.realpath(folder)
    if real == "/dev":
        return real
    return "/proc" if real == "/proc" or real.startswith("/proc/") else None


def _check_folder(real: Path, shown: str) -> None:
    parent = real.parent
    if not parent.is_dir():
        raise UsageProblem(f"{shown}: folder {parent} does not exist; create it first")
    system = _in_system_folder(parent)
    if system is not None:
        raise OutputError(shown, f"is in {system}, the system's folder of devices and processes; popliner writes "
                                 "into a device there but creates and replaces no file: write somewhere else")
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    if len(os.fsencode(real.name)) > name_max:
        raise OutputError(shown, f"file name too long (over {name_max} bytes); use a shorter name")
    try:
        # A probe file: the only sure test (root ignores permission bits, but
        # not a read-only mount, an immutable folder or a full inode table).
        with uninterrupted():  # created and removed as one step: a signal never leaves it behind
            fd, probe = tempfile.mkstemp(prefix=".popliner-probe.", suffix=".tmp", dir=parent)
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(probe)
    except OSError as exc:
        raise _os_error(exc, shown) from None


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
    """A stream for the output ``path``; see the module docstring for what each kind of path gets."""
    shown = os.fspath(path)
    if is_stdout(shown) or shown in _STDERR_NAMES:
        return _standard_stream(shown, binary)
    real = check_writable(shown, force)
    try:
        st = os.lstat(real)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        st = None  # with force: the temporary file is renamed over the link, never written through it
    if st is not None and not stat.S_ISREG(st.st_mode):
        return _direct(real, shown, binary, newline)
    return _atomic(real, shown, force, binary, newline, st)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _ours(exc: OSError, *names: Path) -> bool:
    """Whether an OSError is about our stream (no file name) or one of our files."""
    return exc.filename is None or str(exc.filename) in {str(n) for n in names}


def _wrap(raw: IO[bytes], binary: bool, newline: str | None) -> IO:  # type: ignore[type-arg]
    if binary:
        return raw
    return io.TextIOWrapper(raw, encoding="utf-8", newline=newline)  # type: ignore[type-var, unused-ignore]


@contextlib.contextmanager
def _atomic(target: Path, shown: str, force: bool, binary: bool, newline: str | None,
            existing: os.stat_result | None) -> Iterator[IO]:  # type: ignore[type-arg]
    # A short prefix keeps the temporary name within NAME_MAX whenever the target's is.
    tmp: Path | None = None
    try:
        with uninterrupted():  # the name is known to the cleanup below as soon as the file exists
            fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name[:40]}.", suffix=".tmp", dir=target.parent)
            tmp = Path(tmp_name)
        with _wrap(os.fdopen(fd, "wb"), binary, newline) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        # mkstemp creates 0600: keep the replaced file's mode, else what open() would give.
        os.chmod(tmp, stat.S_IMODE(existing.st_mode) if existing else 0o666 & ~_umask())
        # Re-check at rename time: the file (or a link) may have appeared while we worked.
        if os.path.lexists(target) and not force:
            raise OutputExistsError(shown)
        with uninterrupted():  # once renamed, the output is complete: no interrupt in between
            os.replace(tmp, target)
            tmp = None
    except OSError as exc:
        if isinstance(exc, OutputError) or not _ours(exc, target, tmp or target):
            raise
        raise _os_error(exc, shown) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


@contextlib.contextmanager
def _direct(target: Path, shown: str, binary: bool, newline: str | None) -> Iterator[IO]:  # type: ignore[type-arg]
    """Write straight into a character device or FIFO (nothing to replace, nothing to leave)."""
    try:
        raw = open(target, "wb")  # noqa: SIM115 - closed by the with below
        with _wrap(raw, binary, newline) as stream:
            yield stream
            stream.flush()
    except OSError as exc:
        if isinstance(exc, OutputError) or not _ours(exc, target):
            raise
        raise _os_error(exc, shown) from None


class _TextOnto(io.TextIOBase):
    """UTF-8 text onto a binary stream that it never closes (unlike TextIOWrapper).

    No newline translation is needed: on POSIX both ``newline=""`` and the
    default write ``\\n`` as is.
    """

    def __init__(self, buffer: IO[bytes]) -> None:
        super().__init__()
        self._buffer = buffer

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._buffer.write(text.encode("utf-8"))
        return len(text)

    def flush(self) -> None:
        if not self.closed:
            self._buffer.flush()

    def close(self) -> None:
        # Mark closed only: the buffer is sys.stdout's, and a failed flush was already reported.
        with contextlib.suppress(OSError, ValueError):
            super().close()


@contextlib.contextmanager
def _standard_stream(shown: str, binary: bool) -> Iterator[IO]:  # type: ignore[type-arg]
    """stdout or stderr, never closed; errors name ``stdout``/``stderr``."""
    to_stderr = shown in _STDERR_NAMES
    name = "stderr" if to_stderr else "stdout"
    text = sys.stderr if to_stderr else sys.stdout
    if text is None:
        raise OutputError(name, "closed; redirect it to a file or give a file name")
    try:
        text.flush()
        buffer: IO[bytes] = text.buffer
        yield buffer if binary else _TextOnto(buffer)  # type: ignore[misc]
        buffer.flush()
    except BrokenPipeError:
        raise  # the reader went away: the CLI exits quietly
    except OSError as exc:
        if isinstance(exc, OutputError) or exc.filename is not None:
            raise
        raise _os_error(exc, name) from None


def append_whole(path: str, text: str) -> None:
    """Append ``text`` to the file ``path`` in one write (a file another program hands us to add to, such as
    GitHub's ``$GITHUB_STEP_SUMMARY``): created if missing, never through a symbolic link, only a regular file.

    One ``O_APPEND`` write per chunk, and the chunks in a loop until all is written; an error before the first
    byte leaves the file as it was.
    """
    data = text.encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | getattr(os, "O_CLOEXEC", 0), 0o666)  # O_NONBLOCK: a FIFO without a reader fails, never hangs
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer to a link
            raise OutputError(path, "is a symbolic link; popliner does not write through links: give a file") from None
        raise _os_error(exc, path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutputError(path, "is not a regular file; give a file to append to")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        if isinstance(exc, OutputError):
            raise
        raise _os_error(exc, path) from None
    finally:
        os.close(fd)


def check_appendable(path: str) -> None:
    """Before any work: ``path`` can be appended to by :func:`append_whole` (a regular file or none, no link)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _check_folder(Path(path), path)
        return
    except OSError as exc:
        raise _os_error(exc, path) from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(path, "is a symbolic link; popliner does not write through links: give a file")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(path, "is not a regular file; give a file to append to")
