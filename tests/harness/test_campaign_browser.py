"""The campaign index, the results index and a run report, opened from file:// in headless
Chromium (Debian's /usr/bin/chromium, driven over the DevTools protocol on a pipe): every
page renders, every <img> is loaded, the console has no errors and the screenshot is not blank.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.browser import (
    DevTools,
    _check_page,
    needs_chromium,
    open_page,
)
from test_campaign import simulated_run_test

from harness.campaign import run_campaign

pytestmark = needs_chromium()


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("campaign")
    spec = tmp / "web.toml"
    spec.write_text('seeds = [1]\ntime_limit = 10\n[set]\nnodes = 4\n'
                    '[[config]]\nname = "safe"\nexpect = "no-loss"\n'
                    '[[config]]\nname = "acks1"\nexpect = "loss-allowed"\n'
                    'set = { "workload.acks" = "1" }\n'
                    '[[nemesis]]\nname = "kill"\nfaults = ["kill"]\n')
    return run_campaign(spec, False, None, simulated_run_test, tmp / "results")


def test_campaign_index_renders_with_its_plot(browser: DevTools, campaign: Path) -> None:
    page = open_page(browser, campaign / "index.html")
    assert page["title"].startswith("Campaign web")
    _check_page(page, min_images=1)


def test_results_index_renders_with_trend_plots(browser: DevTools, campaign: Path) -> None:
    page = open_page(browser, campaign.parents[2] / "index.html")
    _check_page(page, min_images=2)


def test_run_report_renders_with_all_plots(browser: DevTools, campaign: Path) -> None:
    state = json.loads((campaign / "campaign.json").read_text())
    lossy = next(c for c in state["cells"] if c["config"] == "acks1")
    page = open_page(browser, (campaign / lossy["run_dir"] / "report.html").resolve())
    _check_page(page, min_images=4)


def test_a_missing_plot_is_caught(browser: DevTools, campaign: Path) -> None:
    """The checks above can fail: a page whose image is gone shows a load error."""
    page_dir = campaign.parent / "broken"
    page_dir.mkdir(exist_ok=True)
    (page_dir / "index.html").write_text('<!DOCTYPE html><title>x</title><p>text</p>'
                                         '<img src="gone.png">')
    page = open_page(browser, page_dir / "index.html")
    assert page["images"] == [["gone.png", True, 0]]
    assert page["errors"], "a missing image should log a console error"
    (page_dir / "blank.html").write_text("<!DOCTYPE html><title>blank</title>")
    with pytest.raises(AssertionError, match="blank"):
        _check_page(open_page(browser, page_dir / "blank.html"), min_images=0)
