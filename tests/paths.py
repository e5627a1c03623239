"""Where the bundled fixtures are: standard library only, so that tests/client (run in optimum-graphcore's own
virtual environment, without popliner's dependencies) can import it as well as the main suite."""

from __future__ import annotations

from pathlib import Path

#: The bundled profiles (fixtures/profiles in the checkout).
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profiles"
