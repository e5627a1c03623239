"""The planner (``popliner.plan``) and the one layout value (``popliner.layout``).

The CLI's ``--solve`` is a request handed to :func:`plan_split`: the library
and the notebook API must give what the CLI prints, ``auto`` exists only as
a request, and where the head goes is read in one place.
"""

from __future__ import annotations

import json

import openpyxl
import pytest
from click.testing import CliRunner

import popliner
from popliner.analysis import AnalysisOptions, load_analysis
from popliner.cli import cli as main
from popliner.errors import UsageProblem
from popliner.layout import Layout
from popliner.memory.training import TrainingOptions
from popliner.plan import SplitRequest, plan_split
from tests.helpers import FIXTURES

BERT_TINY = str(FIXTURES / "bert-tiny-training.json")
BERT_BASE = str(FIXTURES / "bert-base-training.json.gz")


# -- the layout ---------------------------------------------------------------------------------


def test_layout_groups_only_when_placed_and_at_both_ends():
    names = ("embedding", "0", "1", "head")
    assert Layout.of(names, "wrap").wraps and Layout.of(names, "wrap").placed_names == names[:-1]
    assert not Layout.of(names, "last").wraps and Layout.of(names, "last").placed_names == names
    # With `first` nothing is grouped: layers that happen to be called so are the model's own.
    assert not Layout.of(names, "first").grouped
    assert Layout.of(names, "first").model_layer_counts([names[:2], names[2:]]) == [2, 2]
    # A model layer called `head` in the middle is no group.
    assert not Layout.of(("embedding", "head", "0"), "wrap").grouped


def test_layout_counts_model_layers_as_optimum_does():
    layout = Layout.of(("embedding", "0", "1", "2", "head"), "wrap")
    # IPU 0 holds the embedding and the wrapped head: no model layer (optimum's 0 for an embedding-only IPU).
    assert layout.model_layer_counts([("embedding", "head"), ("0", "1"), ("2",)]) == [0, 2, 1]
    assert layout.wraps_in([("embedding", "head"), ("0", "1", "2")])
    assert not layout.wraps_in([("embedding", "0", "1", "2", "head")])  # one IPU: nothing wraps
    assert not layout.wraps_at(1) and layout.wraps_at(2)


def test_layout_read_back_from_an_inference_config():
    wrap = Layout.of_stages([("embedding", "head", "0"), ("1",)], None)
    assert wrap.placement == "wrap" and wrap.names == ("embedding", "0", "1", "head")
    last = Layout.of_stages([("embedding", "0"), ("1", "head")], None)
    assert last.placement == "last" and not last.wraps and last.grouped
    assert Layout.of_stages([("0",), ("1",)], None).placement == "first"


# -- recompute requests -------------------------------------------------------------------------


def test_the_library_refuses_auto_as_a_mode():
    with pytest.raises(UsageProblem, match="auto.*request.*plan_split"):
        TrainingOptions(recompute="auto")  # type: ignore[arg-type]


def test_auto_is_resolved_by_the_planner_and_both_values_are_on_the_plan():
    analysis = load_analysis(BERT_BASE, AnalysisOptions(), use_cache=False)
    # 2 IPUs: without recomputation the BERT-Base fixture needs 3, and pipeline recomputation keeps the
    # stash (it only shortens the forward window), so auto must go on to every-layer.
    plan = plan_split(analysis, SplitRequest(num_ipus=2, ipus="exactly", recompute="auto", time_limit=30))
    assert plan.recompute_requested == "auto"
    assert plan.recompute_applied == "every-layer"
    assert plan.fits
    assert plan.training is not None and plan.training.requested == "auto"
    assert plan.training.recompute == plan.recompute_applied
    assert plan.analysis.options.training.recompute == plan.recompute_applied


# -- the same plan from the CLI, the library and the notebook -----------------------------------


def test_cli_library_and_notebook_give_the_same_split():
    runner = CliRunner()
    result = runner.invoke(main, [BERT_BASE, "--solve", "--num-ipus", "8", "--min-ipus", "--recompute", "auto",
                                  "--no-cache"])
    assert result.exit_code == 0, result.output
    cli = json.loads(result.stdout)
    model = popliner.load(BERT_BASE, use_cache=False)
    plan = model.plan(num_ipus=8, ipus="fewest", recompute="auto")
    assert plan.split.num_ipus_used == cli["num_ipus_used"]
    assert [list(s.layers) for s in plan.split.stages] == [s["layers"] for s in cli["stages"]]
    assert [s.worst_tile_bytes for s in plan.split.stages] == [s["worst_tile_bytes"] for s in cli["stages"]]
    # --min-ipus: the fewest IPUs that fit is what the split uses, and the facts agree.
    assert plan.facts is not None and plan.facts.fewest_ipus == plan.split.num_ipus_used


def test_the_suggestion_is_on_the_plan_when_nothing_fits():
    model = popliner.load(BERT_BASE, use_cache=False)
    plan = model.plan(num_ipus=2, time_limit=60)
    assert not plan.fits and plan.suggestion is not None
    runner = CliRunner()
    result = runner.invoke(main, [BERT_BASE, "--solve", "--num-ipus", "2", "--no-cache"])
    assert result.exit_code == 3
    found = plan.suggestion
    if found.options is not None:
        assert f"fits on {found.fewest} IPU" in result.stderr


def test_notebook_plan_refuses_unknown_fields():
    model = popliner.load(BERT_TINY, use_cache=False)
    with pytest.raises(UsageProblem, match="unknown request field"):
        model.plan(num_ipu=2)


# -- the crash that came from two layer counts ---------------------------------------------------


def test_wrap_with_a_workbook_writes_the_planner(tmp_path):
    out = tmp_path / "r.xlsx"
    result = CliRunner().invoke(main, [BERT_TINY, "--head-placement", "wrap", "-o", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    book = openpyxl.load_workbook(out, read_only=True)
    assert book.sheetnames  # a real workbook
    # The range table covers the layers a split places in order: the wrapped head goes with IPU 0.
    analysis = load_analysis(BERT_TINY, AnalysisOptions(training=TrainingOptions(head_placement="wrap")),
                             use_cache=False)
    from popliner.breakdown import range_table

    table = range_table(analysis, 3)
    assert table.layers == analysis.facts.layout.placed_names
    assert "head" not in table.layers


def test_other_training_options_keep_the_whole_program_figure():
    """It depends on the profile and its operations only: a re-analysis takes it along, computed once."""
    from popliner.analysis import scenario

    analysis = load_analysis(BERT_TINY, AnalysisOptions(), use_cache=False)
    whole = analysis.whole_memory  # a cached load has it already; here the first reading makes it
    other = scenario(analysis.base, TrainingOptions(recompute="every-layer", head_placement="wrap"))
    assert other.whole_memory is whole
    # Against a re-analysis that computes it afresh.
    fresh = load_analysis(BERT_TINY, AnalysisOptions(training=TrainingOptions(recompute="every-layer",
                                                                              head_placement="wrap")),
                          use_cache=False)
    assert (other.whole_memory.per_tile == fresh.whole_memory.per_tile).all()
    assert other.base.default_headroom == fresh.base.default_headroom
