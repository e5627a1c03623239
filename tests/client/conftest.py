"""The real-client tests: poptorch and popart as recording stand-ins (they need IPU hardware), no hub access."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

STANDINS = Path(__file__).resolve().parent / "standins"


@pytest.fixture(scope="session", autouse=True)
def standins() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    if str(STANDINS) not in sys.path:
        sys.path.insert(0, str(STANDINS))
