"""Shared test set-up: an isolated cache folder, and the package logger reset around each test."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


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
