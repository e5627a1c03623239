"""One record per IPU: a planned split simulates exactly as the config it writes, and as that config re-figured.

Three ways to simulate one split, which must give byte-identical JSON summaries:

* **live**: the plan in memory (:func:`popliner.plan.plan_split`), its config
  never written, each IPU's figure through the one chain
  StageFigure → StageResult → ConfigStage → IpuFigures;
* **saved**: ``popliner PROFILE --solve --config-out p.yaml`` then
  ``popliner simulate p.yaml`` (the config's predictions);
* **recomputed**: ``popliner simulate p.yaml --profile PROFILE`` (each IPU's
  figure computed again from the profile); only ``figures_from`` says so.

Before the one chain, the recomputed path read every tile of the figure and
the saved one spread an average stash entry over the tiles: the same peak,
but the worst tile's resident and stash bytes (and the memory over time)
differed. The fast matrix runs in the main suite; every bundled fixture runs
under ``-m slow``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.cli import cli
from popliner.config.model import analysis_config
from popliner.config.yaml_io import read_config
from popliner.memory.training import TrainingOptions
from popliner.plan import SplitRequest, plan_split
from popliner.simulator.engine import simulate
from popliner.simulator.inputs import inputs_from_config
from popliner.writers.formats import writer_for
from popliner.writers.simulation import Simulation
from tests.helpers import FIXTURES

PLACEMENTS = ("first", "last", "wrap")
TRAINING_SET = ("--recompute", "every-layer", "--optimizer-state", "off-chip")
FAST = ("tiny-training.json", "tiny.json", "bert-tiny-training.json", "bert-tiny-inference.json")
SLOW = ("bert-base-training.json.gz", "resnet-small-training.json.gz", "gpt2-small-inference.json.gz",
        "efficientnet-small-inference.json.gz")


def _invoke(*args: object, ok: tuple[int, ...] = (0,)) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code in ok, result.output
    return result.stdout


def _training(name: str) -> bool:
    return "training" in name


#: Fixtures whose head reads the embedding's weight: ``last`` over several IPUs is refused for them
#: (docs/pipeline-config.md, "Tied heads"; tests/test_tied_heads.py).
TIED = ("gpt2-small-inference.json.gz",)


def _cases(names: tuple[str, ...]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(name, placement, opts) for name in names for placement in PLACEMENTS
            for opts in (((), TRAINING_SET) if _training(name) else ((),))
            if not (name in TIED and placement == "last")]


def _live_json(profile: Path, placement: str, opts: tuple[str, ...], config: str, ipus: int) -> str:
    """The plan simulated in memory: the same request the command line makes, no file in between."""
    training = TrainingOptions(recompute="every-layer", optimizer_state="off-chip") if opts else TrainingOptions()
    analysis = load_analysis(str(profile), AnalysisOptions(training=training), use_cache=False)
    plan = plan_split(analysis, SplitRequest(num_ipus=ipus, recompute=training.recompute if opts else None,
                                             head_placement=placement,
                                             optimizer_state=training.optimizer_state if opts else None))
    cfg = analysis_config(plan.analysis, plan.split, None, plan.training)
    inputs = inputs_from_config(cfg)
    result = simulate(inputs.stages, cfg.gradient_accumulation, clock_hz=inputs.clock_hz,
                      budget_bytes=cfg.effective_budget, tiles_per_ipu=inputs.tiles_per_ipu,
                      sharded=cfg.execution == "sharded")
    out = io.StringIO()
    writer_for(None, "Simulation", "json").write(Simulation(result, config, inputs.source, cfg.options), out)
    return out.getvalue()


def _check(tmp_path: Path, name: str, placement: str, opts: tuple[str, ...], ipus: int = 3) -> None:
    profile = FIXTURES / name
    config = tmp_path / "p.yaml"
    _invoke(profile, "--solve", "--num-ipus", ipus, "--head-placement", placement, *opts, "--config-out", config,
            "--no-cache", ok=(0, 3))
    if not config.exists():
        pytest.skip(f"{name}: no split to write")  # pragma: no cover - every fixture splits today
    saved = _invoke("simulate", config, "--json", "--no-cache")
    recomputed = _invoke("simulate", config, "--json", "--profile", profile, "--no-cache")
    assert json.loads(saved)["figures_from"] == "config"
    assert recomputed == saved.replace('"figures_from": "config"', '"figures_from": "profile"', 1)
    cfg = read_config(config)
    live = _live_json(profile, placement, opts, str(config), ipus)
    assert live == saved, f"{name} {placement} {opts}: the live plan simulates otherwise than its config"
    # The saved record keeps what the simulator reads of the worst tile: one stash entry's bytes.
    assert all((s.stash_entry_bytes is not None) == (s.stash_entries > 0) for s in cfg.stages)


@pytest.mark.parametrize(("name", "placement", "opts"), _cases(FAST))
def test_plan_config_and_profile_simulate_alike(tmp_path: Path, name: str, placement: str,
                                                opts: tuple[str, ...]) -> None:
    _check(tmp_path, name, placement, opts)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "placement", "opts"), _cases(SLOW))
def test_every_fixture_simulates_alike(tmp_path: Path, name: str, placement: str, opts: tuple[str, ...]) -> None:
    _check(tmp_path, name, placement, opts, ipus=4)


def test_memory_over_time_at_the_worst_tile_is_the_prediction(tmp_path: Path) -> None:
    """By hand: the worst tile's bytes with every entry in flight are the predicted worst-tile bytes,
    and each entry fewer takes one recorded entry (``stash_entry_bytes``) off them."""
    config = tmp_path / "p.yaml"
    _invoke(FIXTURES / "bert-tiny-training.json", "--solve", "--num-ipus", 3, "--config-out", config, ok=(0, 3))
    cfg = read_config(config)
    doc = json.loads(_invoke("simulate", config, "--json"))
    first = cfg.stages[0]
    assert first.stash_entries >= 2 and first.stash_entry_bytes
    ipu0 = doc["ipus"][0]
    assert ipu0["worst_tile"] == first.worst_tile
    assert ipu0["peak_bytes"] == first.worst_tile_bytes
    points = {p["stash_entries"]: p["bytes"] for p in ipu0["memory_over_time"]}
    full = first.stash_entries
    assert points[full] == first.worst_tile_bytes
    assert points[full - 1] == first.worst_tile_bytes - first.stash_entry_bytes
    assert ipu0["stash_in_flight_bytes"] == full * first.stash_entry_bytes
