"""Size and first-render time of the HTML report's split planner, and its screenshot (docs/report.md).

    python scripts/report_planner_figures.py PIPELINE.yaml PROFILE [--runs 3] [--screenshot docs/images/planner.png]

Writes the report with ``popliner report`` in a fresh process (timed), then opens it ``--runs`` times in
headless Chromium (tests/browser.py) and prints, as one JSON line: the page's bytes, the planner data's
bytes and record count, the seconds from navigation until the planner is drawn and until every plotly chart
is drawn (polled every 0.1 s), the planner's own first draw in the page (parse + draw, ms), and the mean
time of ``poplinerPlanner.setSplit`` over 50 random splits (ms). Medians over the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.browser import Driver, load_page  # noqa: E402

PLANNER_READY = "document.getElementById('planner') && document.getElementById('planner').dataset.ready === 'yes'"
ALL_READY = f"document.body && document.body.dataset.rendered === 'yes' && {PLANNER_READY}"

RANDOM_SPLITS = """(() => {
  const P = window.poplinerPlanner, n = P.layers.length, k = P.numIpus;
  let seed = 7;
  const rand = m => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % m; };
  const splits = [];
  for (let t = 0; t < 50; t++) {
    const cuts = new Set();
    while (cuts.size < k - 1) { cuts.add(1 + rand(n - 1)); }
    const c = [0, ...Array.from(cuts).sort((a, b) => a - b), n];
    splits.push(c.slice(1).map((x, i) => x - c[i]));
  }
  const t0 = performance.now();
  splits.forEach(s => P.setSplit(s));
  return (performance.now() - t0) / splits.length;
})()"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("profile")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--screenshot", type=Path, default=None)
    parser.add_argument("--budget", default=None, help="passed to popliner report --budget")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="planner-figures-") as tmp:
        page = Path(tmp) / "report.html"
        command = [sys.executable, "-m", "popliner", "-q", "report", args.config, "--profile", args.profile,
                   "-o", str(page), *(["--budget", args.budget] if args.budget else [])]
        started = time.monotonic()
        subprocess.run(command, check=True, cwd=REPO)
        write_seconds = time.monotonic() - started
        text = page.read_text(encoding="utf-8")
        start = text.index('id="popliner-planner">') + len('id="popliner-planner">')
        data = text[start:text.index("</script>", start)]
        planner = json.loads(data)
        runs: list[dict[str, Any]] = []
        for _ in range(args.runs):
            first = load_page(page, {"render_ms": "window.poplinerPlanner.renderMs"}, ready=PLANNER_READY)
            full = load_page(page, {"set_split_ms": RANDOM_SPLITS}, ready=ALL_READY)
            if first.errors or full.errors:
                raise SystemExit(f"errors in the page: {first.errors + full.errors}")
            runs.append({"planner_s": first.seconds_to_render, "page_s": full.seconds_to_render,
                         "render_ms": first.values["render_ms"], "set_split_ms": full.values["set_split_ms"]})
        if args.screenshot is not None:
            shot = load_page(page, {}, ready=ALL_READY, height=1180, interact=_show_planner)
            args.screenshot.write_bytes(shot.screenshot)
    print(json.dumps({
        "layers": len(planner["layers"]), "ipus": planner["numIpus"], "records": len(planner["rows"]),
        "page_bytes": len(text.encode("utf-8")), "planner_json_bytes": len(data.encode("utf-8")),
        "popliner_report_s": round(write_seconds, 2),
        **{key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]},
    }))


def _show_planner(driver: Driver) -> dict[str, Any]:
    """Scroll the planner section to the top and move the first boundary one layer right, as a user would."""
    driver.evaluate("document.getElementById('planner').closest('section').scrollIntoView()")
    driver.evaluate("document.querySelector('.planner-handle').focus()")
    driver.press("ArrowRight")
    driver.evaluate("document.getElementById('planner').closest('section').scrollIntoView()")
    driver.evaluate("window.scrollBy(0, -document.querySelector('nav').offsetHeight - 8)")  # the sticky nav
    return {}


if __name__ == "__main__":
    main()
