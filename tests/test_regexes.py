"""The project's own patterns run on Python's ``re``, users' on the bounded ``regex`` engine: the same matches."""

from __future__ import annotations

import re

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from popliner.analysis import DEFAULT_BACKWARD_REGEX, analyse_profile
from popliner.ops.layers import DEFAULT_INPUTS_REGEX_LAYER_0, DEFAULT_LAYER_NAME_REGEX, LAYER_PRESETS
from popliner.ops.roles import DEFAULT_UPDATE_REGEX
from popliner.profile import load_profile
from popliner.regexes import BoundedRegex, compile_bounded
from tests.helpers import FIXTURES

BUILTIN = sorted({DEFAULT_BACKWARD_REGEX, DEFAULT_INPUTS_REGEX_LAYER_0, DEFAULT_LAYER_NAME_REGEX, DEFAULT_UPDATE_REGEX,
                  *(p.regex for p in LAYER_PRESETS)})


def _texts() -> list[str]:
    """Every operation name and joined inputs (both joins) of every fixture, and a sample of variable names."""
    out: list[str] = []
    for path in sorted(FIXTURES.glob("*.json*")):
        profile = load_profile(path)
        ops = analyse_profile(profile).ops
        out += list(ops.names)
        for inputs in ops.inputs:
            joined = "/".join(inputs)
            out += [joined, joined.replace(".", "/")]
        v = profile.variables
        out += [v.name(i).decode("utf-8", "replace") if isinstance(v.name(i), bytes) else str(v.name(i))
                for i in range(0, v.count, max(v.count // 500, 1))]
    return out


def _same(pattern: str, text: str) -> None:
    a, b = re.compile(pattern).search(text), regex.compile(pattern, regex.VERSION0).search(text)
    assert (a is None) == (b is None), (pattern, text)
    if a is not None and b is not None:
        assert (a.span(), a.groups()) == (b.span(), b.groups()), (pattern, text)


@pytest.mark.parametrize("pattern", BUILTIN)
def test_builtin_patterns_match_alike_on_every_fixture_name(pattern: str) -> None:
    texts = _texts()
    assert len(texts) > 1000
    for text in texts:
        _same(pattern, text)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(BUILTIN), st.text(alphabet=st.sampled_from(list("LlayerhbocknsgdAEW_./:0123456789 ÉéŁ")),
                                         max_size=60))
def test_builtin_patterns_match_alike_on_random_names(pattern: str, text: str) -> None:
    _same(pattern, text)


def test_only_the_options_own_default_runs_unbounded() -> None:
    assert isinstance(compile_bounded(DEFAULT_BACKWARD_REGEX, "--backward-regex", DEFAULT_BACKWARD_REGEX), re.Pattern)
    assert isinstance(compile_bounded(DEFAULT_BACKWARD_REGEX, "--backward-regex"), BoundedRegex)
    # Another option's default given by a user is a user's pattern: bounded.
    assert isinstance(compile_bounded(DEFAULT_UPDATE_REGEX, "--backward-regex", DEFAULT_BACKWARD_REGEX), BoundedRegex)
