"""The verdict step of a run, the same for real hosts (harness.runner) and the simulator
(harness.simulate): check the folder, then render its report."""

from __future__ import annotations

import sys
from pathlib import Path

from checkers.check import check_path
from harness.report import report_path


def verdict_step(run_dir: Path, *, spark_master: str | None, backend: str = "spark",
                 spark_min_ops: int | None = None) -> None:
    """Check the run folder (`backend`, `spark_min_ops` as checkers.check.check_path takes
    them) and render its report. A failure of either is said, not raised: the folder is
    still there to check again (`harness check`)."""
    try:
        results = check_path(run_dir, spark_master=spark_master, backend=backend,
                             spark_min_ops=spark_min_ops)
        _say(f"checker verdict: valid={results['valid']}")
    except Exception as e:
        _say(f"checker failed: {e}")
    try:
        report_path(run_dir)
    except Exception as e:
        _say(f"report failed: {e}")


def _say(msg: str) -> None:
    print(f"[harness] {msg}", file=sys.stderr, flush=True)
