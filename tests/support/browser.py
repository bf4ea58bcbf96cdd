"""Headless Chromium for the browser tests: Debian's /usr/bin/chromium driven over the
DevTools protocol on a pipe (no network, no driver download), and the checks every page gets:
rendered, every <img> loaded, no console errors, a screenshot that is not blank."""

from __future__ import annotations

import base64
import io
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe"]



class DevTools:
    """Chrome DevTools protocol over --remote-debugging-pipe: JSON messages ended by NUL,
    commands on the child's fd 3, replies and events on its fd 4."""

    def __init__(self, profile: Path) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # runs in the child before exec
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=wire_fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_child], [], [], max(0, deadline - time.time()))
            if not ready:
                raise TimeoutError("no message from chromium in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, timeout: float = 30,
             **params: Any) -> dict[str, Any]:
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            command["sessionId"] = session
        os.write(self._to_child, json.dumps(command).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.time() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._read_message(deadline))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    devtools = DevTools(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield devtools
    finally:
        devtools.close()


def open_page(devtools: DevTools, path: Path) -> dict[str, Any]:
    """Load `path` in a fresh tab; return its images, console errors and a screenshot."""
    target = devtools.call("Target.createTarget", url="about:blank")["targetId"]
    session = devtools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log"):
        devtools.call(f"{domain}.enable", session)
    devtools.call("Emulation.setDeviceMetricsOverride", session, width=1200, height=1600,
                  deviceScaleFactor=1, mobile=False)
    devtools.events.clear()
    devtools.call("Page.navigate", session, url=path.as_uri())
    devtools.wait_event("Page.loadEventFired")
    images = devtools.call("Runtime.evaluate", session, returnByValue=True, expression=(
        "Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, "
        "i.naturalWidth])"))["result"]["value"]
    title = devtools.call("Runtime.evaluate", session, returnByValue=True,
                          expression="document.title")["result"]["value"]
    shot = devtools.call("Page.captureScreenshot", session, format="png")["data"]
    errors = [e for e in devtools.events if e.get("sessionId") == session and _is_error(e)]
    devtools.call("Target.closeTarget", targetId=target)
    return {"images": images, "errors": errors, "title": title,
            "screenshot": imread(io.BytesIO(base64.b64decode(shot)), format="png")}


def planted_scripts_run(devtools: DevTools, path: Path) -> tuple[list[str], str]:
    """Load `path` in a fresh tab in which planted payloads report themselves by pushing onto
    `window.__xss`; (what was pushed, the page's text)."""
    target = devtools.call("Target.createTarget", url="about:blank")["targetId"]
    session = devtools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    devtools.call("Page.enable", session)
    devtools.call("Page.addScriptToEvaluateOnNewDocument", session, source="window.__xss = [];")
    devtools.call("Page.navigate", session, url=path.as_uri())
    devtools.wait_event("Page.loadEventFired")
    values = []
    for expression in ("window.__xss", "document.body.innerText"):
        values.append(devtools.call("Runtime.evaluate", session, returnByValue=True,
                                    expression=expression)["result"]["value"])
    devtools.call("Target.closeTarget", targetId=target)
    return values[0], values[1]


def xss_payload(tag: str) -> str:
    """Markup that pushes `tag` onto window.__xss if it ever runs: an <img> whose load fails,
    a <script> after a closed one, an <svg onload>; and the placeholders and template syntax a
    page built by substitution might expand."""
    return (f"<img src=x onerror=window.__xss.push('{tag}')>"
            f"</script><script>window.__xss.push('{tag}-s')</script>"
            f"<svg onload=window.__xss.push('{tag}-v')>@DATA@@SCRIPT@{{{{7*7}}}}")


def _is_error(event: dict[str, Any]) -> bool:
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        return True
    if method == "Runtime.consoleAPICalled":
        return params.get("type") in ("error", "assert")
    if method == "Log.entryAdded":
        return params.get("entry", {}).get("level") == "error"
    return False


def _check_page(page: dict[str, Any], min_images: int) -> None:
    assert page["errors"] == []
    assert len(page["images"]) >= min_images
    for src, complete, width in page["images"]:
        assert complete and width > 0, f"image {src} did not load"
    rgb = (page["screenshot"][..., :3].reshape(-1, 3) * 255).astype(np.uint32)
    assert rgb.std() > 10, "the screenshot is blank"
    colors = np.unique((rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2])
    assert len(colors) > 50, "the screenshot is nearly blank"


def needs_chromium() -> pytest.MarkDecorator:
    """The skip mark of every browser test module: Chromium comes from the Makefile's APT_PKGS."""
    return pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                              reason="chromium is not installed (APT_PKGS in the Makefile)")
