"""Issue 20's check: published models fit on Graphcore's IPU counts with nothing but ``--num-ipus``.

Each model is generated as PopTorch names it and as Graphcore's published
configuration compiles it: a recomputation checkpoint after every layer and
the optimizer state off chip (``recompute_checkpoint_every_layer`` and
``optimizer_state_offchip`` in the Graphcore IPU configs on the Hugging Face
hub); GPT-2 medium also with replicated tensor sharding over 2 replicas (the
POD16 run script of Graphcore's GPT-2 example). Then ``popliner PROFILE
--solve --num-ipus N --config-out DIR/pipeline.yaml`` runs as a user would, and
one markdown row per model gives the framework found, the defaults applied,
the split and the worst tile of each IPU.

The configs land in ``--work``/plans/; ``POPLINER_CLIENT_PLANS=that folder``
makes tests/client/test_defaults_client.py check each with the real
optimum-graphcore and the emitted PopTorch snippet.

    python scripts/framework_fits.py [--work DIR]

Several minutes per model on a busy 2-core machine. Exit 0 when all fit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

COMMON = ("--mode", "training", "--framework", "poptorch", "--optimizer-state", "off-chip",
          "--checkpoint-every-layer")
#: (name, synth options, IPUs Graphcore ran it on)
MODELS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("bert-base-mlm", ("--preset", "bert-base", "--head", "mlm"), 4),
    ("bert-large-mlm", ("--preset", "bert-large", "--head", "mlm"), 4),
    ("gpt2-small", ("--preset", "gpt2-small"), 4),
    ("gpt2-medium", ("--preset", "gpt2-small", "--layers", "24", "--hidden", "1024", "--replication-factor", "2",
                     "--sharded-optimizer-state"), 8),
    ("bert-large-squad384", ("--preset", "bert-large", "--seq", "384", "--batch", "2"), 8),
    ("bert-large-squad384", ("--preset", "bert-large", "--seq", "384", "--batch", "2"), 4),
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["popliner", *args], capture_output=True, text=True, check=False)


def _row(name: str, ipus: int, work: Path) -> tuple[str, bool]:
    profile = work / f"{name}.json.gz"
    if not profile.is_file():
        made = _run("synth", *dict((m[0], m[1]) for m in MODELS)[name], *COMMON, "-o", str(profile))
        if made.returncode:
            return f"| {name} | {ipus} | synth failed: {made.stderr.strip()[-200:]} |", False
    out = work / "plans" / f"{name}-{ipus}"
    out.mkdir(parents=True, exist_ok=True)
    solved = _run(str(profile), "--solve", "--num-ipus", str(ipus), "--config-out", str(out / "pipeline.yaml"), "-f")
    (out / "stderr").write_text(solved.stderr)
    if solved.returncode not in (0, 1, 3):
        return f"| {name} | {ipus} | exit {solved.returncode}: {solved.stderr.strip()[-200:]} |", False
    doc = json.loads(solved.stdout)
    training = doc.get("training", {})
    split = " / ".join(f"{s['first_layer']}..{s['last_layer']}" for s in doc["stages"])
    worst = " / ".join(f"{s['worst_tile_bytes']:,}" for s in doc["stages"])
    fits = doc["status"] != "INFEASIBLE" and all(s["fits"] for s in doc["stages"])
    return (f"| {name} | {ipus} | {doc['framework']['name']} ({doc['framework']['from']}) | "
            f"{training.get('recompute')}, head {training.get('head_placement')} | "
            f"{'fits' if fits else 'does NOT fit'} on {doc['num_ipus_used']} | {split} | {worst} |"), fits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="framework-fits", help="where profiles and plans go (default %(default)s/)")
    work = Path(ap.parse_args(argv).work)
    work.mkdir(parents=True, exist_ok=True)
    print("| model | IPUs | framework | defaults applied | result | split | worst tile per IPU (bytes) |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    for name, _, ipus in MODELS:
        row, fits = _row(name, ipus, work)
        print(row, flush=True)
        ok &= fits
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
