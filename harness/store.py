"""Results store: run folders, the `results/latest` link and test.json.

Layout (a contract, docs/architecture.md): results/<test-name>/<YYYYmmddTHHMMSS>-s<seed>/ and results/latest
pointing at the newest run. Folder timestamps are UTC. Two runs of one test and seed started
in the same second get consecutive seconds in their folder names, so the name format never
changes; the true start time is `started_at` in test.json.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checkers.exitcodes import Exit, exit_code
from control.files import owned_dir, write_json_atomic
from harness.config import RESERVED_NAMES, TestConfig

RESULTS_ENV = "HARNESS_RESULTS"
LATEST = "latest"
RUN_NAME_FORMAT = "%Y%m%dT%H%M%S"
# Distributions whose versions make a run reproducible; missing ones are recorded as null.
RECORDED_PACKAGES = ("kafka-chaos-harness", "paramiko", "pyspark", "pyarrow", "pandas",
                     "mfusepy", "jinja2", "matplotlib")
_PROJECT_ROOT = Path(__file__).resolve().parent.parent
_MAX_TRIES = 1000


def default_results_dir() -> Path:
    """$HARNESS_RESULTS if set, else ./results."""
    return Path(os.environ.get(RESULTS_ENV) or "results")


def create_run_dir(results: Path, name: str, seed: int, started_at: float | None = None) -> Path:
    """Create and return a new, empty run folder; never reuses an existing one.

    `name` must already be a validated test name (harness.config checks it)."""
    if not name or "/" in name or name in (".", "..", *RESERVED_NAMES):
        raise ValueError(f"bad test name for a results folder: {name!r}")
    # Ours and writable by nobody else, like every folder above it (the results root too):
    # whoever could plant results/<name> (a symlink) or swap it would have the run written
    # into a folder of their choosing.
    parent = owned_dir(results / name)
    start = int(started_at if started_at is not None else time.time())
    for bump in range(_MAX_TRIES):
        stamp = time.strftime(RUN_NAME_FORMAT, time.gmtime(start + bump))
        run = parent / f"{stamp}-s{seed}"
        try:
            run.mkdir()  # atomic: exactly one creator wins a given name
        except FileExistsError:
            continue
        return run
    raise FileExistsError(f"no free run folder name under {parent} near {start}")


def check_latest(results: Path) -> None:
    """results/latest is absent or a symlink (update_latest can replace it)."""
    link = results / LATEST
    if os.path.lexists(link) and not link.is_symlink():
        raise FileExistsError(f"{link} exists and is not a symlink; move it away")


def update_latest(results: Path, run_dir: Path) -> None:
    """Point results/latest at run_dir, atomically (a reader sees the old or the new link)."""
    link = results / LATEST
    check_latest(results)
    target = os.path.relpath(run_dir.resolve(), results.resolve())
    tmp = results / f".{LATEST}.{os.getpid()}.{time.monotonic_ns()}"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def versions() -> dict[str, Any]:
    """Python, platform, package versions and the git commit of the harness checkout."""
    packages: dict[str, str | None] = {}
    for dist in RECORDED_PACKAGES:
        try:
            packages[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            packages[dist] = None
    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "platform": platform.platform(), "packages": packages, "git": git_state()}


def git_state(root: Path = _PROJECT_ROOT) -> dict[str, Any] | None:
    """{"commit": sha, "dirty": bool} of the checkout, or None outside a git checkout."""
    # No optional locks: reading the state must never take the index lock of a shared checkout.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=10, env=env)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def run_record(config: TestConfig, argv: Sequence[str], started_at: float) -> dict[str, Any]:
    """test.json: the run's identity and its config written from the typed form (every
    setting, defaults included: the dict shape harness.config.validate reads back)."""
    return {"name": config.name, "seed": config.seed, "argv": list(argv),
            "hosts": config.hosts.provider, "versions": versions(), "started_at": started_at,
            "config": config.record()}


def write_test_json(run_dir: Path, config: TestConfig, argv: Sequence[str],
                    started_at: float) -> dict[str, Any]:
    """Write run_dir/test.json and return what was written."""
    record = run_record(config, argv, started_at)
    write_json_atomic(run_dir / "test.json", record)
    return record


def read_test_json(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "test.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: not a run folder (no test.json)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} line {e.lineno}: malformed JSON: {e.msg}") from None
    if not isinstance(record, dict) or "config" not in record:
        raise ValueError(f"{path}: expected an object with a 'config' field")
    return record


def new_run(results: Path, config: TestConfig, argv: Sequence[str],
            started_at: float | None = None, *, latest: bool = True) -> Path:
    """Create the run folder, write test.json, and (with `latest`) point results/latest at it;
    the runner passes latest=False and updates the link once the run has really started.
    A folder whose test.json could not be written (a full disk) is removed again."""
    started = time.time() if started_at is None else started_at
    check_latest(results)
    run_dir = create_run_dir(results, config.name, config.seed, started)
    try:
        write_test_json(run_dir, config, argv, started)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    if latest:
        update_latest(results, run_dir)
    return run_dir


def verdict_exit(run_dir: Path) -> int:
    """The exit code of a finished run: its verdict (0/1/2), or 3 when it was never checked
    (the checker failed: the folder is still there to check again)."""
    path = run_dir / "results.json"
    if not path.exists():
        return Exit.ERROR
    try:
        results = json.loads(path.read_bytes())
    except ValueError as e:
        raise ValueError(f"{path}: not a valid results.json ({e})") from None
    if not isinstance(results, dict):
        raise ValueError(f"{path}: not a valid results.json (not a JSON object)")
    return exit_code(results)
