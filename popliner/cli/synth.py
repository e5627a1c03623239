"""``popliner synth``: write a synthetic format-v1 profile."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from popliner.errors import UsageProblem
from popliner.synth import PRESETS, SynthSpec, preset_names, preset_spec, write_profile
from popliner.synth.naming import SYNTH_FRAMEWORKS
from popliner.synth.spec import (
    FIRST_MOMENTS,
    HEADS,
    KINDS,
    MODES,
    OPTIMIZER_STATES,
    OPTIMIZERS,
    RECOMPUTES,
    UNCALIBRATED,
)

__all__ = ["command"]

log = logging.getLogger("popliner.synth")

#: The options that override a preset are named as the SynthSpec fields they set, but for these. An option not
#: given is None (its flags too) and leaves the preset's value.
_OVERRIDES = {"clock": "clock_hz", "checkpoint_every_layer": "checkpoints"}


@click.command("synth", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-p", "--preset", type=click.Choice(preset_names()), default=None,
              help="Start from a named model (default: a small custom encoder; see --list-presets).")
@click.option("-m", "--mode", type=click.Choice(MODES), default=None,
              help="Default: the mode of the real profile a preset follows (poptorch-bert-tiny: training), "
                   "else inference.")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="Model family, when no --preset is given.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Profile to write; .gz compresses; '-' writes to stdout.")
@click.option("--scale", type=float, default=None,
              help="Granularity: 0.5 roughly halves variables and steps (not the model).")
@click.option("--seed", type=int, default=None, help="Random seed (default 0).")
@click.option("--layers", type=int, default=None, help="Encoder/decoder layers, or CNN blocks.")
@click.option("--hidden", type=int, default=None, help="Model width (CNN: stem channels).")
@click.option("--seq", type=int, default=None, help="Sequence length (CNN: image side).")
@click.option("--batch", type=int, default=None, help="Micro-batch size.")
@click.option("--vocab", type=int, default=None, help="Vocabulary (CNN: classes).")
@click.option("--tiles", type=int, default=None, help="Tiles per IPU (Mk2: 1472).")
@click.option("--bytes-per-tile", type=int, default=None, help="Tile memory (Mk2: 638976).")
@click.option("--clock", type=float, default=None, help="Clock frequency in Hz (default 1.33e9).")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default=None, help="Training optimizer.")
@click.option("--recompute", type=click.Choice(RECOMPUTES), default=None,
              help="Training compiled with recomputation: a checkpoint per layer, or per pipeline stage.")
@click.option("--split-after", default=None, metavar="L1,L2,...",
              help="With --recompute pipeline (required): the last layer of each stage but the last.")
@click.option("--optimizer-state", type=click.Choice(OPTIMIZER_STATES), default=None,
              help="off-chip: optimizer state in streaming memory, loaded for its update only.")
@click.option("--replication-factor", type=int, default=None,
              help="Replicas (default 1); see --sharded-optimizer-state.")
@click.option("--sharded-optimizer-state", is_flag=True, default=None,
              help="Divide the optimizer state over the replicas (replicated tensor sharding).")
@click.option("--first-moment", type=click.Choice(FIRST_MOMENTS), default=None,
              help="Type of Adam's first moment (default float).")
@click.option("--head", type=click.Choice(HEADS), default=None,
              help="Encoder head: squad (default) or mlm (pretraining's masked-LM head, tied to the embedding).")
@click.option("--untied-head", is_flag=True, default=None,
              help="The LM head (decoder) or MLM head (--head mlm) gets a weight of its own, not the word embedding's.")
@click.option("--checkpoint-every-layer", is_flag=True, default=None,
              help="The model puts a recomputation checkpoint after every layer, as optimum-graphcore does for "
                   "recompute_checkpoint_every_layer (encoder and decoder models).")
@click.option("--framework", type=click.Choice(SYNTH_FRAMEWORKS), default=None,
              help="Name the debug contexts and source.framework as this framework does (default: synthetic, "
                   "PopART's contexts).")
@click.option("--uncalibrated", is_flag=True,
              help="Use the catalog's own code and state sizes, not the preset's calibration.")
@click.option("--gzip/--no-gzip", "gzip_out", default=None, help="Compress (default: when the name ends .gz).")
@click.option("--no-var-names", "var_names", is_flag=True, flag_value=False, default=None,
              help="Leave out variable names (smaller, faster files).")
@click.option("-f", "--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--list-presets", is_flag=True, help="List the presets and exit.")
def command(preset: str | None, mode: str | None, kind: str | None, output: str | None, gzip_out: bool | None,
            force: bool, list_presets: bool, split_after: str | None, uncalibrated: bool, **options: Any) -> None:
    """Generate a deterministic synthetic profile (format v1) of a model on one IPU.

    \b
    popliner synth --preset bert-large --mode training -o big.json.gz
    popliner synth --preset gpt2-small --layers 6 --tiles 256 -o gpt.json
    popliner synth --kind cnn --layers 8 --hidden 32 --seq 64 -o cnn.json.gz
    popliner synth --preset bert-large --mode training --recompute every-layer --optimizer-state off-chip -o r.json.gz
    """
    if list_presets:
        _print_presets()
        return
    if output is None:
        raise UsageProblem("give the output file with -o/--output ('-' for stdout)")
    if split_after is not None:
        options["split_after"] = _layer_list(split_after)
    if uncalibrated:
        options.update(UNCALIBRATED)
    spec = _spec(preset, mode, kind, options)
    log.info("generating %s %s (%d layers, %d tiles, scale %g, seed %d)", spec.model, spec.mode, spec.layers,
             spec.tiles, spec.scale, spec.seed)
    target: Any = sys.stdout.buffer if output == "-" else output
    summary = write_profile(spec, target, force=force, compress=gzip_out)
    log.info("wrote %s: %d operations, %d programs, %d steps, %d variables, %d liveness classes, %.1f MB in %.1f s",
             output, summary.operations, summary.programs, summary.steps, summary.variables, summary.classes,
             summary.bytes_written / 1e6, summary.seconds)


def _layer_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageProblem(f"--split-after takes layer numbers separated by commas, got {text!r}") from None


def _spec(preset: str | None, mode: str | None, kind: str | None, options: dict[str, Any]) -> SynthSpec:
    changes = {_OVERRIDES.get(k, k): v for k, v in options.items() if v is not None}
    if preset is None:
        return SynthSpec(kind=kind or "encoder", mode=mode or "inference").replace(**changes)
    if kind is not None and kind != PRESETS[preset]["kind"]:
        raise UsageProblem(f"--kind {kind} contradicts --preset {preset} (kind {PRESETS[preset]['kind']}); drop one")
    return preset_spec(preset, mode, **changes)


def _print_presets() -> None:
    """One row per preset; each column as wide as its longest cell (names and kinds vary in length)."""
    from popliner.writers.ipu_table import text_table

    keys = ("kind", "mode", "layers", "hidden", "seq", "batch", "vocab", "tiles")
    rows = [(name, *(str(getattr(preset_spec(name), k)) for k in keys)) for name in preset_names()]
    click.echo(text_table(("preset", *keys), rows, left=(0, 1, 2)))
