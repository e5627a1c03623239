"""What an export checks before and after it writes: libpva present and working, inputs, debug contexts.

Each problem is one line naming the file and the fix (:class:`popliner.errors.ExportError`).
The debug-context checks run on the written document, before it is renamed
into place: a profile whose programs or contexts libpva left bare would load
but split wrongly, without any other sign.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from popliner.errors import ExportError
from popliner.export.collect import ContextCollector

if TYPE_CHECKING:
    from popliner.export.programs import ProgramsSection

__all__ = ["SDK_MESSAGE", "check_context_tree", "check_inputs", "check_program_contexts", "load_pva",
           "open_report"]

log = logging.getLogger("popliner.export")

SDK_MESSAGE = (
    "popliner export reads profile.pop and debug.cbor through libpva, the Poplar SDK's Python module "
    "`pva`, which cannot be imported here: source the Poplar SDK's enable.sh (e.g. "
    "`source <sdk>/enable.sh`) so that `import pva` works, then run the export again"
)


def load_pva(module: Any = None) -> Any:
    """The libpva module: ``module`` when given, else ``import pva``."""
    if module is not None:
        return module
    try:
        import pva  # type: ignore[import-not-found, unused-ignore]  # only inside a Poplar SDK
    except ImportError as exc:
        log.debug("import pva failed: %s", exc)
        raise ExportError(SDK_MESSAGE) from None
    except Exception as exc:  # noqa: BLE001 - a broken SDK install can raise anything at import
        log.debug("import pva failed", exc_info=True)
        where = getattr(exc, "filename", None)
        raise ExportError(f"`import pva` failed with {type(exc).__name__}: {_first_line(exc)}"
                          + (f" (in {where})" if where else "")
                          + "; the Poplar SDK's Python module is broken or not the one you meant: check "
                          "that the SDK's enable.sh was sourced for this Python") from None
    return pva


def check_context_tree(contexts: ContextCollector, profile: Path, allow_flat: bool) -> None:
    """Refuse (or warn, with ``allow_flat``) when libpva gave no parent links at all.

    Layers and operation names come from a context's ancestors, so without
    the links the split would come out different without any other sign. A
    root is legal (TensorFlow's ``xla_op`` contexts are roots):
    docs/libpva-mapping.md ('What the export refuses').
    """
    if contexts.count == 0 or contexts.any_linked:
        return
    problem = (f"{profile}: none of the {contexts.count:,} debug contexts has a `parents` attribute (libpva gave no "
               "parent links), so operations would get wrong names and layers")
    if not allow_flat:
        raise ExportError(problem + "; pass --allow-flat-contexts to export anyway")
    log.warning("%s; exported anyway (--allow-flat-contexts)", problem)


def check_program_contexts(programs: ProgramsSection, profile: Path, allow_missing: bool) -> None:
    """Refuse (or warn, with ``allow_missing``) when most programs an operation can own got no debug context.

    popliner groups programs into operations, and operations into layers,
    by their debug contexts: a profile without them loads, but every program
    is unattributed and nothing can be split. Which programs are counted, and
    why: docs/libpva-mapping.md ('What the export refuses').
    """
    total, with_context = programs.ownable, programs.ownable_with_context
    if total == 0 or 2 * with_context >= total:
        return
    if programs.own_attribute and programs.with_context == 0:
        source = "their `debugContext` is empty on every program"
    elif programs.own_attribute:
        source = "libpva gave them none"
    elif programs.program_contexts.has_analysis:
        source = "programs carry no `debugContext` attribute and pva.OperationAnalysis lists them under no operation"
    else:
        source = "programs carry no `debugContext` attribute and pva has no OperationAnalysis"
    problem = (f"{profile}: {total - with_context:,} of {total:,} leaf programs have no debug context ({source}), "
               f"so popliner would group {'nothing' if with_context == 0 else 'most programs into no operation'} "
               "and could not split the model; export with the debug.cbor written by the same compilation "
               "(POPLAR_ENGINE_OPTIONS autoReport.outputDebugInfo)")
    if not allow_missing:
        raise ExportError(problem + ", or pass --allow-missing-contexts to export anyway")
    log.warning("%s; exported anyway (--allow-missing-contexts)", problem)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def check_inputs(profile: Path, debug: Path) -> None:
    """Both inputs are files, given in the order the command takes them."""
    for path, what in ((profile, "Poplar profile (profile.pop)"), (debug, "debug information (debug.cbor)")):
        if not path.is_file():
            raise ExportError(f"{path}: no such file; expected the {what}")
    if profile.suffix.lower() == ".cbor" and debug.suffix.lower() == ".pop":
        raise ExportError(f"{profile} and {debug} look swapped: give profile.pop first, then debug.cbor")


def open_report(pva: Any, profile: Path, debug: Path) -> Any:
    """libpva's report of the compilation; any failure of libpva's is one line."""
    opener = getattr(pva, "openReport", None)
    if opener is None:
        raise ExportError("the importable `pva` module has no openReport(); is it the Poplar SDK's libpva?")
    try:
        return opener(str(profile), str(debug))
    except Exception as exc:  # noqa: BLE001 - libpva's exception types are not documented
        raise ExportError(f"{profile}: libpva cannot open the report (with {debug}): {exc}") from None
