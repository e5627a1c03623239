"""The one exception hierarchy of popliner.

Library code raises these; only the CLI (``popliner.cli``) turns them into a
one-line message on stderr and an exit code. Nothing here imports click.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DOES_NOT_FIT",
    "EXIT_NO_SPLIT",
    "ConfigError",
    "DoesNotFitError",
    "ExportError",
    "InfeasibleSplitError",
    "OutputExistsError",
    "PoplinerError",
    "ProfileFormatError",
    "UsageProblem",
]

#: Bad input: unreadable or invalid profile, config or option values.
EXIT_BAD_INPUT = 2
#: The input is valid but a checked stage does not fit (``popliner check``).
EXIT_DOES_NOT_FIT = 1
#: ``--solve`` found no split that fits (a best-effort split is still reported).
EXIT_NO_SPLIT = 3


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


class UsageProblem(PoplinerError):
    """Options that make no sense together or name things that do not exist."""


class OutputExistsError(PoplinerError):
    """Refusing to overwrite an existing file without ``--force``."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: file exists; pass --force to overwrite it")


class InfeasibleSplitError(PoplinerError):
    """No split of the layers fits the IPUs and memory given."""

    exit_code = EXIT_DOES_NOT_FIT


class DoesNotFitError(PoplinerError):
    """A checked split has a stage over its memory budget."""

    exit_code = EXIT_DOES_NOT_FIT


class ExportError(PoplinerError):
    """Exporting from Poplar's profile.pop/debug.cbor failed (e.g. no SDK)."""
