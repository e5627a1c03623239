"""Read the split a user typed into a review workbook's planner, and turn it into a pipeline config.

The IPU column of the planner sheet's layer table (:mod:`popliner.writers.planner`)
is read back as typed (lazily and within a size limit, :mod:`popliner.config.workbook`);
what ``check`` and ``config-from`` do with it and the messages:
docs/spreadsheets.md ('Reading an edited planner back'). Every problem names the
cell and raises :class:`~popliner.errors.ConfigError` (exit code 2).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from popliner.analysis import Analysis
from popliner.config.model import ConfigTraining, PipelineConfig, analysis_config
from popliner.config.workbook import IPU_COL, LAYER_COL, PLANNER_SHEET, TRAINING_COL, SheetCells, open_sheet
from popliner.errors import ConfigError
from popliner.profile.limits import limit
from popliner.solvers.result import SplitResult
from popliner.training_record import training_of

__all__ = ["PlannerChoice", "config_from_planner", "is_workbook", "read_planner"]

#: How far down the sheet the labels of the planner's rows are looked for.
_SEARCH_ROWS = 60
#: The columns read: the layer table's and the IPU row's (column B on, one per IPU the planner offers).
_MAX_COLUMN = max(LAYER_COL, IPU_COL, TRAINING_COL, 5) + 1024
#: Below the labels, only the layer table's columns are kept: a row of all the columns above costs 8 KB
#: (200,000 typed-in rows took 1.7 GB).
_TABLE_COLUMNS = max(LAYER_COL, IPU_COL) + 1
#: Rows of the layer table read at most (a planner has one per layer; the range-table limit allows
#: 9,999 layers on a one-tile profile, far fewer on real ones). Reading costs some 40 us a row.
_ROWS_ENV = "POPLINER_MAX_PLANNER_LAYERS"


def _letter(column: int) -> str:
    """A column's letters, for the cells an error names."""
    from openpyxl.utils import get_column_letter  # openpyxl loads only when a workbook is read

    return str(get_column_letter(column))


def is_workbook(path: str | os.PathLike[str]) -> bool:
    """Does ``path`` name a review workbook (by its suffix) rather than a pipeline YAML?"""
    return os.fspath(path).lower().endswith(".xlsx")


@dataclass(frozen=True)
class PlannerChoice:
    """The split typed into a planner: ``stages[k]`` are the layers on IPU ``k``, in layer order."""

    path: str
    mode: str
    profile_path: str
    profile_sha256: str
    budget_bytes: int | None
    stages: tuple[tuple[str, ...], ...]
    #: Where each layer's name is (for messages about a layer): layer -> "A19".
    cells: dict[str, str]
    #: The training options the workbook's figures were computed with (None: inference, or the defaults
    #: for a workbook written before they were recorded).
    training: ConfigTraining | None = None

    def where(self, cell: str) -> str:
        return _where(self.path, cell)


def _where(path: str, cell: str) -> str:
    return f"{path}, sheet {PLANNER_SHEET}, cell {cell}"


def read_planner(path: str | os.PathLike[str]) -> PlannerChoice:
    """The split in the planner sheet of ``path``; :class:`ConfigError` naming the cell on a bad edit."""
    source = os.fspath(path)
    # Lazily and within a size limit: only the planner sheet, only as far down as its layer table.
    sheet = open_sheet(source, PLANNER_SHEET, _MAX_COLUMN, "write the review workbook with `popliner PROFILE -o "
                       "review.xlsx`", narrow=(_SEARCH_ROWS, _TABLE_COLUMNS))
    try:
        return _read(source, sheet)
    finally:
        sheet.close()


def _read(source: str, sheet: SheetCells) -> PlannerChoice:
    labels = {str(sheet.value(r, 1)).strip(): r for r in range(1, _SEARCH_ROWS + 1) if sheet.value(r, 1) is not None}
    header = next((r for r in range(1, _SEARCH_ROWS + 1) if sheet.value(r, LAYER_COL) == "Layer"
                   and sheet.value(r, IPU_COL) == "IPU"), None)
    if header is None or "IPU" not in labels:
        raise ConfigError(f"{source}, sheet {PLANNER_SHEET}: no layer table with a 'Layer' and an 'IPU' column; "
                          "is this a workbook written by popliner?")
    ipus = _ipu_numbers(sheet, labels["IPU"])
    mode_row = labels.get("Mode")
    mode = str(sheet.value(mode_row, 2) or "inference") if mode_row else "inference"
    if mode not in ("inference", "training"):
        raise ConfigError(f"{_where(source, f'B{mode_row}')}: mode {mode!r} is neither inference nor training")
    budget_row = labels.get("Budget per tile (bytes)")
    budget = sheet.value(budget_row, 2) if budget_row else None
    if budget is not None and (not _is_whole(budget) or int(budget) <= 0):
        raise ConfigError(f"{_where(source, f'B{budget_row}')}: the budget {budget!r} is not a positive whole number")
    stages, cells = _stages(source, sheet, header + 1, ipus)
    training = _training(source, sheet, mode_row, mode) if mode_row else None
    return PlannerChoice(
        path=source,
        mode=mode,
        profile_path=str(sheet.value(mode_row, 4) or "") if mode_row else "",
        profile_sha256=str(sheet.value(mode_row, 5) or "") if mode_row else "",
        budget_bytes=int(budget) if budget is not None else None,
        stages=stages,
        cells=cells,
        training=training,
    )


def _training(source: str, sheet: SheetCells, row: int, mode: str) -> ConfigTraining | None:
    """The training options the planner records (as JSON) next to the mode; the defaults when none."""
    from popliner.config.yaml_io import training_from_document

    if mode != "training":
        return None
    cell = f"{_letter(TRAINING_COL)}{row}"
    text = sheet.value(row, TRAINING_COL)
    if text is None or (isinstance(text, str) and not text.strip()):
        return ConfigTraining()
    try:
        document = json.loads(str(text))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{_where(source, cell)}: the training options are not valid JSON ({exc.msg}); "
                          "restore the text popliner wrote") from None
    except RecursionError:  # found by the workbook fuzz: [[[... 100,000 deep was an internal error
        raise ConfigError(f"{_where(source, cell)}: the training options are JSON nested too deeply to read; "
                          "popliner writes one flat object there: restore the text popliner wrote") from None
    return training_from_document(document, _where(source, cell))


def _is_whole(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and value.is_integer()


def _ipu_numbers(sheet: SheetCells, row: int) -> int:
    """How many IPU columns the planner offers (0, 1, ... from column B of the IPU row)."""
    count = 0
    while 2 + count <= _MAX_COLUMN and sheet.value(row, 2 + count) == count:
        count += 1
    return max(count, 1)


def _stages(source: str, sheet: SheetCells, first_row: int, num_ipus: int) -> tuple[tuple[tuple[str, ...], ...],
                                                                            dict[str, str]]:
    stages: list[list[str]] = []
    cells: dict[str, str] = {}
    row = first_row
    ipu_letter = _letter(IPU_COL)
    most = limit(_ROWS_ENV)
    while (name := sheet.value(row, LAYER_COL)) is not None and str(name) != "":
        if row - first_row >= most:
            raise ConfigError(f"{_where(source, f'{_letter(LAYER_COL)}{row}')}: the layer table goes on past "
                              f"{most:,} rows; popliner writes one row per layer, and no profile within the "
                              f"range-table limit has that many layers (set {_ROWS_ENV} to read more)")
        layer = str(name)
        cell = f"{ipu_letter}{row}"
        ipu = _ipu_of(source, cell, layer, sheet.value(row, IPU_COL), num_ipus)
        current = len(stages) - 1
        if ipu == current:
            stages[-1].append(layer)
        elif ipu == current + 1:
            stages.append([layer])
        elif ipu < current:
            raise ConfigError(f"{_where(source, cell)}: layer {layer!r} goes back to IPU {ipu} after IPU {current}; "
                              "each IPU must hold one run of consecutive layers, IPUs in layer order")
        elif current < 0:
            raise ConfigError(f"{_where(source, cell)}: the first layer {layer!r} is on IPU {ipu}; "
                              "the pipeline starts on IPU 0")
        else:
            raise ConfigError(f"{_where(source, cell)}: layer {layer!r} is on IPU {ipu} right after IPU {current}; "
                              f"IPU {current + 1} has no layers (number the IPUs 0, 1, 2, ... in layer order)")
        cells[layer] = f"{_letter(LAYER_COL)}{row}"
        row += 1
    if not stages:
        raise ConfigError(f"{_where(source, f'A{first_row}')}: the planner lists no layers")
    return tuple(tuple(group) for group in stages), cells


def _ipu_of(source: str, cell: str, layer: str, value: object, num_ipus: int) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ConfigError(f"{_where(source, cell)}: layer {layer!r} has no IPU; type an IPU number "
                          f"from 0 to {num_ipus - 1}")
    number: object = value
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = value
    if not _is_whole(number):
        raise ConfigError(f"{_where(source, cell)}: {value!r} is not an IPU number (0 to {num_ipus - 1})")
    assert isinstance(number, (int, float))  # _is_whole said so
    ipu = int(number)
    if not 0 <= ipu < num_ipus:
        raise ConfigError(f"{_where(source, cell)}: IPU {ipu} is not one of the planner's IPUs "
                          f"(0 to {num_ipus - 1})")
    return ipu


def config_from_planner(choice: PlannerChoice, analysis: Analysis, *,
                        gradient_accumulation: int | None = None) -> PipelineConfig:
    """The pipeline config of the planner's split, its figures computed from ``analysis``.

    The figures are :func:`popliner.pipeline.stage_figures`' (the same as
    ``popliner check``); the budget is the planner's.
    """
    known = set(analysis.layer_names)
    for stage in choice.stages:
        for layer in stage:
            if layer not in known:
                raise ConfigError(f"{choice.where(choice.cells[layer])}: layer {layer!r} is not in the profile "
                                  f"{analysis.profile.path}; was the workbook made for another model, or with "
                                  "--layer-name-regex/--layer-preset? give those options here too")
    placed = {layer for stage in choice.stages for layer in stage}
    missing = [name for name in analysis.layer_names if name not in placed]
    if missing:
        raise ConfigError(f"{choice.path}, sheet {PLANNER_SHEET}: layers {', '.join(missing[:8])} of the profile "
                          "are not in the planner; add a row for each")
    budget = choice.budget_bytes or analysis.profile.target.bytes_per_tile
    stages = tuple(analysis.stage_results(choice.stages, budget))
    split = SplitResult("planner", "PLANNER", analysis.mode, len(stages), budget, stages)
    return analysis_config(analysis, split, gradient_accumulation,
                           training_of(analysis, choice.training.requested if choice.training else None))
