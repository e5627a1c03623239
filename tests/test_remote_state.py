"""Optimizer state counts as off chip only when a remote buffer carries it (issue 39, point 12).

One backward operation of type ``RemoteLoad`` used to make every config say
``optimizer_state: off-chip`` while every figure was on chip. The rule now
needs a remote operation of the update that moves a tensor PopART names as
optimizer state (its reserved prefixes, willow/src/tensornames.cpp).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.synth import SynthSpec, generate_document
from popliner.training_record import training_of


def _spec(optimizer: str, state: str) -> SynthSpec:
    return SynthSpec(kind="encoder", mode="training", layers=2, hidden=64, seq=16, batch=2, vocab=64, tiles=8,
                     scale=0.5, optimizer=optimizer, optimizer_state=state)


def _state_of(doc: dict[str, Any], tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    analysis = load_analysis(str(path), AnalysisOptions(), use_cache=False)
    record = training_of(analysis)
    assert record is not None
    return record.optimizer_state


def _backward_contexts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc["debugContexts"]
            if (c.get("data") or {}).get("opType") and "Grad" in (c.get("data") or {}).get("opName", "")]


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_off_chip_state_is_found_from_the_tensors_it_moves(tmp_path, optimizer):
    doc = generate_document(_spec(optimizer, "off-chip"))
    assert _state_of(doc, tmp_path, "off.json") == "off-chip"


@pytest.mark.parametrize("spoof", ["RemoteLoad", "RemoteStore", "RemoteLoadInplace"])
def test_one_backward_remote_op_is_not_proof(tmp_path, spoof):
    doc = generate_document(_spec("adam", "on-chip"))
    assert _state_of(doc, tmp_path, "on.json") == "on-chip"
    spoofed = copy.deepcopy(doc)
    victim = _backward_contexts(spoofed)[0]
    victim["data"]["opType"] = spoof  # a gradient op, now typed as a remote copy; its tensors are not state
    assert _state_of(spoofed, tmp_path, "spoofed.json") == "on-chip"


def test_a_remote_op_that_moves_state_is_proof(tmp_path):
    doc = generate_document(_spec("adam", "on-chip"))
    victim = copy.deepcopy(doc)
    ctx = _backward_contexts(victim)[0]
    ctx["data"]["opType"] = "RemoteStore"
    ctx["data"]["inputs"] = ["Accl1___some/weight"]
    assert _state_of(victim, tmp_path, "state.json") == "off-chip"
