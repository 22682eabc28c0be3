"""A real headless Chromium for tests, driven over the DevTools protocol on a pipe: no driver package.

    with Chromium(tmp_path / "profile", width=1280) as browser:
        browser.open(path.as_uri())
        title = browser.evaluate("document.title")
        browser.screenshot(tmp_path / "page.png")

Chromium started with --remote-debugging-pipe reads JSON commands on fd 3 and answers on fd 4, one
message per NUL-terminated chunk (the protocol Puppeteer and Playwright use).
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from typing import Any

BINARY = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class BrowserError(RuntimeError):
    pass


class Chromium:
    def __init__(self, profile_dir, width: int = 1280, height: int = 900, timeout: float = 60.0):
        if BINARY is None:
            raise BrowserError("no Chromium binary on PATH")
        self.timeout = timeout
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds():   # in the child: our pipe ends become fds 3 and 4 (moved up first: they may be 3 or 4)
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)
        self.proc = subprocess.Popen(
            [BINARY, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={profile_dir}", f"--window-size={width},{height}",
             "about:blank"],
            pass_fds=(3, 4), preexec_fn=wire_fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer, self._next_id, self._events = b"", 0, []
        target = self._send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise BrowserError(f"Chromium did not answer within {self.timeout} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("Chromium closed the pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _send(self, method: str, session: str | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                return answer["result"]
            self._events.append(answer)

    def send(self, method: str, **params) -> dict:
        """A DevTools command to the page."""
        return self._send(method, self._session, **params)

    def _wait_event(self, method: str) -> None:
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    del self._events[: i + 1]
                    return
            self._events.append(self._read())

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self._events.clear()
        self.send("Page.navigate", url=url)
        self._wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))

    def close(self) -> None:
        try:
            self._send("Browser.close")
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
