"""HTML reports: one per run folder, an index per campaign folder."""

from __future__ import annotations

from pathlib import Path

from harness.report.render import render_run


def report_path(path: Path) -> Path:
    """(Re)write the HTML of a run folder (report.html) or a campaign folder (index.html).

    Returns the HTML file written. Raises ValueError when `path` is neither.
    """
    path = Path(path)
    if (path / "campaign.json").is_file():
        # Imported here: harness.index and harness.campaign themselves build on this package.
        from harness.campaign import refresh_outcomes
        from harness.index import refresh_campaign

        refresh_outcomes(path)  # runs may have been re-checked since
        return refresh_campaign(path)
    if path.is_dir() and any((path / n).exists() for n in ("test.json", "history.jsonl")):
        return render_run(path)
    raise ValueError(f"{path}: neither a run folder (test.json or history.jsonl) "
                     "nor a campaign folder (campaign.json)")
