"""A small headless-Chromium driver over the DevTools protocol, for the HTML report's tests.

It starts the system Chromium (Debian's ``chromium`` package) with a fresh
profile directory, talks to the page over the DevTools websocket
(``websocket-client``) and records what a user's browser would show: console
messages, uncaught exceptions, every network request, and a screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM_FLAGS", "Driver", "PageLoad", "chromium_path", "load_page"]

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
)


def chromium_path() -> str | None:
    """$POPLINER_CHROMIUM, else chromium or chromium-browser on PATH, else /usr/bin/chromium."""
    explicit = os.environ.get("POPLINER_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


@dataclass
class PageLoad:
    """What loading a page produced."""

    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    values: dict[str, Any] = field(default_factory=dict)  # results of the expressions asked for
    screenshot: bytes = b""
    seconds_to_render: float = 0.0

    @property
    def errors(self) -> list[str]:
        return [text for level, text in self.console if level in ("error", "assert")] + self.exceptions


class _Session:
    def __init__(self, ws_url: str) -> None:
        import websocket  # websocket-client

        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        # The socket's timeout bounds a silence; this bounds a page that keeps sending events but never the reply.
        deadline = time.monotonic() + 120
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method}: no reply from Chromium in 120 s")
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self.events.append(msg)

    def pump(self, seconds: float) -> None:
        """Collect events for a while."""
        import websocket

        end = time.monotonic() + seconds
        self.ws.settimeout(0.05)
        try:
            while time.monotonic() < end:
                try:
                    self.events.append(json.loads(self.ws.recv()))
                except websocket.WebSocketTimeoutException:
                    pass
        finally:
            self.ws.settimeout(60)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        self.ws.close()


class Driver:
    """What a test does on a loaded page: evaluate script, press keys, drag the mouse (real input events)."""

    #: DOM key name -> (code, Windows virtual key code), for the keys the tests press.
    KEYS = {"ArrowLeft": 37, "ArrowUp": 38, "ArrowRight": 39, "ArrowDown": 40, "Home": 36, "End": 35,
            "PageUp": 33, "PageDown": 34, "Tab": 9}

    def __init__(self, session: _Session) -> None:
        self._session = session

    def evaluate(self, expression: str) -> Any:
        return self._session.evaluate(expression)

    def press(self, key: str, shift: bool = False) -> None:
        """A key press (down and up) at the focused element."""
        code = self.KEYS[key]
        for kind in ("rawKeyDown", "keyUp"):
            self._session.call("Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=code,
                               nativeVirtualKeyCode=code, modifiers=8 if shift else 0)

    def drag(self, start: tuple[float, float], end: tuple[float, float], steps: int = 8) -> None:
        """Press the left button at ``start`` (CSS pixels in the viewport), move to ``end``, release."""
        x0, y0 = start
        x1, y1 = end
        self._session.call("Input.dispatchMouseEvent", type="mouseMoved", x=x0, y=y0)
        self._session.call("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=y0, button="left",
                           buttons=1, clickCount=1)
        for k in range(1, steps + 1):
            x, y = x0 + (x1 - x0) * k / steps, y0 + (y1 - y0) * k / steps
            self._session.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y, button="left", buttons=1)
        self._session.call("Input.dispatchMouseEvent", type="mouseReleased", x=x1, y=y1, button="left",
                           buttons=0, clickCount=1)


@contextmanager
def _browser(chromium: str) -> Iterator[str]:
    """Start Chromium on a free DevTools port; yield the first page's websocket URL."""
    # Chromium's helpers may still be writing to the profile as it closes: clean up leniently.
    with tempfile.TemporaryDirectory(prefix="popliner-chromium-", ignore_cleanup_errors=True) as profile:
        # A session of its own, so the browser and its helper processes end together.
        proc = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             "--window-size=1400,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not port_file.exists() or not port_file.read_text().strip():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{chromium} did not start (exit code {proc.poll()})")
                time.sleep(0.1)
            port = port_file.read_text().split()[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as reply:
                targets = json.load(reply)
            yield next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the browser's process group (only the processes this driver started)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # Let the group's helpers go before the profile folder is removed.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def load_page(path: Path, expressions: dict[str, str], *, ready: str, width: int = 1400, height: int = 900,
              timeout: float = 60.0, full_page: bool = False,
              interact: Callable[[Driver], dict[str, Any]] | None = None) -> PageLoad:
    """Open ``path`` in headless Chromium, wait until ``ready`` is true, evaluate ``expressions``, screenshot.

    ``interact`` gets a :class:`Driver` once the page is ready (before the expressions): it types and
    clicks as a user does (the DevTools protocol's input events) and returns values for ``PageLoad.values``.
    """
    chromium = chromium_path()
    if chromium is None:
        raise FileNotFoundError("no Chromium found (install the Debian package chromium)")
    out = PageLoad()
    with _browser(chromium) as ws_url:
        session = _Session(ws_url)
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                session.call(f"{domain}.enable")
            session.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                         mobile=False)
            start = time.monotonic()
            session.call("Page.navigate", url=path.resolve().as_uri())
            while not session.evaluate(f"Boolean({ready})"):
                if time.monotonic() - start > timeout:
                    raise TimeoutError(f"{path}: not ready after {timeout} s ({ready})")
                session.pump(0.1)
            out.seconds_to_render = time.monotonic() - start
            session.pump(0.3)  # late console messages
            if interact is not None:
                out.values.update(interact(Driver(session)))
            out.values.update({name: session.evaluate(expr) for name, expr in expressions.items()})
            shot: dict[str, Any] = {"format": "png"}
            if full_page:
                size = session.call("Page.getLayoutMetrics")["cssContentSize"]
                shot.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"],
                                                              "height": size["height"], "scale": 1})
            out.screenshot = base64.b64decode(session.call("Page.captureScreenshot", **shot)["data"])
            session.pump(0.1)
        finally:
            session.close()
    for event in session.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            out.console.append((params.get("type", ""), text))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            out.exceptions.append(str(details.get("exception", {}).get("description", details.get("text", ""))))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            out.console.append((entry.get("level", ""), f"{entry.get('source', '')}: {entry.get('text', '')}"))
        elif method == "Network.requestWillBeSent":
            out.requests.append(params.get("request", {}).get("url", ""))
    return out
