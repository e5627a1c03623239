"""The training options in the pipeline config, its snippets, and the commands that read it.

Hand figures are those of fixtures/profiles/tiny-training.md (head placement
``last``, 2 IPUs ``embedding 0 | 1 head``): with ``--recompute every-layer
--optimizer-state off-chip`` the IPUs hold 340 and 325 bytes (model and
stash) on their worst tiles, plus copy buffers of 25 bytes per tile each
(50 bytes cross the boundary, activations and gradients each once, over 2 tiles).
"""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from popliner.cli import cli
from popliner.config import config_from_split, read_config
from popliner.config.model import ConfigTraining, PipelineConfig
from popliner.config.snippets import optimum_snippet, popart_snippet, poptorch_snippet
from popliner.config.yaml_io import config_from_document
from popliner.errors import ConfigError
from popliner.writers.pipeline_yaml import write_config
from tests.helpers import FIXTURES
from tests.test_config import SHA, make_split

TINY = FIXTURES / "tiny-training.json"
BERT = FIXTURES / "bert-tiny-training.json"
EVERY_OFF = ("--recompute", "every-layer", "--optimizer-state", "off-chip")


def config(training: ConfigTraining | None, mode: str = "training", groups: Any = None) -> PipelineConfig:
    split = make_split(mode) if groups is None else make_split(mode, groups)
    return config_from_split(split, profile_path="model.json", profile_sha256=SHA, tiles=1472,
                             bytes_per_tile=638_976, clock_hz=1.33e9, gradient_accumulation=None, training=training)


def document(cfg: PipelineConfig) -> dict[str, Any]:
    buf = io.StringIO()
    write_config(cfg, buf)
    return yaml.safe_load(buf.getvalue())  # type: ignore[no-any-return]


def rejected(doc: Any) -> str:
    with pytest.raises(ConfigError) as err:
        config_from_document(doc, "edited.yaml")
    message = str(err.value)
    assert "\n" not in message and message.startswith("edited.yaml:")
    return message


#: popliner's embedding and head groups as layers of their own (--head-placement last).
GROUPED = (("embedding", "enc/0"), ("enc/1", "enc:2", "7"), ("enc/3", "head"))
FULL = ConfigTraining(recompute="every-layer", optimizer_state="off-chip", replication_factor=4,
                      sharded_optimizer_state=True, head_placement="last", update_regex="(?i)adam",
                      optimizer_state_regex="^m|^v", requested="auto")


# -- the YAML ---------------------------------------------------------------------------


def test_training_block_round_trips() -> None:
    doc = document(config(FULL))
    assert doc["training"] == {
        "recompute": "every-layer", "recompute_requested": "auto", "optimizer_state": "off-chip",
        "replication_factor": 4, "sharded_optimizer_state": True, "head_placement": "last",
        "update_regex": "(?i)adam", "optimizer_state_regex": "^m|^v",
    }
    # Right after gradient_accumulation, before the solver.
    keys = list(doc)
    assert keys.index("training") == keys.index("gradient_accumulation") + 1
    assert config_from_document(doc, "x.yaml").options == FULL


def test_defaults_leave_out_the_regexes_and_the_request() -> None:
    assert document(config(ConfigTraining()))["training"] == {
        "recompute": "none", "optimizer_state": "on-chip", "replication_factor": 1,
        "sharded_optimizer_state": False, "head_placement": "first"}


def test_inference_configs_have_no_training_block() -> None:
    cfg = config(FULL, mode="inference")
    assert cfg.options is None and "training" not in document(cfg)


def test_an_older_config_without_the_block_loads_with_the_defaults() -> None:
    doc = document(config(FULL))
    del doc["training"]
    for stage in doc["stages"]:
        stage["predicted"].pop("forward_cycles", None)
        stage["predicted"].pop("recompute_cycles", None)
    cfg = config_from_document(doc, "old.yaml")
    assert cfg.options == ConfigTraining()
    assert cfg.options.options() == ConfigTraining().options()
    assert cfg.stages[0].forward_cycles is None


def test_every_key_is_optional() -> None:
    doc = document(config(FULL))
    doc["training"] = {"optimizer_state": "off-chip"}
    assert config_from_document(doc, "x.yaml").options == ConfigTraining(optimizer_state="off-chip")


@pytest.mark.parametrize(("edit", "place", "words"), [
    ({"recompute": "auto"}, "training.recompute", "write the mode --recompute auto chose"),
    ({"recompute": "sometimes"}, "training.recompute", "none, pipeline, every-layer, compiled"),
    ({"optimizer_state": "cloud"}, "training.optimizer_state", "on-chip, off-chip"),
    ({"replication_factor": 0}, "training.replication_factor", "0 is below 1"),
    ({"replication_factor": "4"}, "training.replication_factor", "whole number"),
    ({"sharded_optimizer_state": "yes"}, "training.sharded_optimizer_state", "true or false"),
    ({"sharded_optimizer_state": True, "replication_factor": 1}, "training.sharded_optimizer_state",
     "replication_factor: 2"),
    ({"head_placement": "middle"}, "training.head_placement", "first"),
    ({"update_regex": "("}, "training.update_regex", "not a regular expression"),
    ({"optimizer_state_regex": 5}, "training.optimizer_state_regex", "expected text"),
    ({"recompute_requested": "every-layer"}, "training.recompute_requested", "auto"),
    ({"recompute_pipeline": "x"}, "training.recompute_pipeline", "unknown key"),
])
def test_bad_training_options_are_one_line_errors(edit: dict[str, Any], place: str, words: str) -> None:
    doc = document(config(ConfigTraining()))
    doc["training"].update(edit)
    message = rejected(doc)
    assert f" {place}:" in message and words in message


def test_a_block_in_an_inference_config_is_refused() -> None:
    doc = document(config(None, mode="inference"))
    doc["training"] = {"recompute": "none"}
    assert "training options in an inference config" in rejected(doc)


def test_the_block_must_be_a_mapping() -> None:
    doc = document(config(ConfigTraining()))
    doc["training"] = ["every-layer"]
    assert " training: " in rejected(doc)


# -- snippets: the frameworks' own option names ---------------------------------------------


@pytest.mark.parametrize("training", [ConfigTraining(), FULL,
                                      ConfigTraining(recompute="pipeline", optimizer_state="off-chip"),
                                      ConfigTraining(recompute="compiled", replication_factor=2)])
def test_snippets_are_valid_python_and_yaml(training: ConfigTraining) -> None:
    cfg = config(training)
    ast.parse(popart_snippet(cfg))
    ast.parse(poptorch_snippet(cfg))
    # The YAML document carries them all, and reads back.
    doc = document(cfg)
    assert doc["snippets"]["optimum_graphcore"] == json.loads(json.dumps(optimum_snippet(cfg)))


def test_snippets_carry_every_option() -> None:
    cfg = config(FULL, groups=GROUPED)
    popart, poptorch, optimum = popart_snippet(cfg), poptorch_snippet(cfg), optimum_snippet(cfg)
    for line in ("opts.autoRecomputation = popart.RecomputationType.Pipeline",
                 "builder.checkpointOutput([x])[0]",
                 "opts.optimizerStateTensorLocationSettings.location.storage = popart.TensorStorage.OffChip",
                 "opts.optimizerStateTensorLocationSettings.location.replicatedTensorSharding = "
                 "popart.ReplicatedTensorSharding.On",
                 "opts.enableReplicatedGraphs = True", "opts.replicatedGraphCount = 4"):
        assert line in popart
    for line in ('opts._Popart.set("autoRecomputation", 3)', "poptorch.recomputationCheckpoint(output)",
                 "opts.TensorLocations.setOptimizerLocation(",
                 "poptorch.TensorLocationSettings().useOnChipStorage(False).useReplicatedTensorSharding(True))",
                 "opts.replicationFactor(4)"):
        assert line in poptorch
    assert optimum["recompute_checkpoint_every_layer"] is True
    assert optimum["optimizer_state_offchip"] is True
    assert optimum["replicated_tensor_sharding"] is True
    assert optimum["replication_factor"] == 4


def test_snippets_without_options_set_none_of_them() -> None:
    cfg = config(ConfigTraining(head_placement="last"), groups=GROUPED)
    popart, poptorch, optimum = popart_snippet(cfg), poptorch_snippet(cfg), optimum_snippet(cfg)
    for word in ("autoRecomputation", "TensorStorage", "ReplicatedTensorSharding", "replicatedGraphCount"):
        assert word not in popart
    for word in ("recomputationCheckpoint", "setOptimizerLocation", "replicationFactor"):
        assert word not in poptorch
    # PopTorch recomputes by itself over more than one IPU (Compiler.cpp) unless told not to: the figures are for none.
    assert 'opts._Popart.set("autoRecomputation", 0)' in poptorch and "autoRecomputation\", 3" not in poptorch
    assert optimum["recompute_checkpoint_every_layer"] is False
    assert optimum["optimizer_state_offchip"] is False
    assert optimum["replicated_tensor_sharding"] is False
    assert optimum["replication_factor"] == 1


def test_pipeline_recomputation_has_no_checkpoints() -> None:
    cfg = config(ConfigTraining(recompute="pipeline", head_placement="last"), groups=GROUPED)
    assert "opts.autoRecomputation = popart.RecomputationType.Pipeline" in popart_snippet(cfg)
    assert "checkpointOutput" not in popart_snippet(cfg)
    assert "recomputationCheckpoint" not in poptorch_snippet(cfg)
    # IPUConfig has no field for pipeline recomputation alone.
    assert optimum_snippet(cfg)["recompute_checkpoint_every_layer"] is False


# -- the commands: one figure, to the byte ---------------------------------------------------


def invoke(*args: object, ok: tuple[int, ...] = (0,)) -> Any:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code in ok, result.output
    return result


def table_rows(text: str) -> list[tuple[int, int]]:
    """(tile, total) per IPU from a per-IPU table with ``tile`` and ``total`` columns."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["IPU"] and "tile" in line.split())
    names = lines[head].split()
    rows = []
    for line in lines[head + 1:]:
        cells = line.split()
        if not cells or not cells[0].isdigit():
            break
        rows.append((int(cells[names.index("tile")]), int(cells[names.index("total")].replace(",", ""))))
    return rows


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def views(profile: Path, config_path: Path, solve: Any) -> dict[str, list[tuple[int, int]]]:
    """Every view of the split's per-IPU worst tile, each reading the config as its command does."""
    from popliner.analysis import load_analysis
    from popliner.config.options import analysis_options

    cfg = read_config(config_path)
    check = invoke("check", config_path, "--profile", profile, ok=(0, 1)).stdout
    sim = json.loads(invoke("simulate", config_path, "--profile", profile, "--json").stdout)
    analysis = load_analysis(str(profile), analysis_options(cfg.mode, cfg.options))
    tiles = analysis.stage_results(cfg.layer_groups, cfg.effective_budget)
    doc = json.loads(solve.stdout)
    return {
        "solve JSON": [(s["worst_tile"], s["worst_tile_bytes"]) for s in doc["stages"]],
        "solve table": table_rows(solve.stderr),
        "check": table_rows(check),
        "simulate": [(u["worst_tile"], u["peak_bytes"]) for u in sim["ipus"]],
        "tile plot": [(i.worst_tile, i.worst_tile_bytes) for i in tiles],
        "config": [(s.worst_tile, s.worst_tile_bytes) for s in cfg.stages],
    }


def test_tiny_every_layer_off_chip_by_hand_in_every_view(cache: Path) -> None:
    config_path = cache / "p.yaml"
    solve = invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", *EVERY_OFF,
                   "--mem-per-tile", "460", "--config-out", config_path)
    assert [s["layers"] for s in json.loads(solve.stdout)["stages"]] == [["embedding", "0"], ["1", "head"]]
    for view, got in views(TINY, config_path, solve).items():
        assert got == [(0, 340 + 25), (1, 325 + 25)], view
    # Re-run cycles by hand: layer 0's forward (steps 1-2, 120) and layer 1's (steps 3-4, 120).
    stages = read_config(config_path).stages
    assert [(s.forward_cycles, s.recompute_cycles, s.cycles) for s in stages] == [
        (130, 120, 130 + 430), (175, 120, 175 + 510)]


@pytest.mark.parametrize("options", [
    EVERY_OFF,
    ("--recompute", "pipeline", "--optimizer-state", "off-chip", "--replication-factor", "2",
     "--sharded-optimizer-state"),
    ("--recompute", "auto", "--mem-per-tile", "450000"),
])
def test_bert_tiny_with_options_gives_one_figure(cache: Path, options: tuple[str, ...]) -> None:
    config_path = cache / "p.yaml"
    solve = invoke(BERT, "--solve", "--num-ipus", "3", "--exact-ipus", "--time-limit", "20", *options,
                   "--config-out", config_path, ok=(0, 3))
    figures = views(BERT, config_path, solve)
    expected = figures["solve JSON"]
    for view, got in figures.items():
        assert got == expected, f"{view}: {got} != {expected}"
    # The options change the figures: without them the first IPU is heavier.
    plain = json.loads(invoke(BERT, "--solve", "--num-ipus", "3", "--exact-ipus", "--time-limit", "20",
                              ok=(0, 3)).stdout)
    assert plain["stages"][0]["worst_tile_bytes"] > expected[0][1]


def test_auto_is_recorded_as_the_mode_it_chose(cache: Path) -> None:
    config_path = cache / "p.yaml"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", "--recompute", "auto",
           "--mem-per-tile", "450", "--config-out", config_path)
    t = read_config(config_path).options
    assert t is not None and (t.recompute, t.requested) == ("pipeline", "auto")
    # --recompute auto on check agrees with a config whose mode auto chose.
    invoke("check", config_path, "--profile", TINY, "--recompute", "auto")


def test_a_conflicting_option_on_check_simulate_report_is_refused(cache: Path) -> None:
    config_path = cache / "p.yaml"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", *EVERY_OFF, "--mem-per-tile", "460",
           "--config-out", config_path)
    for command in (("check",), ("simulate",), ("report", "-o", cache / "r.html")):
        result = invoke(*command, config_path, "--profile", TINY, "--optimizer-state", "on-chip", ok=(2,))
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith("popliner: error: --optimizer-state on-chip conflicts with")
        assert "training.optimizer_state: off-chip" in line
    assert not (cache / "r.html").exists()
    # The same value as the config is accepted.
    invoke("check", config_path, "--profile", TINY, "--recompute", "every-layer", "--head-placement", "last")


def test_training_options_on_an_inference_config_are_refused(cache: Path) -> None:
    config_path = cache / "p.yaml"
    invoke(BERT, "--mode", "inference", "--solve", "--num-ipus", "2", "--config-out", config_path, ok=(0, 3))
    result = invoke("check", config_path, "--profile", BERT, "--recompute", "none", ok=(2,))
    assert "is an inference config and training options do not apply" in result.stderr


# -- the review workbook's planner -------------------------------------------------------------


def test_planner_figures_with_options_equal_check_by_hand() -> None:
    from popliner.analysis import AnalysisOptions, analyse_profile
    from popliner.breakdown import build_breakdown
    from popliner.memory.training import TrainingOptions
    from popliner.profile import load_profile
    from tests.planner_reader import planner_figures

    training = TrainingOptions(recompute="every-layer", optimizer_state="off-chip", head_placement="last")
    analysis = analyse_profile(load_profile(TINY), AnalysisOptions(training=training))
    breakdown = build_breakdown(analysis, planner_ipus=2)
    assert breakdown.training is not None and breakdown.training.summary() == (
        "recompute every-layer, optimizer state off-chip, head placement last")
    placement = {"embedding": 0, "0": 0, "1": 1, "head": 1}
    figures, exact = planner_figures(breakdown, placement, budget_bytes=1000, num_ipus=2)
    assert exact and figures == [340 + 25, 325 + 25]
    check = analysis.pipeline_figures([["embedding", "0"], ["1", "head"]])
    assert figures == [f.worst_bytes for f in check]


def test_check_of_a_workbook_uses_the_options_it_records(cache: Path) -> None:
    from openpyxl import load_workbook

    from popliner.writers.planner import MODE_ROW, PLANNER_SHEET, RANGES_SHEET, TRAINING_COL

    book = cache / "review.xlsx"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", *EVERY_OFF, "--mem-per-tile", "460",
           "-o", book)
    sheets = load_workbook(book)
    recorded = json.loads(sheets[PLANNER_SHEET].cell(row=MODE_ROW, column=TRAINING_COL).value)
    assert recorded["recompute"] == "every-layer" and recorded["optimizer_state"] == "off-chip"
    header = [c.value for c in sheets[RANGES_SHEET][1]]
    assert header[-1] == "Figures assume: recompute every-layer, optimizer state off-chip, head placement last"
    check = invoke("check", book, "--profile", TINY).stdout
    assert table_rows(check) == [(0, 340 + 25), (1, 325 + 25)]
    # config-from writes the options into the config.
    config_path = cache / "p.yaml"
    invoke("config-from", book, "--profile", TINY, "-o", config_path)
    assert read_config(config_path).options == ConfigTraining(recompute="every-layer", optimizer_state="off-chip",
                                                               head_placement="last")


# -- plots and the HTML report name the options ----------------------------------------------


@pytest.mark.slow  # a long case (about 4 s)
def test_plots_name_the_options_they_assume(cache: Path) -> None:
    plot = cache / "m.svg"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", *EVERY_OFF, "--mem-per-tile", "460",
           "--plot", plot)
    # matplotlib's SVG keeps each text as a comment next to its glyphs.
    words = "training options: recompute every-layer, optimizer state off-chip, head placement last"
    for name in ("m.svg", "m-split.svg", "m-tiles.svg"):
        assert words in (cache / name).read_text(encoding="utf-8"), name


def test_report_shows_the_config_options_and_recompute_bars(cache: Path) -> None:
    from popliner.analysis import load_analysis
    from popliner.config.options import analysis_options
    from popliner.report import build_report

    config_path = cache / "p.yaml"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", *EVERY_OFF, "--mem-per-tile", "460",
           "--config-out", config_path)
    cfg = read_config(config_path)
    analysis = load_analysis(str(TINY), analysis_options(cfg.mode, cfg.options))
    report = build_report(analysis, cfg, budget=460, source=str(config_path))
    options = {o.name: o.value for o in report.options}
    assert (options["recompute"], options["optimizer_state"], options["head_placement"]) == (
        "every-layer", "off-chip", "last")
    assert report.training == "recompute every-layer, optimizer state off-chip, head placement last"
    assert report.sim is not None and any(f.kind == "R" for f in report.sim.fragments)
    invoke("report", config_path, "--profile", TINY, "-o", cache / "r.html")
    html = (cache / "r.html").read_text(encoding="utf-8")
    assert "training (recompute every-layer, optimizer state off-chip, head placement last)" in html


def test_a_config_that_says_compiled_warns_on_a_profile_without_clones(cache: Path) -> None:
    config_path = cache / "p.yaml"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", "--mem-per-tile", "1000",
           "--config-out", config_path)
    doc = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    doc["training"]["recompute"] = "compiled"
    config_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result = invoke("check", config_path, "--profile", TINY, "--recompute", "every-layer")  # any mode agrees
    assert "records recompute compiled but the profile has no recompute operations" in result.stderr


def test_a_bad_option_in_the_workbook_names_the_cell(cache: Path) -> None:
    from openpyxl import load_workbook

    from popliner.writers.planner import MODE_ROW, PLANNER_SHEET, TRAINING_COL

    book = cache / "review.xlsx"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", *EVERY_OFF, "--mem-per-tile", "460",
           "-o", book)
    sheets = load_workbook(book)
    sheets[PLANNER_SHEET].cell(row=MODE_ROW, column=TRAINING_COL).value = '{"recompute": "auto"}'
    sheets.save(book)
    result = invoke("check", book, "--profile", TINY, ok=(2,))
    assert f"review.xlsx, sheet {PLANNER_SHEET}, cell G{MODE_ROW}: recompute: `auto` is a request" in result.stderr


def test_check_says_which_options_it_applies(cache: Path) -> None:
    config_path = cache / "p.yaml"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", *EVERY_OFF, "--mem-per-tile", "460",
           "--config-out", config_path)
    result = invoke("check", config_path, "--profile", TINY)
    assert (f"training options from {config_path}: recompute every-layer, optimizer state off-chip, "
            "head placement last") in result.stderr


def test_config_from_keeps_recompute_requested_auto(cache: Path) -> None:
    # tiny-training.md: at 460 bytes on 2 IPUs with `last`, `auto` chooses every-layer (no recompute or
    # pipeline fits; see the exit-3 test above). The workbook records what was asked as well as what was
    # chosen, and config-from writes both, as --config-out does.
    from openpyxl import load_workbook

    from popliner.writers.planner import MODE_ROW, PLANNER_SHEET, TRAINING_COL

    book, direct, via_book = cache / "review.xlsx", cache / "direct.yaml", cache / "from-book.yaml"
    invoke(TINY, "--solve", "--num-ipus", "2", "--head-placement", "last", "--recompute", "auto",
           "--optimizer-state", "off-chip", "--mem-per-tile", "460", "-o", book, "--config-out", direct)
    recorded = json.loads(load_workbook(book)[PLANNER_SHEET].cell(row=MODE_ROW, column=TRAINING_COL).value)
    assert recorded["recompute_requested"] == "auto"
    invoke("config-from", book, "--profile", TINY, "-o", via_book)
    options = read_config(via_book).options
    assert options is not None and options.requested == "auto" and options.recompute == recorded["recompute"]
    assert options == read_config(direct).options


def test_poptorch_every_layer_hook_checkpoints_the_tensors_of_a_tuple_output() -> None:
    # The hook of the snippet, run with stand-ins for torch and poptorch: a layer returning one tensor, a
    # Hugging Face style tuple (hidden_states, None), and a list.
    import types

    tree = ast.parse(poptorch_snippet(config(FULL)))
    hook = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "checkpoint_output")

    class Tensor:
        pass

    checkpointed: list[object] = []

    def checkpoint(t: object) -> tuple[str, object]:
        checkpointed.append(t)
        return ("ckpt", t)

    namespace = {"torch": types.SimpleNamespace(Tensor=Tensor),
                 "poptorch": types.SimpleNamespace(recomputationCheckpoint=checkpoint)}
    exec(compile(ast.Module([hook], type_ignores=[]), "snippet", "exec"), namespace)
    run = namespace["checkpoint_output"]
    a, b = Tensor(), Tensor()
    assert run(None, (), a) == ("ckpt", a)
    assert run(None, (), (a, None)) == (("ckpt", a), None)
    assert run(None, (), [a, b]) == [("ckpt", a), ("ckpt", b)]
    assert run(None, (), None) is None
    assert checkpointed == [a, a, a, b]
