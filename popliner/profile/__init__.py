"""Profile loading: format v1 documents into a :class:`Profile` of numpy arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from popliner.profile.model import Profile, Target

__all__ = ["Profile", "Target", "load_profile"]

if TYPE_CHECKING:
    from popliner.profile.loader import load_profile


def __getattr__(name: str) -> Any:
    # The document reader is imported on first use: a cached load never needs it.
    if name == "load_profile":
        from popliner.profile.loader import load_profile

        return load_profile
    raise AttributeError(f"module 'popliner.profile' has no attribute {name!r}")
