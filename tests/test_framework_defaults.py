"""The defaults a split is planned with: what each framework builds when the user says nothing.

The rules are PopTorch's and optimum-graphcore's own (popliner/defaults.py cites them); the
``auto`` head placement is checked against each placement solved on its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.cli import cli
from popliner.defaults import framework_defaults
from popliner.plan import SplitRequest, plan_split
from tests.helpers import FIXTURES


@pytest.mark.parametrize(("framework", "ipus", "tied", "recompute", "head"), [
    ("poptorch", 4, True, "pipeline", "auto"),
    ("poptorch", 1, False, "none", "auto"),
    ("optimum", 4, True, "pipeline", "wrap"),
    ("optimum", 4, False, "pipeline", "last"),
    ("popart", 4, True, "none", "wrap"),  # a tied head back on IPU 0, as Graphcore's PopART BERT runs it
    ("popart", 1, True, "none", "first"),
    ("popart", 4, False, "none", "first"),
    ("tensorflow", 8, False, "none", "first"),
])
def test_framework_defaults_by_hand(framework, ipus, tied, recompute, head):
    found = framework_defaults(framework, ipus, tied)
    assert (found.recompute, found.head_placement) == (recompute, head)


@pytest.fixture(scope="module")
def gpt2_poptorch(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpt2") / "gpt2.json"
    result = CliRunner().invoke(cli, ["synth", "--preset", "gpt2-tiny", "--mode", "training", "--framework",
                                      "poptorch", "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture(scope="module")
def gpt2_untied(tmp_path_factory) -> Path:
    """The same model with an LM head of its own (``--untied-head``): ``last`` and ``wrap`` are both built."""
    path = tmp_path_factory.mktemp("gpt2") / "gpt2-untied.json"
    result = CliRunner().invoke(cli, ["synth", "--preset", "gpt2-tiny", "--mode", "training", "--framework",
                                      "poptorch", "--untied-head", "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path


def test_poptorch_profile_is_planned_as_poptorch_builds_it(gpt2_poptorch):
    result = CliRunner().invoke(cli, [str(gpt2_poptorch), "--solve", "--num-ipus", "2", "--no-cache"])
    assert result.exit_code in (0, 3), result.output
    doc = json.loads(result.stdout)
    assert doc["framework"]["name"] == "poptorch"
    # PopTorch turns pipeline recomputation on by itself over 2 IPUs; the head goes where it fits best.
    assert doc["training"]["recompute"] == "pipeline"
    assert "planned as PopTorch builds it" in result.stderr
    assert "--head-placement auto chose" in result.stderr


def test_an_option_given_wins(gpt2_untied):
    result = CliRunner().invoke(cli, [str(gpt2_untied), "--solve", "--num-ipus", "2", "--recompute", "none",
                                      "--head-placement", "last", "--no-cache"])
    doc = json.loads(result.stdout)
    assert doc["training"]["recompute"] == "none" and doc["training"]["head_placement"] == "last"
    assert "auto chose" not in result.stderr


def test_optimum_wraps_a_tied_head_and_puts_another_last(gpt2_poptorch):
    tied = CliRunner().invoke(cli, [str(gpt2_poptorch), "--solve", "--num-ipus", "2", "--framework", "optimum",
                                    "--no-cache"])
    assert json.loads(tied.stdout)["training"]["head_placement"] == "wrap"
    squad = CliRunner().invoke(cli, [str(FIXTURES / "bert-tiny-training.json"), "--solve", "--num-ipus", "2",
                                     "--framework", "optimum", "--no-cache"])
    assert json.loads(squad.stdout)["training"]["head_placement"] == "last"


def test_auto_takes_the_placement_that_fits_on_the_fewest_ipus(gpt2_untied):
    analysis = load_analysis(str(gpt2_untied), AnalysisOptions(), use_cache=False)
    base = SplitRequest(num_ipus=4, recompute="pipeline", time_limit=30)
    plan = plan_split(analysis, SplitRequest(**{**base.__dict__, "head_placement": "auto"}))
    # Independently: each placement solved on its own, the fewest IPUs it fits on.
    fewest = {}
    for placement in ("last", "wrap"):  # what PopTorch builds (first is not: the head would run on the last IPU)
        one = plan_split(analysis, SplitRequest(**{**base.__dict__, "head_placement": placement}))
        fewest[placement] = one.facts.fewest_ipus if one.facts is not None else None
    assert dict(plan.placements_tried) == fewest
    best = min(v for v in fewest.values() if v is not None)
    assert fewest[plan.layout.placement] == best
    # The placements share their option-free parts (and the whole program's figure): the chosen one's split
    # is the one planned alone, to the byte.
    again = load_analysis(str(gpt2_untied), AnalysisOptions(), use_cache=False)  # parts of its own
    alone = plan_split(again, SplitRequest(**{**base.__dict__, "head_placement": plan.layout.placement}))
    assert alone.analysis.base.shared is not plan.analysis.base.shared
    assert plan.split.budget_bytes == alone.split.budget_bytes
    assert [(s.layers, s.worst_tile, s.worst_tile_bytes, s.stash_bytes, s.copy_buffer, s.cycles, s.memory)
            for s in plan.split.stages] == [(s.layers, s.worst_tile, s.worst_tile_bytes, s.stash_bytes,
                                             s.copy_buffer, s.cycles, s.memory) for s in alone.split.stages]


def test_auto_says_more_than_the_ipus_asked_when_nothing_fits(gpt2_untied, gpt2_poptorch):
    result = CliRunner().invoke(cli, [str(gpt2_untied), "--solve", "--num-ipus", "2", "--head-placement", "auto",
                                      "--mem-per-tile", "2000", "--no-cache"])
    assert result.exit_code == 3, result.output
    assert "nothing fits (fewest IPUs that fit: last: more than 2, wrap: more than 2)" in result.stderr
    # A tied head is never put last over 2 IPUs: auto tries wrap alone, and says why.
    tied = CliRunner().invoke(cli, [str(gpt2_poptorch), "--solve", "--num-ipus", "2", "--head-placement", "auto",
                                    "--mem-per-tile", "2000", "--no-cache"])
    assert tied.exit_code == 3, tied.output
    assert "so last is left out; nothing fits (fewest IPUs that fit: wrap: more than 2)" in tied.stderr
