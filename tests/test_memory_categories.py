"""The compiler's other categories: the sixth component, its rules, coverage and every view.

The hand example is ``fixtures/profiles/tiny.json`` (worked through in
``tiny.md``) with two more categories: a stack of 100 bytes on every tile
(fixed) and vertex field data, which follows vertex instances. Vertex
instances per tile, over the operations' programs (from the document):
Gather 2/2/2/2, layer0/matmul 4/3/0/0, layer0/add 1/1/5/5, layer1/matmul
2/2/3/2, relu 0/0/0/1, loss 1/0/0/0: 10/8/10/10 in all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from popliner.analysis import Analysis, AnalysisOptions
from popliner.breakdown import build_breakdown, profile_coverage
from popliner.cli import cli
from popliner.memory.categories import MODELLED, category_rule
from popliner.memory.training import TrainingOptions
from popliner.synth import generate_document, preset_spec
from popliner.writers.grid import evaluate_book
from popliner.writers.tables import layers_grid, operations_grid
from tests.helpers import FIXTURES, analyse_document, range_table_equals_engine

FIELD_DATA = [100, 80, 50, 30]


def _tiny_with_categories() -> dict[str, Any]:
    doc = json.loads((FIXTURES / "tiny.json").read_text())
    doc["tileMemory"]["categories"] |= {"stack": {"runs": [[0, 4, 100]]}, "vertexFieldData": FIELD_DATA}
    return doc


def _ops(analysis: Analysis, *names: str) -> np.ndarray:
    return np.array([analysis.ops.names.index(n) for n in names])


def test_rules_of_the_categories() -> None:
    assert category_rule("stack") == "fixed"
    assert category_rule("vertexFieldData") == "vertices"
    assert category_rule("copyDescriptor") == "copies"
    assert category_rule("hostExchangePacketHeader") == "streams"
    assert category_rule("controlTable") == "control"
    assert category_rule("somethingNew") == "fixed"  # unknown categories are kept on every IPU
    assert "vectorListDescriptor" not in MODELLED  # vertex state is instances x size only


def test_hand_example_stage_shares() -> None:
    analysis = analyse_document(_tiny_with_categories())
    assert analysis.model.has_other
    mm0 = analysis.model.stage(_ops(analysis, "layer0/matmul"))
    # stack 100 + ceil(field data x stage instances / all instances): 100*4/10, 80*3/8, 0, 0.
    assert mm0.per_tile[-1].tolist() == [140, 130, 100, 100]
    mm1 = analysis.model.stage(_ops(analysis, "layer1/matmul"))
    # 100*2/10 = 20, 80*2/8 = 20, 50*3/10 = 15, 30*2/10 = 6
    assert mm1.per_tile[-1].tolist() == [120, 120, 115, 106]
    whole = analysis.whole_memory
    assert whole.per_tile[-1].tolist() == [100 + v for v in FIELD_DATA]  # every operation: the compiler's bytes
    assert whole.summed().other == 400 + sum(FIELD_DATA)


def test_without_other_categories_nothing_changes() -> None:
    analysis = analyse_document(json.loads((FIXTURES / "tiny.json").read_text()))
    assert not analysis.model.has_other
    assert analysis.whole_memory.per_tile.shape[0] == 5
    breakdown = build_breakdown(analysis)
    assert not breakdown.has_other
    assert "Other categories (bytes)" not in layers_grid(breakdown)._rows[0].cells
    assert analysis.base.default_headroom == 0.0


@pytest.fixture(scope="module")
def generated() -> dict[str, Any]:
    """bert-tiny training on 32 tiles with every category the generator writes."""
    return generate_document(preset_spec("bert-tiny", "training", layers=2, compiler_categories=True))


def test_generated_profile_model_equals_compiler_on_every_tile(generated: dict[str, Any]) -> None:
    analysis = analyse_document(generated)
    whole = analysis.whole_memory
    truth = analysis.profile.tile_memory
    assert truth is not None
    compiler = truth["alwaysLive"] + truth["notAlwaysLivePeak"]
    model = whole.total_per_tile
    # Within 1% on every tile, never more than 1% below (the only shortfall: unattributed Sync control code).
    assert np.all(model >= 0.99 * compiler) and np.all(model <= 1.01 * compiler)
    others = sum(truth[f"category.{n}"] for n in analysis.model.categories.names)  # type: ignore[union-attr]
    assert np.array_equal(whole.per_tile[-1], others)
    cov = profile_coverage(analysis)
    assert cov is not None and 0.99 <= cov.lowest <= cov.overall <= 1.01
    assert 0.0 < analysis.base.default_headroom <= 0.01


def test_per_operation_shares_add_up_to_the_following_categories(generated: dict[str, Any]) -> None:
    analysis = analyse_document(generated)
    cats = analysis.model.categories
    assert cats is not None
    per_op = sum(m.other for m in analysis.model.per_operation_totals())
    following = int(cats.amount.sum())
    assert abs(per_op - following) <= analysis.ops.count  # one rounding per operation at most


@pytest.mark.parametrize("options", [{}, {"recompute": "every-layer"}, {"head_placement": "wrap"}],
                         ids=["plain", "every-layer", "wrap"])
def test_range_table_equals_the_direct_model(generated: dict[str, Any], options: dict[str, str]) -> None:
    analysis = analyse_document(generated, AnalysisOptions(training=TrainingOptions(**options)))  # type: ignore
    engine = analysis.facts
    table = analysis.range_table(2**62)
    range_table_equals_engine(table, engine, table.num_layers)


def test_tables_show_the_sixth_component(generated: dict[str, Any]) -> None:
    breakdown = build_breakdown(analyse_document(generated))
    assert breakdown.has_other
    layers = layers_grid(breakdown)
    header = layers._rows[0].cells
    assert header[7] == "Other categories (bytes)" and header[8] == "Total (bytes)"
    ops = operations_grid(breakdown)
    assert ops._rows[0].cells[8] == "Other categories (bytes)"
    titles = [t.category for t in breakdown.totals]
    assert "Other categories" in titles
    other = next(t for t in breakdown.totals if t.category == "Other categories")
    assert other.model == other.ground_truth  # the whole model gives back the compiler's bytes


def test_every_view_agrees_with_other_categories(generated: dict[str, Any], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import test_one_figure as one

    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    profile = tmp_path / "gen.json"
    profile.write_text(json.dumps(generated, default=lambda a: a.tolist()))
    config = tmp_path / "pipeline.yaml"
    out, err = one._invoke(profile, "--mode", "training", "--solve", "--num-ipus", 2, "--exact-ipus",
                           "--mem-per-tile", 2_000_000, "--config-out", config, ok=(0, 3))
    assert "the model accounts for" in err  # the coverage line of the solve summary
    check_out, _ = one._invoke("check", config, "--profile", profile, ok=(0, 1))
    sim_out, _ = one._invoke("simulate", config, "--profile", profile, "--json")
    run = one.Run(profile, "training", config, json.loads(out), err, check_out, json.loads(sim_out))
    expected = one.solve_json_view(run)
    for name, view in one.VIEWS.items():
        got = view(run)
        assert [b for _, b in got] == [b for _, b in expected], name
    assert all("other" in s["memory_bytes_summed_over_tiles"] for s in run.solve_json["stages"])
    assert "other:" in config.read_text()


def test_memory_totals_names_the_least_covered_tile(generated: dict[str, Any], tmp_path: Path) -> None:
    profile = tmp_path / "gen.json"
    profile.write_text(json.dumps(generated, default=lambda a: a.tolist()))
    result = CliRunner().invoke(cli, [str(profile), "--memory-totals", "--no-cache"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "Other categories," in result.stdout
    assert "Total on the tile the model covers least (tile " in result.stdout


def test_report_gives_the_coverage(generated: dict[str, Any], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    profile = tmp_path / "gen.json"
    profile.write_text(json.dumps(generated, default=lambda a: a.tolist()))
    report = tmp_path / "r.html"
    result = CliRunner().invoke(cli, [str(profile), "--mode", "inference", "--solve", "--num-ipus", "2",
                                      "--report", str(report)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    page = report.read_text()
    assert "Coverage" in page and "the model accounts for" in page and "Other categories" in page


def test_workbook_with_the_sixth_column_evaluates_to_popliner_figures(tmp_path: Path) -> None:
    """Every formula of the review workbook, moved columns included, computed by the independent engine."""
    from popliner.writers import xlsx
    from popliner.writers.formula import column_letter
    from tests.test_spreadsheets import assert_no_errors, engine_values, same

    doc = generate_document(preset_spec("bert-tiny", "inference", layers=1, compiler_categories=True))
    analysis = analyse_document(doc)
    breakdown = build_breakdown(analysis, planner_ipus=2)
    path = tmp_path / "review.xlsx"
    xlsx.write_workbook(breakdown, path, force=False, budget_bytes=638_976)
    engine = engine_values(path)
    assert_no_errors(engine)
    grids, _ = xlsx.workbook_grids(breakdown, budget_bytes=638_976)
    values = evaluate_book(grids)
    for grid in grids:
        for r, row in enumerate(values[grid.name], start=1):
            for c, mine in enumerate(row, start=1):
                theirs = engine.get((grid.name.upper(), f"{column_letter(c)}{r}"))
                if mine not in (None, ""):
                    assert same(mine, theirs), f"{grid.name}!{column_letter(c)}{r}: {mine!r} vs {theirs!r}"
    # The whole-model row's Total is its six components: the model's own total.
    layers = values["Layers"]
    whole = next(row for row in layers if row[0] == "Whole model on one IPU")
    assert whole[8] == breakdown.whole.memory.total == sum(whole[2:8])  # type: ignore[union-attr]


def test_a_category_of_variables_is_not_counted_twice() -> None:
    from popliner.memory.categories import other_categories

    vec = np.zeros(4, np.int64)
    truth = {"category.vertexCode": vec, "category.stack": vec, "category.Variables": vec,
             "category.alwaysLiveVariables": vec, "alwaysLive": vec}
    assert other_categories(truth) == ("stack",)
