"""The main command's outputs: which ones were asked for, where ``-o`` goes by its name, and the checks before work.

``-o FILE`` picks what it writes by FILE's ending, through the one map of
:mod:`popliner.writers.formats`; which endings the main command takes, with and
without ``--solve``: docs/writers.md ('The map', its second table).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any

from popliner.errors import UsageProblem
from popliner.fileio import check_writable, distinct_files, is_stdout, one_stdout
from popliner.writers import split as split_writers
from popliner.writers.formats import suffixes_for, writer_among, writer_for
from popliner.writers.writer import Writer

__all__ = ["MAIN_KINDS", "Outputs", "check_outputs", "outputs", "route_output", "tables_writer"]

#: What the main command's ``-o`` writes, in order of preference for an ending two formats share.
MAIN_KINDS: tuple[str, ...] = ("Tables", "SplitPlan", "PipelineConfig", "Report")
#: The parameter each kind but the tables stands for, and what it is called in messages.
_ROUTED: dict[str, tuple[str, str, str]] = {
    "SplitPlan": ("split_out", "the split JSON", ""),
    "PipelineConfig": ("config_out", "the pipeline config", "--config-out"),
    "Report": ("report", "the review report", "--report"),
}


@dataclass(frozen=True)
class Outputs:
    """Which tables the user asked for."""

    operation_breakdown: bool
    layer_breakdown: bool
    memory_totals: bool
    memory_affinity: bool
    interlayer: bool

    @property
    def any_table(self) -> bool:
        return any(astuple(self))


def route_output(p: dict[str, Any]) -> None:
    """Point ``-o`` at what its name asks for: it stays the tables' file, or takes the place of another output.

    Sets ``p["split_out"]`` (the split JSON's file, None for stdout) and
    ``p["routed"]`` (the parameter ``-o`` stands for, for messages).
    """
    p["split_out"], p["routed"] = None, None
    output = p["output"]
    if not output or p["fmt"] or not p["solve"]:  # --format: the tables whatever the name; else see tables_writer
        return
    try:
        kind, _ = writer_among(output, MAIN_KINDS, "Tables", "csv")
    except UsageProblem:
        return  # refused with the tables' writer (main_writer), after the files' names were checked
    if kind == "Tables":
        return
    name, what, flag = _ROUTED[kind]
    if p[name]:
        raise UsageProblem(f"-o {output} and {flag} both write {what}; give one")
    p[name], p["output"], p["routed"] = output, None, name


def outputs(p: dict[str, Any]) -> Outputs:
    """The tables asked for; the layer table by default when the tables have somewhere to go."""
    chosen = Outputs(p["operation_breakdown"], p["layer_breakdown"], p["memory_totals"], p["memory_affinity"],
                     p["interlayer"])
    output, plot = p["output"], p["plot"]
    plot_to_stdout = bool(plot and is_stdout(plot))  # then it is the only thing on stdout
    xlsx = bool(output and output.lower().endswith(".xlsx"))
    # The layer table by default; with --solve (its JSON on stdout) only when -o names a file for it.
    if not chosen.any_table and not (p["solve"] and not output) and not xlsx and not (plot_to_stdout and not output):
        chosen = Outputs(False, True, False, False, False)
    return chosen


def _label(p: dict[str, Any], name: str, flag: str) -> str:
    return "-o" if p["routed"] == name else flag


def check_outputs(p: dict[str, Any], chosen: Outputs) -> None:
    """Every output is checked (name, suffix, folder, overwrite) before any work, let alone any output."""
    solve, output, force, plot = p["solve"], p["output"], p["force"], p["plot"]
    if solve and chosen.any_table and not output and not p["split_out"]:
        raise UsageProblem("with --solve, stdout carries the split JSON; write the tables with -o FILE")
    _check_needs(p)
    images = _images(plot, solve)
    distinct_files({"PROFILE": p["profile"]}, {"-o": output or p["split_out"], **images,
                                               _label(p, "config_out", "--config-out"): p["config_out"],
                                               "--ipu-config-out": p["ipu_config_out"],
                                               _label(p, "report", "--report"): p["report"]})
    if output:
        check_writable(output, force)
    for name, fmt, kind, what in (("config_out", "yaml", "PipelineConfig", "pipeline config"),
                                  ("ipu_config_out", "ipu_config", "PipelineConfig", "IPU config"),
                                  ("report", "html", "Report", "report"),
                                  ("split_out", "json", "SplitPlan", "split JSON")):
        if p[name]:  # each flag writes one format of the map
            check_writable(p[name], force, suffixes=writer_for(None, kind, fmt).suffixes, what=what)
    one_stdout({"the tables" if not output else "-o -": chosen.any_table and (not output or is_stdout(output)),
                "the split JSON (--solve)": solve and not p["split_out"], "--config-out -": p["config_out"],
                "--plot -": plot, "--ipu-config-out -": p["ipu_config_out"], "--report -": p["report"]})
    _check_images(p, images)


def _check_needs(p: dict[str, Any]) -> None:
    """The options that need --solve, and those that contradict each other."""
    for flag, name in (("--config-out", "config_out"), ("--ipu-config-out", "ipu_config_out"),
                       ("--min-ipus", "min_ipus"), ("--report", "report")):
        if p[name] and not p["solve"]:
            raise UsageProblem(f"{flag} needs --solve")
    if p["min_ipus"] and p["exact_ipus"]:
        raise UsageProblem("--min-ipus and --exact-ipus contradict each other; give one")


def _images(plot: str | None, solve: bool) -> dict[str, str | None]:
    suffixed = split_writers.suffixed
    return {"--plot": plot, **({"--plot (its -split image)": suffixed(plot, "split"),
                                "--plot (its -tiles image)": suffixed(plot, "tiles")} if plot and solve else {})}


def _check_images(p: dict[str, Any], images: dict[str, str | None]) -> None:
    """The IPU config's head placement, then the images (after the files' names and stdout were checked)."""
    if p["ipu_config_out"] and p["head_placement"] == "first" and p["num_ipus"] > 1:
        from popliner.config.snippets import FIRST_PROBLEM

        raise UsageProblem(f"--ipu-config-out: optimum-graphcore cannot build this split: {FIRST_PROBLEM}")
    plot = p["plot"]
    if plot and p["solve"] and is_stdout(plot):
        raise UsageProblem("--plot with --solve writes three images; give a file name, not stdout")
    for image in images.values():
        if image:
            check_writable(image, p["force"], suffixes=suffixes_for("Figure"), what="plot")


def tables_writer(output: str | None) -> Writer:
    """The tables' writer by -o's name (CSV for any other); an ending of no output of the command is refused."""
    kind, writer = writer_among(output, MAIN_KINDS, "Tables", "csv", what="the main command's output")
    if kind != "Tables":  # not routed: there is no split
        raise UsageProblem(f"-o {output}: {_ROUTED[kind][1]} needs --solve; "
                           "name a .csv, .tsv, .txt or .xlsx file for the tables")
    return writer
