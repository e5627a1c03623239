"""Long cases in two sizes: a smaller one in the main suite, the full one in the slow step (CI runs both)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings


def examples(main: int, full: int) -> list[Any]:
    """Parameters for a Hypothesis property's number of examples: ``main`` in the main suite, ``full`` in the
    slow step (``pytest -m slow``). The test builds its ``@given`` function inside, with that many examples."""
    assert 0 < main < full
    return [pytest.param(main, id=f"{main}-examples"),
            pytest.param(full, id=f"{full}-examples", marks=pytest.mark.slow)]


def sized(count: int) -> Any:
    """The settings of a two-size property (:func:`examples`): ``count`` examples, no deadline (the machine is
    shared), and no complaint about slow data generation."""
    return settings(max_examples=count, deadline=None, suppress_health_check=[HealthCheck.too_slow])
