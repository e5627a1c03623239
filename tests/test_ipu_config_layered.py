"""``--ipu-config-out`` when every operation has a layer (issue 39, point 8), and its refusal before any output.

A profile whose naming rule gives every operation a layer leaves nothing for
a head placement to group: IPU 0 holds its layers only, which
optimum-graphcore builds whatever the placement is called. Where it cannot
build the split, the refusal comes before the split JSON is printed.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from popliner.cli import cli
from tests.helpers import chain_document

REGEX = r"layer(\d+)"


def _profile(tmp_path: Path, names: tuple[str, ...]) -> Path:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(chain_document([{"name": n} for n in names])))
    return path


def _run(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout


LAYERED = ("layer0/MatMul", "layer0/Add", "layer1/MatMul", "layer1/Add", "layer2/MatMul")


def test_solve_writes_the_ipu_config_when_every_operation_has_a_layer(tmp_path: Path) -> None:
    profile = _profile(tmp_path, LAYERED)
    for placement in ("first", "last"):
        out = tmp_path / f"{placement}.json"
        flags = ("--head-placement", placement) if placement == "last" else ()
        code, _ = _run(profile, "--layer-name-regex", REGEX, "--solve", "--num-ipus", 2, *flags,
                       "--ipu-config-out", out, "--no-cache")
        assert code == 0
        # Three layers over two IPUs: optimum's layers_per_ipu counts them all (the model has no groups).
        assert sum(json.loads(out.read_text())["inference_layers_per_ipu"]) == 3


def test_plan_writes_the_ipu_config_when_every_operation_has_a_layer(tmp_path: Path) -> None:
    profile = _profile(tmp_path, LAYERED)
    out = tmp_path / "ipu.json"
    code, _ = _run("plan", profile, "--layer-name-regex", REGEX, "--ipus", 2, "--ipu-config-out", out, "--no-cache")
    assert code == 0 and out.is_file()


def test_a_split_optimum_cannot_build_is_refused_before_the_json(tmp_path: Path) -> None:
    # Operations without a layer, planned for PopART (head placement first: they stay on IPU 0).
    profile = _profile(tmp_path, ("embed/Gather", "layer0/MatMul", "layer1/MatMul", "layer2/MatMul", "head/Softmax"))
    out = tmp_path / "ipu.json"
    code, stdout = _run(profile, "--layer-name-regex", REGEX, "--framework", "popart", "--solve", "--num-ipus", 2,
                        "--ipu-config-out", out, "--no-cache")
    assert code == 2 and stdout == "" and not out.exists()
