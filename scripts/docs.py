"""Regenerate, or check, every command output, --help text and image shown in README.md and docs/.

    python scripts/docs.py            # run every example again and rewrite the pages and images
    python scripts/docs.py --check    # exit 1, with a diff, when a page or an image would change

The pages hold their examples as cog blocks (cogapp, https://nedbatchelder.com/code/cog): the
commands are written once, in the block's Python, and what they print is below it, between the
markers. ``scripts/docgen.py`` runs them, each example in a fresh directory. The images in
docs/images are written by the commands in ``IMAGES`` below, in a fresh directory too; --check
compares their bytes (matplotlib writes the same PNG for the same figures), except the report's
screenshot, taken by headless Chromium, whose figures the page's ``popliner check`` block holds.

Pages are independent, so they run in parallel (``--jobs``).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docgen import ROOT, completed, fresh_directory, run  # noqa: E402

IMAGES_DIR = ROOT / "docs" / "images"
BERT = "fixtures/profiles/bert-base-training.json.gz"


@dataclass(frozen=True)
class Image:
    """Commands run in a fresh directory, and which of the files they write go where in docs/images."""

    commands: tuple[str, ...]
    files: tuple[tuple[str, str], ...]  # (written file, name in docs/images)
    compare: bool = True  # byte for byte in --check (False: a browser screenshot; its figures are on the page)


def _split_images(ipus: int, tiles_name: str, *, layers: bool = False) -> Image:
    files = [("layers-tiles.png", tiles_name), ("gantt.png", f"gantt-{ipus}-ipus.png")]
    if layers:
        files += [("layers.png", "bert-base-training-layers.png"), ("layers-split.png", "bert-base-training-split.png")]
    return Image((f"popliner {BERT} --solve --num-ipus {ipus} --exact-ipus --plot layers.png --config-out p.yaml"
                  f" --recompute every-layer --optimizer-state off-chip > /dev/null",
                  f"popliner simulate p.yaml --profile {BERT} --plot gantt.png > /dev/null"),
                 tuple(files))


IMAGES: tuple[Image, ...] = (
    _split_images(4, "tiles-4-ipus.png", layers=True),
    _split_images(2, "tiles-2-ipus.png"),
    _split_images(8, "tiles-8-ipus.png"),
    _split_images(12, "tiles-12-ipus.png"),
    Image((f"popliner {BERT} --solve --num-ipus 4 --report report.html > /dev/null",
           f"python {ROOT / 'scripts' / 'screenshot.py'} report.html report.png"),
          (("report.png", "report.png"),), compare=False),
)


def pages() -> list[Path]:
    """Every page with a cog block."""
    candidates = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in candidates if "[[[cog" in p.read_text(encoding="utf-8")]


def _cog(page: Path, check: bool) -> tuple[Path, bool, str, float]:
    start = time.monotonic()
    mode = ["--check", "--diff", "--check-fail-msg=run: python scripts/docs.py"] if check else ["-r"]
    done = completed([sys.executable, "-m", "cogapp", "-P", "-I", str(ROOT / "scripts"), *mode, str(page)], ROOT,
                     subprocess.PIPE, timeout=None)
    return page, done.returncode == 0, (done.stdout + done.stderr).decode(errors="replace"), time.monotonic() - start


def _image(image: Image, check: bool) -> tuple[str, bool, str, float]:
    start = time.monotonic()
    problems: list[str] = []
    with fresh_directory() as where:
        for command in image.commands:
            run(command, where)
        for written, name in image.files:
            target = IMAGES_DIR / name
            if not check:
                shutil.copyfile(where / written, target)
            elif image.compare and not (target.is_file() and filecmp.cmp(where / written, target, shallow=False)):
                problems.append(f"docs/images/{name} differs from what its commands draw now: "
                                + "; ".join(f"`{c}`" for c in image.commands))
    names = ", ".join(name for _, name in image.files)
    return names, not problems, "\n".join(problems), time.monotonic() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page or image differs")
    parser.add_argument("--jobs", type=int, default=4, help="pages and images generated at once (default 4)")
    parser.add_argument("--no-images", action="store_true", help="the pages only")
    parser.add_argument("--no-pages", action="store_true", help="the images only")
    parser.add_argument("page", nargs="*", type=Path, help="only these pages (default: every page)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    todo = [] if args.no_pages else [p.resolve() for p in args.page] or pages()
    failed = False
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        # In --check an image that is not compared (the browser screenshot) is not drawn either.
        wanted = [i for i in IMAGES if i.compare or not args.check]
        images = [] if args.no_images or args.page else [pool.submit(_image, i, args.check) for i in wanted]
        for page, ok, text, seconds in pool.map(lambda p: _cog(p, args.check), todo):
            name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            print(f"{'ok' if ok else 'DIFFERS' if args.check else 'FAILED'}  {name}  ({seconds:.0f} s)", flush=True)
            if not ok:
                failed = True
                print(text, file=sys.stderr)
        for future in images:
            names, ok, text, seconds = future.result()
            print(f"{'ok' if ok else 'DIFFERS'}  docs/images: {names}  ({seconds:.0f} s)", flush=True)
            if not ok:
                failed = True
                print(text, file=sys.stderr)
    verb = "checked" if args.check else "regenerated"
    print(f"docs: {verb} {len(todo)} pages{'' if args.no_images or args.page else f' and {len(images)} image sets'}"
          f" in {time.monotonic() - start:.0f} s" + ("; run `python scripts/docs.py` and commit" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
