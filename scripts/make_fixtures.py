#!/usr/bin/env python3
"""Regenerate the synthetic profiles in fixtures/profiles/ (deterministically).

    python scripts/make_fixtures.py            # rewrite every fixture
    python scripts/make_fixtures.py --check    # exit 1 if a committed fixture differs

``fixtures/profiles/tiny.json`` is written by hand and is not touched.
The specs below are the single source of truth; README.md in the same
folder describes each fixture.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from popliner.synth import SynthSpec, preset_spec, write_profile  # noqa: E402 (after the path set-up)
from popliner.synth.spec import UNCALIBRATED  # noqa: E402

OUT = ROOT / "fixtures" / "profiles"


def fixtures() -> dict[str, SynthSpec]:
    """File name -> spec. Sizes are chosen so that each profile stays well under 1 MB.

    The fixtures made from calibrated presets keep the catalog's own amounts
    (``UNCALIBRATED``): tests and goldens were written against them.
    """
    return {
        # 3 layers on 32 tiles, plain JSON so it can be read with a JSON viewer.
        "bert-tiny-inference.json": preset_spec("bert-tiny", "inference", layers=3, scale=0.5),
        "bert-tiny-training.json": preset_spec("bert-tiny", "training", layers=3, scale=0.5),
        # BERT-base structure (12 layers), narrowed so that it splits over four 128-tile IPUs
        # with its activation stashes (SGD, micro-batch 1).
        "bert-base-training.json.gz": preset_spec("bert-base", "training", hidden=256, vocab=8192, batch=1,
                                                  tiles=128, scale=0.25, optimizer="sgd", **UNCALIBRATED),
        # Full GPT-2 small widths (tied 50257-word embedding) on 384 tiles, sequence 256.
        "gpt2-small-inference.json.gz": preset_spec("gpt2-small", "inference", tiles=384, seq=256, scale=0.5,
                                                    **UNCALIBRATED),
        "resnet-small-training.json.gz": preset_spec("resnet-small", "training", scale=0.5),
        # EfficientNet-EdgeTPU-L's six stages in 12 blocks on 64 tiles, TensorFlow names, and the compiler's other
        # tileMemory categories (the only fixture with them, so the one whose figures carry "Other categories").
        # Pinned to the preset as it was when the fixture was made: blocks of the first approximation, exchange
        # code per kind of operation, no shape cache, no fitted planner choices (docs/synthetic-profiles.md,
        # "Three more real models").
        "efficientnet-small-inference.json.gz": preset_spec("efficientnet-edgetpu-l", "inference", layers=12,
                                                            tiles=64, seq=144, batch=6, scale=0.5,
                                                            edgetpu_builder=False, exchange_by_size=False,
                                                            exchange_code_factor=1.0, shape_cache=False,
                                                            planner_inputs=False),
    }


def render(spec: SynthSpec, name: str) -> bytes:
    buf = io.BytesIO()
    write_profile(spec, buf, compress=name.endswith(".gz"))
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name, spec in fixtures().items():
        data = render(spec, name)
        path = OUT / name
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(name)
            continue
        with open(path, "wb") as f:  # plain write: the fixtures folder is ours, and git keeps the old copy
            f.write(data)
        print(f"{name}: {len(data) / 1e3:.0f} kB", file=sys.stderr)
    if stale:
        print("out of date: " + ", ".join(stale) + "; run scripts/make_fixtures.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
