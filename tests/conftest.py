"""Shared test set-up: the Hypothesis profile, an isolated cache folder, the package logger reset per test."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# CI draws the same examples on every run (HYPOTHESIS_PROFILE=ci, set by .ci/run): a submission passes or fails there
# as it did on the machine that ran its suite, whatever the seed. Elsewhere each run draws new examples.
# The real-client step's environment (tests/client, .ci/client-requirements.txt) has no Hypothesis.
try:
    from hypothesis import settings
except ImportError:  # pragma: no cover - the client step only
    pass
else:
    settings.register_profile("ci", derandomize=True, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests must never read a cache written by another run or pollute the user's.
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path_factory.mktemp("popliner-cache")))


@pytest.fixture(autouse=True)
def _pristine_logger() -> Iterator[None]:
    # The CLI configures the "popliner" logger (own handler, no propagation),
    # also from module-scoped fixtures; reset it around every test so that
    # caplog always sees the package's records.
    _reset_logger()
    yield
    _reset_logger()


def _reset_logger() -> None:
    logger = logging.getLogger("popliner")
    logger.handlers.clear()
    logger.setLevel(logging.NOTSET)
    logger.propagate = True


# The exporter's tests (test_export*.py) share these two.
@pytest.fixture
def small_doc() -> dict[str, Any]:
    """The small profile document the libpva double is built from (tests/data/export_small.json)."""
    path = Path(__file__).parent / "data" / "export_small.json"
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    """Placeholder profile.pop/debug.cbor: the double ignores their contents."""
    pop, cbor = tmp_path / "profile.pop", tmp_path / "debug.cbor"
    pop.write_bytes(b"SQLite format 3\x00")
    cbor.write_bytes(b"\xa0")
    return pop, cbor
