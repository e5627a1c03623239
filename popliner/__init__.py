"""popliner: split a model too large for one IPU into a pipeline over several IPUs."""

__version__ = "0.1.0"

__all__ = ["__version__"]
