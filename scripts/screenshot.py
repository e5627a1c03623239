"""Screenshot an HTML report in headless Chromium, as a reader's browser shows it (docs/images/report.png).

    python scripts/screenshot.py report.html report.png

The page is drawn at 1280 pixels wide, full length, once its charts have all drawn (the report marks its
body ``data-rendered="yes"``). It uses the tests' DevTools driver (tests/browser.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.browser import load_page  # noqa: E402


def main(page: str, image: str) -> None:
    load = load_page(Path(page), {}, ready="document.body && document.body.dataset.rendered === 'yes'",
                     width=1280, height=900, full_page=True)
    if load.errors:
        raise SystemExit(f"{page}: the browser reported {load.errors}")
    Path(image).write_bytes(load.screenshot)


if __name__ == "__main__":
    main(*sys.argv[1:])
