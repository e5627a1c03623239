"""The click layer: parse options, call the library, write the results.

``popliner PROFILE [options]`` is the main command; further verbs
(``simulate``, ``check``, ``synth``, ``export``) are subcommands. Each
subcommand lives in its own module exposing ``command`` and is imported only
when used. This module is the one place where :class:`PoplinerError` turns
into a one-line message and an exit code.
"""

from __future__ import annotations

import contextlib
import copy as copy_module
import errno
import functools
import importlib
import io
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

import click

from popliner import __version__
from popliner.allocator import keep_freed_memory, no_huge_page_advice
from popliner.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    DoesNotFitError,
    InfeasibleSplitError,
    Interrupted,
    OutputError,
    PoplinerError,
)
from popliner.fileio import describe_os_error
from popliner.interrupts import in_uninterrupted
from popliner.textsafe import shown, shown_lines

__all__ = ["cli", "main"]

#: subcommand name -> module holding ``command``
SUBCOMMANDS: dict[str, str] = {
    "analyse": "popliner.cli.analyse",
    "cache": "popliner.cli.cache",
    "check": "popliner.cli.check",
    "config-from": "popliner.cli.config_from",
    "export": "popliner.cli.export",
    "plan": "popliner.cli.pod",
    "report": "popliner.cli.report",
    "simulate": "popliner.cli.simulate",
    "synth": "popliner.cli.synth",
}
DEFAULT_COMMAND = "analyse"
log = logging.getLogger("popliner")


class PoplinerFailure(click.ClickException):
    """A failure on its way out: one line on stderr, the error's exit code.

    A ``verdict`` (the split does not fit: exits 1 and 3) is no error of the user's: its line goes out as a
    log line at error level, without "error:", and none when the outputs already said it.
    """

    def __init__(self, message: str, exit_code: int, *, verdict: bool = False) -> None:
        super().__init__(message)
        # click 8.5 declares exit_code a class variable; this failure's code is chosen per instance, and click
        # reads it from the instance when it exits.
        object.__setattr__(self, "exit_code", exit_code)
        self.verdict = verdict

    def show(self, file: Any = None) -> None:
        if self.message and self.verdict:
            log.error("%s", self.message)
        elif self.message:
            # One line whatever a name in it holds: control, bidi and line-break characters escaped.
            click.echo(f"popliner: error: {shown(self.format_message())}", err=True)


class QuietExit(Exception):
    """Leave with ``exit_code`` and no message (the reader of stdout went away)."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


#: Exit code when the reader of stdout closed the pipe: what a shell reports for SIGPIPE.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


def failure_for(exc: BaseException) -> PoplinerFailure | QuietExit:
    """THE mapping from an exception to a one-line message and an exit code (see README, Exit codes)."""
    if isinstance(exc, (PoplinerFailure, QuietExit)):
        return exc
    if isinstance(exc, (DoesNotFitError, InfeasibleSplitError)):
        return PoplinerFailure(str(exc), exc.exit_code, verdict=True)
    if isinstance(exc, PoplinerError):
        return PoplinerFailure(str(exc), exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        name = exc.name if isinstance(exc, Interrupted) and signum != signal.SIGINT else "Ctrl-C"
        return PoplinerFailure(f"interrupted; no partial output file was left behind ({name})", 128 + signum)
    if isinstance(exc, click.Abort):
        cause = exc.__cause__ or exc.__context__
        return failure_for(cause if isinstance(cause, KeyboardInterrupt) else KeyboardInterrupt())
    if isinstance(exc, click.UsageError):
        return PoplinerFailure(_usage_line(exc), EXIT_BAD_INPUT)
    if isinstance(exc, click.ClickException):
        return PoplinerFailure(exc.format_message(), exc.exit_code)
    if isinstance(exc, BrokenPipeError):
        return QuietExit(EXIT_BROKEN_PIPE)
    if isinstance(exc, OSError):
        return PoplinerFailure(_os_line(exc), EXIT_BAD_INPUT)
    if isinstance(exc, MemoryError):
        return PoplinerFailure("out of memory; try a smaller profile or fewer outputs at once", EXIT_BAD_INPUT)
    # The default level is INFO (progress lines); only -v (DEBUG) adds the traceback for the bug report.
    verbose = log.isEnabledFor(logging.DEBUG)
    if verbose:
        # Through click, like the error line after it: the same stream, flushed in the same order.
        click.echo("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), err=True, nl=False)
    where = "" if verbose else "; rerun with -v for the traceback"
    return PoplinerFailure(f"internal error (a bug in popliner {__version__}): {type(exc).__name__}: "
                           f"{_one_line(str(exc))}; please report it with the command line{where}", EXIT_INTERNAL)


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


def _usage_line(exc: click.UsageError) -> str:
    message = _one_line(exc.format_message())
    command = exc.ctx.command_path if exc.ctx is not None else "popliner"
    return f"{message} (see `{command} --help`)"


def _os_line(exc: OSError) -> str:
    """An OS error that escaped the output layer: on a named file, or on stdout (no file name)."""
    if exc.filename is not None:
        return describe_os_error(exc, os.fspath(exc.filename)).replace("; write somewhere else or pass - for stdout",
                                                                       "; check the path and its permissions")
    buffer = getattr(sys.stdout, "buffer", None)
    if isinstance(buffer, io.BufferedWriter) and isinstance(buffer.raw, _StdoutRaw):
        # stdout errors arrive as OutputError; this one is about some other (temporary) file.
        cause = describe_os_error(exc, "").split(";")[0].lstrip(": ")
        return f"{cause} (writing a temporary file); free some space or set TMPDIR to a roomier folder"
    cause = describe_os_error(exc, "stdout").split(";")[0]
    return f"{cause}; redirect stdout somewhere else"


def translate_errors(invoke: Any) -> Any:
    """Run ``invoke`` turning every exception but SystemExit into :class:`PoplinerFailure`."""
    try:
        return invoke()
    except (click.exceptions.Exit, QuietExit, SystemExit):
        raise
    except BaseException as exc:
        raise failure_for(exc) from None


#: While a signal waits for an import to finish, how often we look again (seconds).
_IMPORT_RETRY_S = 0.01


def _importing(frame: FrameType | None) -> bool:
    """Whether the interrupted code runs inside an import (module code or an extension's init)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def signals_interrupt(then_ignore: bool = False) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted`; later signals wait for the cleanup.

    A signal that arrives during an import, or during a step marked
    :func:`~popliner.interrupts.uninterrupted`, is kept and raised, via a short
    SIGALRM timer, once that is over (if the run ends first, its outputs are
    complete and it exits as it would have). Why not inside an import (orjson's
    init, SIGSEGV): docs/bad-inputs.md ('Interrupted runs').

    ``then_ignore``: on the way out, ignore the signals instead of restoring the old handlers (the
    process is about to exit and its work is complete or cleaned up; a late signal changes nothing).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def raise_when_safe(frame: FrameType | None) -> None:
        if _importing(frame) or in_uninterrupted():
            signal.setitimer(signal.ITIMER_REAL, _IMPORT_RETRY_S)
            return
        raise Interrupted(pending[0], signal.Signals(pending[0]).name)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for s in _SIGNALS:  # a second signal must not cut the removal of temporary files short
            signal.signal(s, signal.SIG_IGN)
        pending.append(signum)
        raise_when_safe(frame)

    def retry(signum: int, frame: FrameType | None) -> None:
        if pending:
            raise_when_safe(frame)

    previous = {s: signal.signal(s, interrupt) for s in _SIGNALS}
    previous_alarm = signal.signal(signal.SIGALRM, retry)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_alarm)
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_IGN if then_ignore else handler)


def _flush_stdout() -> None:
    if sys.stdout is not None:
        sys.stdout.flush()


def _silence_stdout() -> None:
    """After stdout failed, point fd 1 at /dev/null so the interpreter's last flush stays quiet."""
    if sys.stdout is None or not (sys.stdout is sys.__stdout__ or _REPLACED):
        return
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class _ClosedStdout(io.TextIOBase):
    """Stands for a stdout that was closed before we started (``>&-``): writing fails with EBADF."""

    encoding = "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "Bad file descriptor")

    @property
    def buffer(self) -> Any:
        return self


class _StdoutRaw(io.FileIO):
    """fd 1, whose write errors say they are about stdout (other unnamed OSErrors are not)."""

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError("stdout", describe_os_error(exc, "stdout").split(": ", 1)[1].split(";")[0]
                              + "; redirect stdout somewhere else") from None


_REPLACED: list[Any] = []


def _guard_stdout() -> None:
    """Put :class:`_StdoutRaw` under the real sys.stdout; a closed stdout gets a stand-in."""
    out = sys.stdout
    if out is None:
        sys.stdout = _ClosedStdout()
        return
    if out is not sys.__stdout__ or not isinstance(out, io.TextIOWrapper):
        return  # tests (CliRunner) or an embedding program own stdout
    try:
        fd = out.fileno()
        out.flush()
    except (OSError, ValueError):
        return
    raw = _StdoutRaw(fd, "w", closefd=False)
    _REPLACED.append(out)  # keep it alive: collecting it would close fd 1
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=out.encoding, errors=out.errors,
                                  line_buffering=out.line_buffering)


def _quiet_unraisable(info: Any) -> None:
    """Errors in finalizers (a half-written zip closing) after the one-line message: debug log only."""
    log.debug("ignored in %r: %s", info.object, info.exc_value)


def run_standalone(call: Any) -> int:
    """Run the CLI; every outcome becomes an exit code, every error one line on stderr."""
    _guard_stdout()
    sys.unraisablehook = _quiet_unraisable
    try:
        with signals_interrupt(then_ignore=bool(_REPLACED)):
            try:
                rv = call()
                _flush_stdout()
            except SystemExit as exc:
                _flush_stdout()  # e.g. the split JSON before exit 3
                raise exc
        return rv if isinstance(rv, int) else EXIT_OK
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_BAD_INPUT)
    except BaseException as exc:  # noqa: BLE001 - this is the one place every error ends up
        failure = failure_for(exc)
        with contextlib.suppress(Exception):
            _flush_stdout()  # what was written so far, if stdout still takes it
        _silence_stdout()  # and no second error from the interpreter's last flush
        if isinstance(failure, QuietExit):
            return failure.exit_code
        failure.show()
        return failure.exit_code


class PoplinerGroup(click.Group):
    """A group whose first argument may be a profile instead of a verb.

    ``popliner model.json --solve`` runs the default command (``analyse``);
    ``popliner simulate cfg.yaml`` runs a subcommand. Subcommands are imported
    lazily so that ``popliner --help`` and a plain run do no extra work.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = SUBCOMMANDS.get(cmd_name)
        if module is None:
            return None
        try:
            command: click.Command = importlib.import_module(module).command
        except ModuleNotFoundError as exc:
            if exc.name == module:
                return None
            raise
        return _with_verbosity(command)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in SUBCOMMANDS:
            args = [DEFAULT_COMMAND, *args]
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        return translate_errors(lambda: super(PoplinerGroup, self).invoke(ctx))

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """click's main, with the outcomes (errors, signals, exit codes) handled by :func:`run_standalone`."""
        run = functools.partial(super().main, args, prog_name or "popliner", complete_var, False, **extra)
        if not standalone_mode:
            return run()
        sys.exit(run_standalone(run))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["popliner.argv"] = list(args)  # for the exact commands in next-step hints
        args = _hoist_verbosity(args)
        # Options meant for the default command (`popliner -o x.csv prof.json`)
        # go through to it; `popliner --version` and `--help` stay ours.
        first_other = next((i for i, a in enumerate(args) if a not in _GROUP_OPTIONS), len(args))
        if first_other < len(args) and args[first_other].startswith("-"):
            args = [*args[:first_other], DEFAULT_COMMAND, *args[first_other:]]
        return super().parse_args(ctx, args)


_VERBOSITY = {"-q", "--quiet", "-v", "--verbose", "-vv", "-vvv"}
_VERBOSE_HELP = "More log output on stderr (-vv for debug)."
_QUIET_HELP = "Only errors on stderr."


def _with_verbosity(command: click.Command) -> click.Command:
    """A copy of ``command`` whose --help lists -v/-q, which work on every command.

    :func:`_hoist_verbosity` hands them to the group wherever they stand, so the copies' own
    -v/-q never receive a value: they are there for the help page.
    """
    shown_too = [click.Option(["-v", "--verbose"], count=True, expose_value=False, help=_VERBOSE_HELP),
                 click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, help=_QUIET_HELP)]
    copy = copy_module.copy(command)
    copy.params = [*command.params, *shown_too]
    if isinstance(command, click.Group):
        assert isinstance(copy, click.Group)
        copy.commands = {name: _with_verbosity(sub) for name, sub in command.commands.items()}
    return copy
_GROUP_OPTIONS = _VERBOSITY | {"--help", "-h", "--version"}


def _hoist_verbosity(args: list[str]) -> list[str]:
    """Accept -v/-q anywhere on the line (before ``--``), as users type them."""
    end = args.index("--") if "--" in args else len(args)
    moved = [a for a in args[:end] if a in _VERBOSITY]
    kept = [a for a in args[:end] if a not in _VERBOSITY]
    return moved + kept + args[end:]


@click.group(cls=PoplinerGroup, context_settings={"help_option_names": ["-h", "--help"]},
             invoke_without_command=False)
@click.version_option(__version__, prog_name="popliner")
@click.option("-v", "--verbose", count=True, help=_VERBOSE_HELP)
@click.option("-q", "--quiet", is_flag=True, help=_QUIET_HELP)
def cli(verbose: int, quiet: bool) -> None:
    """Split a model too large for one IPU into a pipeline over several IPUs.

    \b
    popliner PROFILE [options]               analyse a profile (`popliner analyse --help`)
    popliner PROFILE --solve --num-ipus 4    split it over at most 4 IPUs
    popliner simulate PIPELINE.yaml          one step of the pipeline, simulated
    popliner check PIPELINE.yaml --profile PROFILE    CI gate: exit 1 if an IPU is over
    popliner check REVIEW.xlsx --profile PROFILE      the split typed into the workbook
    popliner report PIPELINE.yaml --profile PROFILE -o report.html    HTML review
    popliner plan PROFILE --ipus 16          every pod configuration, fastest first
    popliner config-from REVIEW.xlsx -o PIPELINE.yaml   the workbook's split as a config
    popliner synth --preset NAME -o PROFILE  a synthetic profile (--list-presets)
    popliner export profile.pop debug.cbor -o PROFILE   from Poplar (needs the SDK)
    popliner cache info|clear                where the cache is, how big; empty it

    -v and -q work on every command, wherever they stand on the line.
    """
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose + 1, 2)]
    setup_logging(level)
    # The first line under -vv: the run is under way (signal handlers are installed; tests wait for it).
    log.debug("popliner %s, pid %d: %s", __version__, os.getpid(), " ".join(sys.argv[1:]))


def setup_logging(level: int) -> None:
    """Package logger to stderr; configured here only, never in the library."""
    logger = logging.getLogger("popliner")
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ShownFormatter("popliner: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    # matplotlib's own log lines ("created a temporary cache directory" when HOME is read-only) say nothing
    # about the user's run: shown only with -v.
    logging.getLogger("matplotlib").setLevel(logging.WARNING if level <= logging.DEBUG else logging.ERROR)


class _ShownFormatter(logging.Formatter):
    """Log lines safe for a terminal: names from files cannot colour, retitle, reorder or forge lines.

    String arguments (the names, as ``log.info("... %s", name)`` passes them) are shown on one line with
    every non-printable character escaped; in the whole message only its own line breaks survive.
    """

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(record.args, tuple) and record.args:
            record = logging.makeLogRecord(record.__dict__)
            record.args = tuple(shown(a) if isinstance(a, str) else a for a in record.args)  # type: ignore[union-attr]
        return shown_lines(super().format(record))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    keep_freed_memory()  # this process only: the library never changes it (see popliner/allocator.py)
    no_huge_page_advice()
    cli.main(args=argv, prog_name="popliner")
