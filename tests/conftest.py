"""Shared test set-up: an isolated cache folder, and the package logger restored after each test."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests must never read a cache written by another run or pollute the user's.
    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path_factory.mktemp("popliner-cache")))


@pytest.fixture(autouse=True)
def _restore_logger() -> Iterator[None]:
    # The CLI configures the "popliner" logger (own handler, no propagation);
    # undo that so caplog sees records in later tests.
    logger = logging.getLogger("popliner")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]
