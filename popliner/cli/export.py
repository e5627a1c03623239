"""``popliner export PROFILE.pop DEBUG.cbor -o OUT.json[.gz]``: the thin click layer."""

from __future__ import annotations

from pathlib import Path

import click

from popliner.export import export_report
from popliner.fileio import distinct_files

__all__ = ["command"]


@click.command(
    "export",
    short_help="Convert Poplar's profile.pop + debug.cbor to a popliner profile (needs the Poplar SDK).",
)
@click.argument("profile", metavar="PROFILE.pop", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("debug_info", metavar="DEBUG.cbor", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o", "--output", required=True, metavar="OUT.json[.gz]",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The profile to write; gzip-compressed when the name ends in .gz.",
)
@click.option("-f", "--force", is_flag=True, help="Overwrite OUT if it exists.")
@click.option("--allow-flat-contexts", is_flag=True,
              help="Export even when libpva gives no debug context a `parents` attribute (names and layers "
                   "will be wrong).")
@click.option("--allow-missing-contexts", is_flag=True,
              help="Export even when most leaf programs have no debug context (popliner will group nothing).")
def command(profile: Path, debug_info: Path, output: Path, force: bool, allow_flat_contexts: bool,
            allow_missing_contexts: bool) -> None:
    """Convert a Poplar compilation report to popliner's profile format (v1).

    Run this where the Poplar SDK is enabled (`import pva` must work): it reads
    PROFILE.pop and DEBUG.cbor with libpva and streams the profile to OUT,
    showing progress on stderr. The result is read by every other popliner
    command and needs no SDK. A report compiled for several IPUs or with
    replication is exported for its first IPU only, with a warning.

    \b
    popliner export training/profile.pop training/debug.cbor -o bert.json.gz
    popliner bert.json.gz --solve --num-ipus 4
    """
    # Errors (no SDK, file exists, libpva failures) are PoplinerErrors; the
    # group turns them into one line and exit code 2. Success is logged.
    distinct_files({"PROFILE.pop": str(profile), "DEBUG.cbor": str(debug_info)}, {"-o": str(output)})
    export_report(profile, debug_info, output, force=force, allow_flat_contexts=allow_flat_contexts,
                  allow_missing_contexts=allow_missing_contexts)
