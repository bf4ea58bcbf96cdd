"""The linearizability visualizer, opened from file:// in headless Chromium (driven as in
test_campaign_browser): `harness check --model kv` on a known-invalid Knossos-style history
links a page that draws one track per key, numbers the longest partial linearization, marks
the illegal operation, shows model states on hover, and fetches nothing from the network."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.browser import (
    CHROMIUM,
    DevTools,
    _check_page,
    _is_error,
    planted_scripts_run,
    xss_payload,
)

from checkers.linear import check_file
from checkers.linear.history import pair
from checkers.linear.importers import read_events
from checkers.linear.models import make_model
from checkers.linear.visualize import visualization_data

DATA = Path(__file__).resolve().parents[1] / "data" / "kv"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from harness.cli import main

    tmp = tmp_path_factory.mktemp("viz")
    history = tmp / "knossos-invalid.edn"
    shutil.copy(DATA / "knossos-invalid.edn", history)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["check", str(history), "--model", "kv"]) == 1
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    assert summary["valid"] is False
    return Path(summary["visualization"])


def test_the_visualization_is_linked_and_self_contained(page: Path) -> None:
    text = page.read_text()
    assert page.name == "knossos-invalid.linearizability.html"
    assert "<script src" not in text and "<link" not in text and "url(" not in text
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in text


def test_visualization_data_of_the_failing_key() -> None:
    ops = pair(read_events(DATA / "knossos-invalid.edn"))
    model = make_model("kv")
    verdict = check_file(DATA / "knossos-invalid.edn", "kv")
    data = visualization_data(ops, make_model("kv"), verdict)
    assert [t["key"] for t in data["tracks"]] == ["x", "y"]  # the invalid key first
    x = data["tracks"][0]
    assert x["status"] == "invalid" and x["linearized"] == 3
    [illegal] = [o for o in x["ops"] if o["illegal"]]
    assert illegal["text"] == "process 0: cas 1 -> 2" and illegal["illegal_state"] == 3
    steps = {o["text"]: (o["step"], o["before"], o["after"]) for o in x["ops"] if o["step"]}
    assert steps == {"process 0: write 1": (1, None, 1), "process 1: write 3": (2, 1, 3),
                     "process 2: read -> 3": (3, 3, 3)}
    assert data["tracks"][1]["status"] == "valid"
    assert model.name == "kv"


def _evaluate(devtools: DevTools, session: str, expression: str) -> Any:
    result = devtools.call("Runtime.evaluate", session, returnByValue=True,
                           expression=expression)
    assert "exceptionDetails" not in result, result
    return result["result"]["value"]


def _hover(devtools: DevTools, session: str, text: str) -> str:
    """Move the mouse over the (first) operation whose label holds `text`; the tooltip."""
    box = _evaluate(devtools, session, "(() => { const g = [...document.querySelectorAll("
                                       "'g.op')].find(g => g.textContent.includes("
                                       f"{json.dumps(text)})); const r = g.querySelector("
                                       "'rect').getBoundingClientRect(); "
                                       "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    devtools.call("Input.dispatchMouseEvent", session, type="mouseMoved", x=box[0], y=box[1])
    return _evaluate(devtools, session, "document.getElementById('tip').hidden ? '' : "
                                        "document.getElementById('tip').textContent")


def test_the_page_in_chromium(page: Path, tmp_path: Path) -> None:
    import base64
    import io

    from matplotlib.image import imread

    devtools = DevTools(tmp_path / "profile")
    try:
        target = devtools.call("Target.createTarget", url="about:blank")["targetId"]
        session = devtools.call("Target.attachToTarget", targetId=target,
                                flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            devtools.call(f"{domain}.enable", session)
        devtools.call("Emulation.setDeviceMetricsOverride", session, width=1200, height=700,
                      deviceScaleFactor=1, mobile=False)
        devtools.events.clear()
        devtools.call("Page.navigate", session, url=page.as_uri())
        devtools.wait_event("Page.loadEventFired")

        assert _evaluate(devtools, session, "document.querySelectorAll('.track').length") == 2
        headings = _evaluate(devtools, session,
                             "[...document.querySelectorAll('.track h2')].map(h => h.textContent)")
        assert headings == ['key "x": invalid (3 ops linearized)',
                            'key "y": valid (2 ops linearized)']
        steps = _evaluate(devtools, session, "[...document.querySelectorAll("
                                             "'.status-invalid .op .step')].map(s => s.textContent)")
        assert sorted(steps) == ["#1", "#2", "#3"]
        assert _evaluate(devtools, session,
                         "document.querySelectorAll('.op.illegal').length") == 1

        tip = _hover(devtools, session, "cas 1 -> 2")
        assert "ILLEGAL" in tip and "state here: 3" in tip
        tip = _hover(devtools, session, "write 3")
        assert "linearized #2" in tip and "state before: 1" in tip and "state after:  3" in tip
        tip = _hover(devtools, session, "read -> 2")  # after the illegal op: not linearized
        assert "not in the linearization shown" in tip

        shot = devtools.call("Page.captureScreenshot", session, format="png")["data"]
        errors = [e for e in devtools.events if e.get("sessionId") == session and _is_error(e)]
        urls = [e["params"]["request"]["url"] for e in devtools.events
                if e.get("method") == "Network.requestWillBeSent"]
        devtools.call("Target.closeTarget", targetId=target)
    finally:
        devtools.close()
    assert all(u.startswith(("file://", "data:")) for u in urls), urls
    _check_page({"errors": errors, "images": [],
                 "screenshot": imread(io.BytesIO(base64.b64decode(shot)), format="png")},
                min_images=0)


def _planted_history(folder: Path) -> Path:
    """knossos-invalid.edn with a payload as every key, value, process and the file name."""
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    text = (DATA / "knossos-invalid.edn").read_text()
    for name in ("x", "y"):
        text = text.replace(f"[:{name} ", f"[{q(xss_payload('key-' + name))} ")
    for n in range(4):
        text = text.replace(f":process {n},", f":process {q(xss_payload(f'process-{n}'))},")
    for v in (1, 2, 3, 5):
        text = (text.replace(f" {v}]", f" {q(xss_payload(f'value-{v}'))}]")
                .replace(f"[{v} ", f"[{q(xss_payload(f'value-{v}'))} "))
    stem = xss_payload("file").replace("/", "")  # a file name holds anything but '/'
    history = folder / f"{stem}.edn"
    history.write_text(text)
    return history


def test_planted_payloads_do_not_run(tmp_path: Path) -> None:
    """Every string of the page a history's author controls (its file name, keys, values,
    process names, and the title a caller passes) holds markup that would run if it reached
    the page unescaped: Chromium runs none of it, and shows each as text."""
    import contextlib
    import io

    from harness.cli import main

    history = _planted_history(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["check", str(history), "--model", "kv"]) == 1
    page = Path(json.loads(out.getvalue().strip().splitlines()[-1])["visualization"])
    titled = tmp_path / "titled.html"
    from checkers.linear.visualize import write_visualization
    ops = pair(read_events(history))
    write_visualization(titled, ops, make_model("kv"),
                        check_file(history, "kv"), title=xss_payload("title"))

    devtools = DevTools(tmp_path / "profile")
    try:
        for path in (page, titled):
            ran, text = planted_scripts_run(devtools, path)
            assert ran == [], f"{path.name}: planted scripts ran: {ran}"
            assert "onerror=window.__xss.push('key-y')" in text  # drawn, the payloads as text
            assert "onerror=window.__xss.push('key-x')" in text
            assert "onerror=window.__xss.push('file')" in text or path == titled
    finally:
        devtools.close()
