"""The acks=1 report in headless Chromium: its loss reads as one incident, clicking the
incident opens timeline.html focused on it (the visible range changes to the incident, the
lost offsets and the truncation are drawn), hovering shows an operation, there are no console
errors; the report fits a phone-width window and prints to PDF.
"""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.image import imread
from support.browser import CHROMIUM, DevTools, _is_error, planted_scripts_run, xss_payload
from test_report_incidents import acks1_run

from harness.report import report_path

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")


class Tab:
    def __init__(self, devtools: DevTools, width: int = 1200, height: int = 1400,
                 mobile: bool = False) -> None:
        self.dt = devtools
        self.target = devtools.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = devtools.call("Target.attachToTarget", targetId=self.target,
                                     flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            devtools.call(f"{domain}.enable", self.session)
        devtools.call("Emulation.setDeviceMetricsOverride", self.session, width=width,
                      height=height, deviceScaleFactor=1, mobile=mobile)
        devtools.events.clear()

    def go(self, url: str) -> None:
        self.dt.call("Page.navigate", self.session, url=url)
        self.dt.wait_event("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        reply = self.dt.call("Runtime.evaluate", self.session, returnByValue=True,
                             awaitPromise=True, expression=expression)
        if "exceptionDetails" in reply:
            raise RuntimeError(reply["exceptionDetails"])
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10) -> Any:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                value = self.js(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(expression)

    def screenshot(self) -> np.ndarray:
        shot = self.dt.call("Page.captureScreenshot", self.session, format="png")["data"]
        return imread(io.BytesIO(base64.b64decode(shot)), format="png")

    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.dt.events if e.get("sessionId") == self.session and _is_error(e)]

    def close(self) -> None:
        self.dt.call("Target.closeTarget", targetId=self.target)


def _not_blank(image: np.ndarray) -> None:
    rgb = (image[..., :3].reshape(-1, 3) * 255).astype(np.uint32)
    assert rgb.std() > 10
    assert len(np.unique((rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2])) > 50


def _red_pixels(image: np.ndarray) -> int:
    rgb = (image[..., :3] * 255).astype(int)
    return int(((rgb[..., 0] > 180) & (rgb[..., 1] < 80) & (rgb[..., 2] < 80)).sum())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = acks1_run(tmp_path_factory.mktemp("story-browser") / "acks1" / "20260101T000000-s0")
    report_path(run)
    return run


def test_report_incident_click_focuses_the_timeline(browser: DevTools, run: Path) -> None:  # noqa: F811
    lost = pq.read_table(run / "loss.parquet").to_pylist()
    tab = Tab(browser)
    try:
        tab.go((run / "report.html").as_uri())
        incidents = tab.js("Array.from(document.querySelectorAll('.incident-line'))"
                           ".map(e => e.textContent)")
        assert len(incidents) == 1 and f"{len(lost)} records" in incidents[0]
        top = tab.js("document.querySelector('.incident-line').getBoundingClientRect().top")
        assert top < 400, "the incident is the first thing on the page"
        shot = tab.screenshot()
        _not_blank(shot)
        assert _red_pixels(shot) > 200  # the INVALID badge and the incident's red border
        (run / "report-screenshot.png").write_bytes(base64.b64decode(
            browser.call("Page.captureScreenshot", tab.session, format="png")["data"]))
        # Click the incident's timeline link: the timeline opens focused on it.
        browser.events.clear()
        tab.js("document.querySelector('.incident-line a.tl-link').click()")
        browser.wait_event("Page.loadEventFired")
        state = tab.wait_for("window.TL && TL.draws > 0 && JSON.stringify(TL)")
        state = json.loads(state)
        end = tab.js("JSON.parse(document.getElementById('tl-data').textContent).end_us / 1e6")
        t0, t1 = state["view"]["t0"], state["view"]["t1"]
        acked = [r["ack_time"] / 1e9 for r in lost]
        assert t1 - t0 < end / 2, "the visible range narrowed to the incident"
        assert t0 <= min(acked) and max(acked) <= t1
        assert state["view"]["p"] == "0" and state["focused"] == 1
        assert state["drawn"]["lost"] == len(lost) and state["drawn"]["truncations"] == 1
        assert state["drawn"]["detail"] > 0  # per-operation detail, not just buckets
        lo, hi = state["yRange"]
        assert lo <= min(r["offset"] for r in lost) and max(r["offset"] for r in lost) <= hi
        timeline = tab.screenshot()
        _not_blank(timeline)
        assert _red_pixels(timeline) > 100  # lost records and the truncation, in red
        # Hover a lost record: the tooltip names it.
        hit = tab.js("(() => { const h = TL.hits.find(h => h.text.startsWith('LOST'));"
                     " return [(h.x + h.x1) / 2, (h.y + h.y1) / 2]; })()")
        rect = tab.js("(() => { const r = document.getElementById('cv')"
                      ".getBoundingClientRect(); return [r.left, r.top]; })()")
        browser.call("Input.dispatchMouseEvent", tab.session, type="mouseMoved",
                     x=rect[0] + hit[0], y=rect[1] + hit[1])
        tip = tab.wait_for("document.getElementById('tip').style.display === 'block' && "
                           "document.getElementById('tip').textContent")
        assert tip.startswith("LOST") and "offset" in tip
        # Zoom out: the range widens again.
        tab.js("document.getElementById('reset').click()")
        tab.wait_for(f"TL.view.t1 - TL.view.t0 > {end * 0.99}")
        assert tab.errors() == []
    finally:
        tab.close()


def test_report_fits_a_phone_and_prints(browser: DevTools, run: Path) -> None:  # noqa: F811
    tab = Tab(browser, width=390, height=844, mobile=True)
    try:
        tab.go((run / "report.html").as_uri())
        width = tab.js("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1] + 1, f"horizontal overflow on a phone: {width}"
        pdf = base64.b64decode(browser.call("Page.printToPDF", tab.session,
                                            printBackground=True)["data"])
        assert pdf.startswith(b"%PDF") and len(pdf) > 20_000
        tab.go((run / "timeline.html").as_uri())
        tab.wait_for("window.TL && TL.draws > 0")
        assert tab.js("[document.documentElement.scrollWidth <= window.innerWidth + 1]") == [True]
        assert tab.errors() == []
    finally:
        tab.close()


def test_campaign_index_with_nights_fits_a_phone_and_prints(
        browser: DevTools, tmp_path: Path) -> None:  # noqa: F811
    from test_report_incidents import NIGHTS, _write_nights

    from harness.report.campaign_index import render_campaign

    index = render_campaign(_write_nights(tmp_path, NIGHTS)[-1])
    tab = Tab(browser, width=390, height=844, mobile=True)
    try:
        tab.go(index.as_uri())
        assert tab.js("document.querySelectorAll('.s-new').length") >= 1
        width = tab.js("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1] + 1, f"horizontal overflow on a phone: {width}"
        pdf = base64.b64decode(browser.call("Page.printToPDF", tab.session)["data"])
        assert pdf.startswith(b"%PDF")
        assert tab.errors() == []
    finally:
        tab.close()


@pytest.mark.slow
def test_timeline_of_a_million_op_history_is_small_and_paints_fast() -> None:
    """benchmarks/report_timeline.py on 1M operations (about 30 s)."""
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "benchmarks/report_timeline.py"), "--ops",
                          "1000000"], capture_output=True, text=True, timeout=600,
                         check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("timeline.html"))
    size_mb = float(re.search(r"([\d.]+) MB", line)[1])
    first_draw_ms = float(re.search(r"tl-first-draw (\d+) ms", line)[1])
    assert size_mb < 5 and first_draw_ms < 3000, line


def test_real_acks1_report_screenshot(browser: DevTools, tmp_path: Path) -> None:  # noqa: F811
    """The real simulated acks=1 run (tests/data/acks1-sim): two incident lines on top."""
    import shutil

    run = tmp_path / "validation-acks1-leader-faults" / "20261123T144836-s1"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "acks1-sim", run)
    report_path(run)
    tab = Tab(browser, width=1200, height=900)
    try:
        tab.go((run / "report.html").as_uri())
        lines = tab.js("Array.from(document.querySelectorAll('.incident-line'))"
                       ".map(e => [e.textContent, e.getBoundingClientRect().bottom])")
        assert [t.split(" records")[0].strip() for t, _ in lines] == ["1,893", "918"]
        assert all(bottom < 900 for _, bottom in lines), "both incidents above the fold"
        shot = tab.screenshot()
        _not_blank(shot)
        assert _red_pixels(shot) > 200
        assert tab.errors() == []
    finally:
        tab.close()


def test_planted_payloads_in_a_run_folder_do_not_run_in_its_report(tmp_path: Path) -> None:
    """The strings a run folder gives its pages (the test's name, the folder's name, argv, the
    recorded versions, the checker's notes and the loss explanations) each hold markup that
    would run if it reached report.html or timeline.html unescaped: none runs."""
    run = acks1_run(tmp_path / "t" / xss_payload("folder").replace("/", ""))
    test = json.loads((run / "test.json").read_text())
    test["name"] = test["config"]["name"] = xss_payload("name")
    test["argv"].append(xss_payload("argv"))
    test["versions"]["python"] = xss_payload("version")
    (run / "test.json").write_text(json.dumps(test))
    results = json.loads((run / "results.json").read_text())
    results["notes"].append(xss_payload("note"))
    (run / "results.json").write_text(json.dumps(results))
    loss = pq.read_table(run / "loss.parquet").to_pylist()
    for row in loss:
        row["explanation"] = xss_payload("explanation")
    pq.write_table(pa.Table.from_pylist(loss), run / "loss.parquet")
    report = report_path(run)

    devtools = DevTools(tmp_path / "profile")
    try:
        for page in (report, run / "timeline.html"):
            ran, text = planted_scripts_run(devtools, page)
            assert ran == [], f"{page.name}: planted scripts ran: {ran}"
            assert "onerror=window.__xss.push('name')" in text, page.name  # shown as text
    finally:
        devtools.close()
