"""HTML reports: one page per run folder, an index per campaign folder and one for results/.

This package renders what a folder holds and imports nothing else from `harness`: the
commands that run, check and re-check (harness.commands) compose it as their last step."""

from __future__ import annotations

from pathlib import Path

from harness.report.campaign_index import refresh_campaign
from harness.report.render import render_run


def is_campaign_folder(path: Path) -> bool:
    return (Path(path) / "campaign.json").is_file()


def report_path(path: Path) -> Path:
    """(Re)write the HTML of a run folder (report.html) or a campaign folder (index.html).

    Returns the HTML file written. Raises ValueError when `path` is neither.
    """
    path = Path(path)
    if is_campaign_folder(path):
        return refresh_campaign(path)
    if path.is_dir() and any((path / n).exists() for n in ("test.json", "history.jsonl")):
        return render_run(path)
    raise ValueError(f"{path}: neither a run folder (test.json or history.jsonl) "
                     "nor a campaign folder (campaign.json)")
