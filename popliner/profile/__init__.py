"""Profile loading: format v1 documents into a :class:`Profile` of numpy arrays."""

from popliner.profile.loader import load_profile
from popliner.profile.model import Profile, Target

__all__ = ["Profile", "Target", "load_profile"]
