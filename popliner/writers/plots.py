"""Review plots (matplotlib, Agg): per-layer memory, a split's IPUs, one IPU's tiles.

What each plot shows, and how the output is kept reproducible: docs/spreadsheets.md
('Plots'). matplotlib is imported inside the functions so importing popliner stays
cheap; pyplot is never used, so no global figure state or GUI backend is involved.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from popliner.breakdown import Breakdown, LayerRow
from popliner.errors import UsageProblem
from popliner.fileio import check_writable
from popliner.memory.types import COMPONENT_COLOURS, COMPONENT_TITLES, components
from popliner.report.aggregate import grid_values, tile_grid
from popliner.solvers.result import SplitResult, StageResult
from popliner.textsafe import shown
from popliner.writers.formats import suffixes_for, writer_for
from popliner.writers.gantt import write_gantt
from popliner.writers.simulation import Simulation, plural
from popliner.writers.writer import Functions, Writer, write_output

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

log = logging.getLogger("popliner")

__all__ = ["LABEL_CHARS", "PNG", "SVG", "plot_layers", "plot_split", "plot_tiles", "plotted_layers"]

_BUDGET_COLOUR = "#d62728"
_OVER_COLOUR = "#d62728"
_FIT_COLOUR = "#4c72b0"
_HEADROOM_COLOUR = "#c7e9c0"


def _image_writer(path: str | os.PathLike[str], force: bool) -> Writer:
    """PNG or SVG from the suffix (the map's); checked (with overwrite) before any drawing."""
    check_writable(path, force, suffixes=suffixes_for("Figure"), what="plot")
    return writer_for(path, "Figure", "png")


#: Characters of a name on a plot: longer names keep their start and end around an ellipsis. Text is laid out
#: character by character: a 100 KB name took a minute to draw, and no label that long is read.
LABEL_CHARS = 60


def _label(name: str) -> str:
    """A name from the profile as plot text: non-printable characters escaped (they would make the SVG
    unparseable XML and garble a PNG), ``$`` escaped so that matplotlib does not read it as math, and at
    most :data:`LABEL_CHARS` characters."""
    text = shown(name)  # escaped first: an escape is several characters of the label
    if len(text) > LABEL_CHARS:
        keep = (LABEL_CHARS - 1) // 2
        text = f"{text[:keep]}\u2026{text[-keep:]}"
    return text.replace("$", r"\$")


@contextlib.contextmanager
def _warnings_logged() -> Iterator[None]:
    """matplotlib's warnings while drawing as popliner's own log lines: one line each, no source line, and
    none under -q (Python's default printed the warning's file and line of code, whatever -q said)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for message in dict.fromkeys(str(w.message) for w in caught):
        log.warning("plot: %s", message)


@contextlib.contextmanager
def _plot_style() -> Iterator[None]:
    """matplotlib defaults plus a fixed SVG id salt, whatever the user's rc file says."""
    import matplotlib
    import matplotlib.style

    with matplotlib.style.context("default"), matplotlib.rc_context({"svg.hashsalt": "popliner"}):
        yield


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _save(figure: Figure, path: str | os.PathLike[str], writer: Writer, force: bool) -> None:
    write_output(figure, os.fspath(path), force, writer)


def _write_figure(fmt: str) -> Callable[[Figure, IO[bytes]], None]:
    def write(figure: Figure, stream: IO[bytes]) -> None:
        # No dates or version stamps: the same data gives the same file.
        metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
        with _warnings_logged():
            figure.savefig(stream, format=fmt, metadata=metadata)

    return write


def _write_gantt(fmt: str) -> Callable[[Simulation, IO[bytes]], None]:
    def write(sim: Simulation, stream: IO[bytes]) -> None:
        with _warnings_logged():
            write_gantt(sim.result, stream, sim.note, fmt)

    return write


#: The images: the plots of ``--plot`` (matplotlib figures) and a simulation's Gantt chart.
PNG: Functions = {"Figure": _write_figure("png"), "Simulation": _write_gantt("png")}
SVG: Functions = {"Figure": _write_figure("svg"), "Simulation": _write_gantt("svg")}


def _bytes_axis(axes: Axes) -> None:
    axes.yaxis.set_major_formatter(_bytes_format())
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)


def _budget_line(axes: Axes, budget: float, label: str) -> None:
    axes.axhline(budget, color=_BUDGET_COLOUR, linestyle="--", linewidth=1.2, label=label)


def _width_for(count: int) -> float:
    return float(min(40.0, max(10.0, 5.0 + 0.3 * count)))


# ---------------------------------------------------------------------------
# Per-layer memory


def plot_layers(breakdown: Breakdown, path: str | os.PathLike[str], *, budget_bytes: int, force: bool) -> None:
    """Per-layer memory: components summed over tiles (top), worst tile vs budget (bottom).

    The operations of no layer come first as a bar of their own, as on the report's and the
    workbook's layer tables (they go with the first IPU).
    """
    writer = _image_writer(path, force)
    with _plot_style():
        rows = plotted_layers(breakdown)
        names = [_label(layer.layer) for layer in rows]
        figure = _new_figure(_width_for(len(names)), 8.0)
        top, bottom = figure.subplots(2, 1, sharex=True)
        _draw_layer_components(top, breakdown, rows, budget_bytes)
        _draw_layer_worst(bottom, rows, budget_bytes)
        bottom.set_xticks(range(len(names)), names, rotation=90, fontsize=8)
        bottom.set_xlabel("Layer (program order)")
        _save(figure, path, writer, force)


def plotted_layers(breakdown: Breakdown) -> tuple[LayerRow, ...]:
    """The bars of the per-layer plot, in order: the operations of no layer (if any), then the layers."""
    return ((breakdown.unlayered,) if breakdown.unlayered is not None else ()) + breakdown.layers


def _draw_layer_components(axes: Axes, breakdown: Breakdown, rows: Sequence[LayerRow], budget_bytes: int) -> None:
    x = np.arange(len(rows))
    base = np.zeros(len(x))
    for component in components(breakdown.has_other):
        heights = np.array([getattr(layer.memory, component) for layer in rows], dtype=float)
        axes.bar(x, heights, bottom=base, color=COMPONENT_COLOURS[component], label=COMPONENT_TITLES[component])
        base += heights
    capacity = budget_bytes * breakdown.tiles
    label = f"IPU capacity {_bytes_format().format_data(capacity)}\n({breakdown.tiles:,} tiles x budget)"
    # Single layers are usually a small part of an IPU: a capacity line far
    # above the bars would squash them, so it is then only named in the legend.
    if capacity <= 1.5 * max(base.max(initial=0.0), 1.0):
        _budget_line(axes, capacity, label)
    else:
        axes.plot([], [], color=_BUDGET_COLOUR, linestyle="--", label=label + ",\nabove the scale")
    axes.set_ylabel("Bytes, summed over tiles")
    axes.set_title("Memory per layer by component (each layer alone, summed over tiles)"
                   + (f"\ntraining options: {breakdown.training.summary()}" if breakdown.training else ""))
    _bytes_axis(axes)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


def _bytes_format() -> Any:
    """Bytes with SI prefixes and one decimal: 1.2 MB."""
    from matplotlib.ticker import EngFormatter

    return EngFormatter(unit="B", places=1)


def _draw_layer_worst(axes: Axes, rows: Sequence[LayerRow], budget_bytes: int) -> None:
    worst = [layer.worst_tile_bytes for layer in rows]
    colours = [_OVER_COLOUR if value > budget_bytes else _FIT_COLOUR for value in worst]
    axes.bar(np.arange(len(worst)), worst, color=colours)
    _budget_line(axes, budget_bytes, "Budget per tile")
    axes.set_ylabel("Bytes on the layer's worst tile")
    axes.set_title("Worst tile per layer (red: over the per-tile budget on its own)")
    _bytes_axis(axes)
    axes.set_ylim(0, 1.1 * max(budget_bytes, max(worst, default=0)))
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


# ---------------------------------------------------------------------------
# A split


def plot_split(
    split: SplitResult,
    path: str | os.PathLike[str],
    *,
    force: bool,
    assumes: str | None = None,
) -> None:
    """Each IPU's worst tile (stash included) with the budget it was solved against and the headroom left.

    ``assumes`` names the training options of the figures (a second title line).
    """
    writer = _image_writer(path, force)
    budget = split.budget_bytes
    with _plot_style():
        figure = _new_figure(_width_for(2 * len(split.stages)), 5.0)
        axes = figure.subplots()
        _draw_stages(axes, split, budget)
        count = split.num_ipus_used
        axes.set_title(f"{split.mode.capitalize()}: split over {plural(count, 'IPU')} "
                       f"({split.solver}, {split.status})" + (f"\ntraining options: {assumes}" if assumes else ""))
        _save(figure, path, writer, force)


def _stage_label(stage: StageResult) -> str:
    span = stage.first_layer if len(stage.layers) == 1 else f"{stage.first_layer} .. {stage.last_layer}"
    return f"IPU {stage.ipu}\n{_label(span or '')}"


def _draw_stages(axes: Axes, split: SplitResult, budget: int) -> None:
    x = np.arange(len(split.stages))
    worst = np.array([stage.worst_tile_bytes for stage in split.stages], dtype=float)
    headroom = np.array([max(stage.headroom, 0) for stage in split.stages], dtype=float)
    colours = [_FIT_COLOUR if stage.fits else _OVER_COLOUR for stage in split.stages]
    axes.bar(x, worst, width=0.6, color=colours, label="Worst tile (incl. stash)")
    axes.bar(x, headroom, width=0.6, bottom=worst, color=_HEADROOM_COLOUR, label="Headroom")
    _budget_line(axes, budget, "Budget per tile")
    for xi, value, stage in zip(x, worst, split.stages):
        note = f"{_kb(stage.headroom)} free" if stage.fits else f"{_kb(-stage.headroom)} over"
        axes.annotate(
            note, (xi, max(value, budget)), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8
        )
    axes.set_xticks(x, [_stage_label(stage) for stage in split.stages], fontsize=8)
    axes.set_ylabel("Bytes on the IPU's worst tile")
    _bytes_axis(axes)
    axes.set_ylim(0, 1.12 * max(budget, worst.max(initial=0.0)))  # room for the notes above the bars
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


def _kb(value: float) -> str:
    return f"{value / 1000:,.1f} kB"


# ---------------------------------------------------------------------------
# Every IPU of a split, tile by tile

#: IPU heatmaps per row of the tile plot.
TILE_PLOT_COLUMNS = 4


def plot_tiles(
    ipus: Sequence[StageResult],
    path: str | os.PathLike[str],
    *,
    force: bool,
    title: str = "Memory per tile",
) -> None:
    """Each IPU's tiles as a heatmap, and every IPU's per-tile totals sorted, against the budget.

    The totals include the stash and the copy buffers, so the worst tile
    marked on each heatmap is the one the split table reports. Tiles are laid
    out row by row (:func:`tile_grid`), one cell per tile; a tile over the
    budget is red whatever its excess.
    """
    writer = _image_writer(path, force)
    if not ipus:
        raise UsageProblem("the split has no IPUs to plot")
    with _plot_style():
        cols = min(len(ipus), TILE_PLOT_COLUMNS)
        rows = -(-len(ipus) // cols)
        # Each heatmap row as tall as its maps are at the column's width (plus three title lines), so the
        # maps fill their columns instead of leaving the width to white space.
        grid_rows, grid_cols = tile_grid(max(i.tiles for i in ipus))
        heat = 3.2 * grid_rows / grid_cols + 0.7
        figure = _new_figure(3.4 * cols + 1.6, heat * rows + 3.6)
        grid = figure.add_gridspec(rows + 1, cols, height_ratios=[heat] * rows + [3.2])
        budget = max(i.budget for i in ipus)
        colours = _tile_colours(budget, max(max(i.worst_tile_bytes for i in ipus), budget))
        images = [_draw_heatmap(figure.add_subplot(grid[k // cols, k % cols]), ipu, colours)
                  for k, ipu in enumerate(ipus)]
        bar = figure.colorbar(images[0], ax=figure.axes[: len(ipus)], shrink=0.9,
                              label="Bytes on the tile\n(blue: within budget, red: over)")
        bar.ax.axhline(budget, color="black", linewidth=1.5)
        bar.ax.yaxis.set_major_formatter(_bytes_format())
        _draw_sorted(figure.add_subplot(grid[rows, :]), ipus, budget)
        figure.suptitle(title)
        _save(figure, path, writer, force)


def _tile_colours(budget: int, top: int) -> tuple[Any, Any]:
    """Colour map and norm: white to dark blue up to the budget, then light to dark red above it."""
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap, Normalize, TwoSlopeNorm

    under = colormaps["Blues"](np.linspace(0.02, 1.0, 128))
    if top <= budget:
        return ListedColormap(under).with_extremes(bad="white"), Normalize(0, budget)
    over = colormaps["Reds"](np.linspace(0.35, 1.0, 128))
    cmap = ListedColormap(np.vstack((under, over))).with_extremes(bad="white")
    return cmap, TwoSlopeNorm(vmin=0, vcenter=budget, vmax=top)


def _draw_heatmap(axes: Axes, ipu: StageResult, colours: tuple[Any, Any]) -> Any:
    from matplotlib.patches import Rectangle

    cmap, norm = colours
    values = grid_values(ipu.total_per_tile)
    image = axes.imshow(values, cmap=cmap, norm=norm, interpolation="nearest", aspect="equal")
    nrows, ncols = values.shape
    worst = ipu.worst_tile
    r, c = divmod(worst, ncols)
    # The worst tile: a gold cell edge, and on big grids a black ring around it to catch the eye.
    axes.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="#FFD700", linewidth=2.0))
    if ncols >= 24:
        axes.add_patch(Rectangle((c - 2.5, r - 2.5), 5, 5, fill=False, edgecolor="black", linewidth=1.2))
    verdict = "fits" if ipu.fits else "OVER"
    stash = ipu.stash_per_tile[worst] + ipu.copy_per_tile[worst]
    axes.set_title(f"{_label(ipu.label)}\nworst tile {worst}: {_kb(ipu.worst_tile_bytes)} ({verdict}),\n"
                   f"of which stash + copy buffers {_kb(stash)}", fontsize=8)
    axes.set_xticks([])
    axes.set_yticks([0, nrows - 1], ["tile 0", f"tile {(nrows - 1) * ncols}"], fontsize=6)
    return image


def _draw_sorted(axes: Axes, ipus: Sequence[StageResult], budget: int) -> None:
    from matplotlib import colormaps

    cmap = colormaps["tab20" if len(ipus) > 10 else "tab10"]
    for k, ipu in enumerate(ipus):
        totals = np.sort(ipu.total_per_tile)[::-1]
        axes.plot(np.arange(len(totals)), totals, color=cmap(k % cmap.N), linewidth=1.2, label=f"IPU {ipu.ipu}")
    _budget_line(axes, budget, "Budget per tile")
    axes.set_xlabel("Tiles, sorted by total bytes (largest first)")
    axes.set_ylabel("Bytes on the tile")
    axes.set_title("Per-tile totals with stash and copy buffers, sorted: how many tiles are near the budget",
                   fontsize=9)
    axes.set_xlim(0, max(i.tiles for i in ipus) - 1)
    axes.set_ylim(0, 1.08 * max(budget, max(i.worst_tile_bytes for i in ipus)))
    _bytes_axis(axes)
    # Inside the axes, low on the left where sorted totals rarely reach: a legend beside them would take
    # its width from every column of the figure, heatmaps included.
    axes.legend(loc="lower left", fontsize=7, ncols=1 + (len(ipus) - 1) // 4)
