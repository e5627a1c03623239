"""``popliner plan PROFILE --ipus N``: every pod configuration that fits, ranked by predicted throughput."""

from __future__ import annotations

import logging
from typing import Any

import click

from popliner.cli.options import (
    BUDGET_DEFAULT,
    BYTES_PER_TILE,
    CLOCK_HZ,
    LINK_BANDWIDTH,
    MICRO_BATCH_SIZE,
    NUM_IPUS,
    SYNC_CYCLES,
    budget_options,
    cache_options,
    force_option,
    headroom_given,
    output_option,
)
from popliner.errors import UsageProblem
from popliner.fileio import atomic_write, check_writable, distinct_files, is_stdout, one_stdout
from popliner.memory.training import HEAD_PLACEMENTS, OPTIMIZER_STATES
from popliner.pod.model import (
    DEFAULT_LINK_BANDWIDTH,
    DEFAULT_REPLICA_BANDWIDTH,
    DEFAULT_STREAMING_BANDWIDTH,
    DEFAULT_SYNC_CYCLES,
)
from popliner.pod.plan import RECOMPUTES
from popliner.writers.formats import writer_among, writer_for
from popliner.writers.jsondoc import PlanDocument
from popliner.writers.writer import Writer, write_output

__all__ = ["command"]

log = logging.getLogger("popliner")
#: Rows of the table on stderr without --all.
TABLE_ROWS = 10


def _choices(allowed: tuple[str, ...]) -> Any:
    """A click callback for a comma-separated subset of ``allowed`` (in the order of ``allowed``)."""
    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        items = [v.strip() for v in value.split(",") if v.strip()]
        bad = [v for v in items if v not in allowed]
        if bad or not items:
            raise click.BadParameter(f"{value!r}: expected a comma-separated list of {', '.join(allowed)}")
        return tuple(v for v in allowed if v in items)
    return parse


@click.command("plan", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("profile", type=click.Path(dir_okay=False, path_type=str))
@click.option("--ipus", type=NUM_IPUS, required=True, help="IPUs in the pod (4, 16, 64 ...).")
@click.option("--global-batch", type=click.IntRange(1, 10**12), default=None,
              help="Samples per step of the pod (default: 16 x micro-batch x IPUs).")
@click.option("--micro-batch", type=MICRO_BATCH_SIZE, default=1, show_default=True,
              help="Samples per micro-batch: the batch the profile was compiled with.")
@click.option("--recompute", callback=_choices(RECOMPUTES), default=None, metavar="LIST",
              help="Recomputation modes to try, comma separated (default: none,pipeline,every-layer).")
@click.option("--head-placement", callback=_choices(HEAD_PLACEMENTS), default=None,
              metavar="LIST", help="Head placements to try (default: first,last,wrap).")
@click.option("--optimizer-state", callback=_choices(OPTIMIZER_STATES), default=None,
              metavar="LIST", help="Where optimizer state may live (default: on-chip,off-chip).")
@click.option("--sharded-optimizer-state", is_flag=True,
              help="Shard optimizer state over the R replicas (replicated tensor sharding) when R >= 2.")
@click.option("--mem-per-tile", type=BYTES_PER_TILE, default=None,
              help="Bytes per tile. Default: the profile's bytesPerTile.")
@budget_options(BUDGET_DEFAULT)
@click.option("--link-bandwidth", type=LINK_BANDWIDTH, default=DEFAULT_LINK_BANDWIDTH, show_default=True,
              help="Bytes/s of an inter-IPU copy inside a replica (one IPU-Link).")
@click.option("--replica-bandwidth", type=LINK_BANDWIDTH, default=DEFAULT_REPLICA_BANDWIDTH, show_default=True,
              help="Bytes/s of one hop of the replicas' all-reduce ring.")
@click.option("--streaming-bandwidth", type=LINK_BANDWIDTH, default=DEFAULT_STREAMING_BANDWIDTH,
              show_default=True, help="Bytes/s between an IPU and Streaming Memory (off-chip optimizer state).")
@click.option("--sync-cycles", type=SYNC_CYCLES, default=DEFAULT_SYNC_CYCLES, show_default=True,
              help="Clock cycles of the sync before each pipeline cycle's copies.")
@click.option("--clock", type=CLOCK_HZ, default=None,
              help="Clock in Hz (default: the profile's, 1.33e9 on a GC200).")
@click.option("--all", "everything", is_flag=True, help="Also list the configurations that do not fit, with why.")
@click.option("--pick", type=click.IntRange(1, 10**6), default=1, show_default=True,
              help="Which configuration --config-out/--ipu-config-out write (1 = the fastest).")
@click.option("--config-out", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the picked configuration's pipeline config (YAML) here.")
@click.option("--ipu-config-out", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the picked configuration's optimum-graphcore ipu_config.json here.")
@output_option("Write the JSON to FILE instead of stdout; a .yaml/.yml FILE gets the picked configuration's "
               "pipeline config instead (as --config-out).")
@force_option()
@click.option("--mode", type=click.Choice(["auto", "inference", "training"]), default="auto", show_default=True,
              help="Training keeps stashes; auto looks for gradient operations.")
@click.option("--layer-preset", default="auto", show_default=True, help="Layer naming rule (see popliner analyse).")
@click.option("--layer-name-regex", default=None, help="Regex on operation names, group 1 is the layer.")
@cache_options
def command(profile: str, ipus: int, global_batch: int | None, micro_batch: int, recompute: tuple[str, ...] | None,
            head_placement: tuple[str, ...] | None, optimizer_state: tuple[str, ...] | None,
            sharded_optimizer_state: bool, mem_per_tile: int | None, budget: float | None, headroom: float | None,
            link_bandwidth: float,
            replica_bandwidth: float, streaming_bandwidth: float, sync_cycles: int, clock: float | None,
            everything: bool, pick: int, config_out: str | None, ipu_config_out: str | None, output: str | None,
            force: bool, mode: str, layer_preset: str, layer_name_regex: str | None, no_cache: bool,
            cache_dir: str | None) -> None:
    """Plan a pod: pipeline depth x replicas x gradient accumulation x recomputation x head placement.

    \b
    popliner plan model.json.gz --ipus 16 --global-batch 512
    popliner plan model.json.gz --ipus 16 --all --recompute none,every-layer
    popliner plan model.json.gz --ipus 64 --sharded-optimizer-state --config-out pod.yaml --pick 2
    """
    from popliner.analysis import AnalysisOptions, load_analysis
    from popliner.ops.layers import preset_names
    from popliner.pod.model import PodConstants
    from popliner.pod.output import pick as pick_config
    from popliner.pod.output import pipeline_config, plan_document, pod_ipu_config
    from popliner.pod.plan import PodRequest, plan_pod

    if layer_preset not in ("auto", *preset_names()):
        raise UsageProblem(f"--layer-preset {layer_preset!r}: expected auto or one of {', '.join(preset_names())}")
    writer, output, config_out = _check_outputs(profile, output, config_out, ipu_config_out, force)
    request = PodRequest(
        pod_ipus=ipus, global_batch=global_batch, micro_batch=micro_batch,
        recompute=recompute or RECOMPUTES, head_placement=head_placement or HEAD_PLACEMENTS,
        optimizer_state=optimizer_state or OPTIMIZER_STATES, sharded_optimizer_state=sharded_optimizer_state,
        mem_per_tile=mem_per_tile, headroom=headroom_given(budget, headroom),
        constants=PodConstants(link_bandwidth, replica_bandwidth, streaming_bandwidth, sync_cycles, clock),
    )
    options = AnalysisOptions(mode=mode, layer_preset=layer_preset, layer_name_regex=layer_name_regex)  # type: ignore
    analysis = load_analysis(profile, options, use_cache=not no_cache, cache_dir=cache_dir)
    plan = plan_pod(analysis, request)
    chosen = pick_config(plan, pick) if (config_out or ipu_config_out) else None
    # The picked configuration's documents are made before anything is written: one that cannot be
    # (optimum builds no head placed first) stops the command with no output at all.
    if chosen is not None:
        cfg = pipeline_config(plan, chosen)
        ipu_document = pod_ipu_config(cfg, chosen) if ipu_config_out is not None else None
    _say(plan, everything)
    write_output(PlanDocument(plan_document(plan, everything)), output, force, writer)
    if chosen is not None:
        _write_configs(chosen, pick, cfg, ipu_document, config_out, ipu_config_out, force)


def _check_outputs(profile: str, output: str | None, config_out: str | None, ipu_config_out: str | None,
                   force: bool) -> tuple[Writer, str | None, str | None]:
    """Every output checked before any work, -o routed by its name: the writer, -o and --config-out after it."""
    # No output over the profile, none over another output, even with --force.
    distinct_files({"PROFILE": profile}, {"-o": output, "--config-out": config_out, "--ipu-config-out": ipu_config_out})
    writer, output, config_out = _route(output, config_out)
    if output:
        check_writable(output, force)
    if config_out:
        check_writable(config_out, force, suffixes=(".yaml", ".yml"), what="pipeline config")
    if ipu_config_out:
        check_writable(ipu_config_out, force, suffixes=(".json",), what="IPU config")
    one_stdout({"the plan JSON": not output or is_stdout(output), "--config-out -": config_out,
                "--ipu-config-out -": ipu_config_out})
    return writer, output, config_out


def _say(plan: Any, everything: bool) -> None:
    """The ranked table, the planner's notes and the summary on stderr (not under -q)."""
    from popliner.pod.output import plan_table

    if log.isEnabledFor(logging.WARNING):
        click.echo(plan_table(plan, everything, None if everything else TABLE_ROWS), err=True, nl=False)
        for note in plan.notes:
            click.echo(f"popliner: {note}", err=True)
        _summary(plan)


def _route(output: str | None, config_out: str | None) -> tuple[Writer, str | None, str | None]:
    """-o by its name: the plan JSON (.json, stdout and any name the map does not know) or, for .yaml/.yml,
    the picked configuration's pipeline config (as --config-out); the writer, -o and --config-out after it."""
    kind, writer = writer_among(output, ("PlanDocument", "PipelineConfig"), "PlanDocument", "json",
                                what="a pod plan")
    if kind == "PlanDocument":
        return writer, output, config_out
    if config_out:
        raise UsageProblem(f"-o {output} and --config-out both write the picked configuration's pipeline config; "
                           "give one")
    return writer_for(None, "PlanDocument", "json"), None, output


def _summary(plan: Any) -> None:
    fitting = plan.fitting
    total = len(plan.configs)
    if not fitting:
        click.echo(f"popliner: none of the {total} configurations fits a pod of {plan.request.pod_ipus} IPUs"
                   "; --all lists why", err=True)
        return
    best = fitting[0]
    rate = f"{best.samples_per_second:,.1f} samples/s" if best.samples_per_second is not None else "no cycles"
    click.echo(f"popliner: {len(fitting)} of {total} configurations fit a pod of {plan.request.pod_ipus} IPUs "
               f"(global batch {plan.global_batch}); the fastest: {best.ipus_per_replica} IPUs x {best.replicas} "
               f"replicas, G = {best.gradient_accumulation}, recompute {best.recompute}, head {best.head_placement}, "
               f"optimizer state {best.optimizer_state}: {rate}", err=True)


def _write_configs(chosen: Any, rank: int, cfg: Any, ipu_document: dict[str, Any] | None, config_out: str | None,
                   ipu_config_out: str | None, force: bool) -> None:
    from popliner.writers.writer import write_json

    if config_out:
        write_output(cfg, config_out, force, writer_for(None, "PipelineConfig", "yaml"))
        log.warning("wrote %s (configuration %d: %d IPUs x %d replicas, G = %d)", config_out, rank,
                    chosen.ipus_per_replica, chosen.replicas, chosen.gradient_accumulation)
    if ipu_config_out and ipu_document is not None:
        with atomic_write(ipu_config_out, force=force) as stream:
            write_json(ipu_document, stream)
        log.warning("wrote %s (optimum-graphcore IPUConfig of configuration %d)", ipu_config_out, rank)
