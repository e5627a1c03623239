"""The one exception hierarchy of popliner.

Library code raises these; only the CLI (``popliner.cli``) turns them into a
one-line message on stderr and an exit code. Nothing here imports click.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DOES_NOT_FIT",
    "EXIT_INTERNAL",
    "EXIT_NO_SPLIT",
    "EXIT_OK",
    "BaselineError",
    "ConfigError",
    "DoesNotFitError",
    "ExportError",
    "InfeasibleSplitError",
    "Interrupted",
    "OutputError",
    "OutputExistsError",
    "OutputTooLarge",
    "PoplinerError",
    "ProfileFormatError",
    "UsageProblem",
]

# The exit codes of the CLI (the table in README.md lists the same).
#: Success.
EXIT_OK = 0
#: ``popliner check`` found an IPU over its budget, or grown by more than ``--max-growth`` allows against its
#: ``--baseline``; used for nothing else.
EXIT_DOES_NOT_FIT = 1
#: Bad input, usage or OS error: unreadable or invalid profile, config or
#: option values, an output that cannot be written.
EXIT_BAD_INPUT = 2
#: ``--solve`` found no split that fits (a best-effort split is still reported).
EXIT_NO_SPLIT = 3
#: A bug in popliner (an exception nobody expected); BSD's EX_SOFTWARE.
EXIT_INTERNAL = 70


class PoplinerError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code: int = EXIT_BAD_INPUT


class ProfileFormatError(PoplinerError):
    """A profile that cannot be read or breaks format v1.

    The message names the file, the place in the document (``programs[3].children[1]``)
    and what is wrong.
    """

    def __init__(self, path: str, where: str, problem: str) -> None:
        self.path = path
        self.where = where
        self.problem = problem
        place = f" at {where}" if where else ""
        super().__init__(f"{path}{place}: {problem}")


class ConfigError(PoplinerError):
    """A pipeline config (YAML) that cannot be read or is inconsistent."""


class BaselineError(PoplinerError):
    """A ``--baseline`` result file that is missing, unreadable, or not comparable with this check."""


class UsageProblem(PoplinerError):
    """Options that make no sense together or name things that do not exist."""


class OutputTooLarge(UsageProblem):
    """An output longer than popliner would read back; the message has no path (the writer knows none):
    :func:`popliner.writers.writer.write_output` names the file."""


class OutputExistsError(PoplinerError):
    """Refusing to overwrite an existing file without ``--force``."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: file exists; pass --force to overwrite it")


class OutputError(PoplinerError, OSError):
    """An output that cannot be written: the OS refused (read-only, no space, ...) or it is no file.

    ``path`` is the name the user gave (``stdout`` for ``-``). Also an
    ``OSError``, so that library callers catching ``OSError`` still do.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


class InfeasibleSplitError(PoplinerError):
    """No split of the layers fits the IPUs and memory given."""

    exit_code = EXIT_NO_SPLIT


class DoesNotFitError(PoplinerError):
    """A checked split has a stage over its memory budget."""

    exit_code = EXIT_DOES_NOT_FIT


class ExportError(PoplinerError):
    """Exporting from Poplar's profile.pop/debug.cbor failed (e.g. no SDK)."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program was so that cleanup runs as for Ctrl-C.

    A KeyboardInterrupt subclass: every ``except Exception`` lets it through,
    exactly like Ctrl-C. The CLI exits with ``128 + signum``.
    """

    def __init__(self, signum: int, name: str) -> None:
        self.signum = signum
        self.name = name
        super().__init__(name)
