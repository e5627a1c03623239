"""Synthetic format-v1 profiles: BERT/GPT/ResNet-like models, inference or training.

Deterministic (same spec, same bytes), fast (numpy columns, orjson) and
physically plausible for a Mk2 IPU. See ``docs/synthetic-profiles.md``.

>>> from popliner.synth import preset_spec, generate_document
>>> doc = generate_document(preset_spec("bert-tiny", "training", scale=0.25))
>>> doc["format"], doc["target"]["tilesPerIpu"]
('popliner-profile', 32)
"""

from popliner.synth.document import SynthSummary, generate_document, write_profile
from popliner.synth.spec import PRESETS, SynthSpec, preset_mode, preset_names, preset_spec

__all__ = ["PRESETS", "SynthSpec", "SynthSummary", "generate_document", "preset_mode", "preset_names", "preset_spec",
           "write_profile"]
