"""popliner.load(...) and its DataFrames: typed columns, figures worked by hand in fixtures/profiles/tiny.md."""

from __future__ import annotations

import pandas as pd
import pytest

import popliner
from popliner.errors import UsageProblem
from tests.helpers import FIXTURES

TINY = FIXTURES / "tiny.json"
STRING = pd.StringDtype()


@pytest.fixture(scope="module")
def model() -> popliner.frames.Model:
    return popliner.load(str(TINY), use_cache=False)


def test_layers_frame(model) -> None:
    frame = model.layers()
    assert list(frame["layer"]) == ["0", "1"] and frame["layer"].dtype == STRING
    # tiny.md: layer 0 variables 190, vertex code 180+130+130+130 = 570, worst tile 0 with 402;
    # layer 1 worst tile 2 with 235; cycles 530 and 860.
    assert frame.loc[0, ["variables", "vertex_code", "worst_tile", "worst_tile_bytes"]].tolist() == [190, 570, 0, 402]
    assert frame.loc[1, ["worst_tile", "worst_tile_bytes"]].tolist() == [2, 235]
    assert frame["cycles"].tolist() == [530, 860]
    assert frame["operations"].tolist() == [3, 3]
    numeric = frame.drop(columns="layer")
    assert all(dtype == "int64" for dtype in numeric.dtypes)
    assert (frame["total"] == frame[["variables", "vertex_code", "vertex_state", "exchange_code",
                                     "control_code"]].sum(axis=1)).all()


def test_operations_frame(model) -> None:
    frame = model.operations()
    assert frame["name"].tolist() == ["Tensor/w0", "Gather", "layer0/matmul", "layer0/add", "Call(7)",
                                      "layer1/matmul", "relu", "loss"]
    assert frame["layer"].isna().tolist() == [True, False, False, False, False, False, False, True]
    assert frame["note"].tolist()[:2] == ["tensor", "inputs-layer-0"] and frame["note"].dtype == "category"
    assert frame["name"].dtype == STRING and frame["first_step"].dtype == "int64"
    # tiny.md cycles per step: Gather runs at step 1 (100), layer1/matmul at steps 6 and 8 (400 each).
    assert frame.loc[1, "cycles"] == 100 and frame.loc[5, "cycles"] == 800


def test_totals_frame(model) -> None:
    frame = model.totals().set_index("category")
    assert frame.loc["vertex_code", "title"] == "Vertex code"
    frame = frame[["model_bytes", "profile_bytes"]]
    # tiny.md ground truth: vertex code 630, exchange 96, control 181 (the model finds 177).
    assert frame.loc["vertex_code"].tolist() == [630, 630]
    assert frame.loc["exchange_code"].tolist() == [96, 96]
    assert frame.loc["control_code"].tolist() == [177, 181]
    assert frame["profile_bytes"].dtype == "Int64" and pd.isna(frame.loc["variables", "profile_bytes"])


def test_layer_matrices(model) -> None:
    # Affinity: layer 0 uses 190 bytes, layer 1 uses 20+40+10+25+15 = 110, both use w104 (20) and w106 (10).
    assert model.affinity().values.tolist() == [[190, 30], [30, 110]]
    # Interlayer: 104 (20), 106 (10) and 107 (25) go live in layer 0 and die in layer 1; 102+103 stay in 0,
    # 105+109 in 1.
    inter = model.interlayer()
    assert inter.values.tolist() == [[60, 55], [0, 55]]
    assert list(inter.index) == ["0", "1"] and inter.index.name == "layer"
    assert all(dtype == "int64" for dtype in inter.dtypes)


def test_split_to_frame(model) -> None:
    split = model.solve(num_ipus=2, mem_per_tile=1000, exact_ipus=True)
    frame = split.to_frame()
    # First stage: layer 0 plus the unlayered operations, 422 bytes on tile 0; cycles 530 + 5 + 30.
    # Each IPU also holds ceil(30 / 4) = 8 bytes per tile of copy buffers (30 bytes cross).
    assert frame["worst_tile_bytes"].tolist() == [430, 243]
    assert frame["headroom_bytes"].tolist() == [570, 757]
    assert frame["cycles"].tolist() == [565, 860]
    assert frame["layers"].tolist() == [["0"], ["1"]]
    assert frame["fits"].dtype == bool and frame["first_layer"].dtype == STRING


def test_load_options_and_unknown_ones() -> None:
    custom = popliner.load(str(TINY), use_cache=False, layer_name_regex=r"layer(\d)", mode="training")
    assert custom.mode == "training" and custom.layer_names == ("0", "1")
    with pytest.raises(UsageProblem, match="unknown option"):
        popliner.load(str(TINY), layer_regex="x")
