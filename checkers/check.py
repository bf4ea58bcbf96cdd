"""Entry points: check a run folder or a bare history and write its results beside it.

A run folder's history.jsonl gets RUN/results.json and RUN/loss.parquet (the results-layout
contract). Any other history X.jsonl gets X.results.json and X.loss.parquet, which record the
history they belong to: checking one history never replaces another's results.

Everything is written through fresh temporary files renamed into place (control.files), and
the Parquet tables of the history go to a new private folder that is removed afterwards, so
nothing planted beside a history -- a symlink, a file named like an output -- is ever written
through, and two checks of one folder at once do not trip over each other."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from checkers import native_checks, reference, spark_checks, spark_native
from checkers.definitions import EXAMPLES
from checkers.exitcodes import UserError
from checkers.forensics import forensics
from checkers.history_paths import RUN_HISTORY, locate, output_paths, refuse_foreign_results
from checkers.ingest import HistoryError, ingest
from checkers.spark import (
    SessionAhead,
    driver_watched,
    get_session,
    resolve_master,
    say,
    session_ahead,
)
from checkers.trace import findings as invariant_findings
from checkers.txn.consumers import committed_view
from checkers.txn.exactly_once import history_partitions
from checkers.txn.hook import drop_witnessed, merge, transactional
from checkers.verdict import CheckOutput, add_invariants, classify_unread, records, results_dict
from control.files import (
    atomic_outputs,
    make_private_tempdir,
    write_json_atomic,
)
from runformat.run_config import RunConfig, RunConfigError

# Below `[checker] spark_min_ops` operations (0 by default: every check on Spark, the
# contract of docs/architecture.md), and unless the Spark master is a cluster's, the checks
# run in this process (checkers/reference.py, held to the Spark checks' exact results by the
# tests). With the native checks in Spark's tasks a small history's Spark check takes a
# second or two on a warm session, so this saves little but the session's start (3.3 s) for
# a campaign whose histories are all small (docs/checkers.md).
SPARK_MIN_OPS = 0

LOSS_EXAMPLE_COLUMNS = [
    "kind", "partition", "offset", "value", "ack_time", "node", "epoch", "storage",
    "on_disk_at", "explanation",
]  # fmt: skip


def load_config(run_dir: Path, notes: list[str]) -> RunConfig:
    """The run's config from test.json, typed (runformat.run_config): a malformed test.json
    is a clear error, never a crash or a wrong verdict."""
    test_json = run_dir / "test.json"
    if not test_json.exists():
        notes.append("no test.json beside the history: assuming acks=all and no allowed anomalies")
        return RunConfig()
    try:
        record = json.loads(test_json.read_bytes())
    except OSError as e:
        raise UserError(f"{test_json}: cannot read it ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise UserError(f"{test_json}: not a valid test.json ({str(e):.200})") from None
    if not isinstance(record, dict):
        raise UserError(f"{test_json}: not a valid test.json (not a JSON object)")
    config = record.get("config", {})
    if not isinstance(config, dict):
        raise UserError(f"{test_json}: config must be an object, got {config!r:.60}")
    try:
        return RunConfig.of(config)
    except RunConfigError as e:
        raise UserError(f"{test_json}: {e}") from None


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item"):  # numpy scalars
        x = x.item()
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def write_results(path: Path, results: dict) -> None:
    """Atomically: a fresh temporary file renamed over `path` (a symlink there is replaced,
    never written through; a full disk leaves the old file and no temporary)."""
    write_json_atomic(path, _jsonable(results))


def _loss_summary(loss: pd.DataFrame) -> dict:
    return {
        "count": len(loss),
        "by_kind": loss["kind"].value_counts().to_dict(),
        "by_storage": loss["storage"].value_counts().to_dict(),
        "examples": records(loss.head(EXAMPLES)[LOSS_EXAMPLE_COLUMNS]),
        "file": "loss.parquet",
    }


def finish(out: CheckOutput, config: RunConfig, history: Path, ops_path: Path, notes: list[str],
           spark: Any = None) -> dict:
    """Verdict + loss forensics from a backend's output; writes the results and loss files
    (output_paths). With `spark` (the history was checked there), the trace's invariants are
    checked there too."""
    run_dir = history.parent
    results_path, loss_path = output_paths(history)
    allow = list(config.allow)
    unread = classify_unread(out)
    txn = transactional(history, config)  # None unless its parts carry `mop` (checkers/txn)
    if txn is not None:
        unread = drop_witnessed(unread, txn, out.complete_partitions)
    results = {"history": history.name, **results_dict(out, unread, allow, notes)}
    if txn is not None:
        merge(results, txn, allow)
    if history.name == RUN_HISTORY:  # a run folder: its protocol invariants (checkers/trace.py)
        add_invariants(results, *invariant_findings(run_dir, config, EXAMPLES, spark), allow)
    lost = unread[unread["kind"].isin(["lost-write", "unseen"])]
    topic = config.topic
    loss = forensics(lost, ops_path, run_dir, topic, results["notes"])
    # Both files or neither: a full disk leaves the earlier pair as it was.
    with atomic_outputs(loss_path, results_path) as (loss_file, results_file):
        loss.to_parquet(loss_file, index=False)
        results["lost"] = _loss_summary(loss)
        results["lost"]["file"] = loss_path.name
        results_file.write((json.dumps(_jsonable(results), indent=2) + "\n").encode())
    return results


def check_path(path: Path, spark_master: str | None = None, *, backend: str = "spark",
               spark_min_ops: int | None = None) -> dict:
    """Check a run folder or bare history.jsonl; write results.json + loss.parquet beside it.

    backend "reference" runs the single-process pandas checks instead of Spark (for
    comparison and tests; only Spark scales past one machine's memory); "native" runs the
    same checks as `histcheck` (checkers/native_checks.py, held to the reference's exact
    results), in this process's machine, or the reference when it is not built or fails: a
    simulated search checks each seed so (up to twice as fast on a 30 s run). With backend
    "spark", a history of fewer than `spark_min_ops` operations (default: the run's
    `[checker] spark_min_ops`, else SPARK_MIN_OPS) is checked in this process too, unless the
    master is a cluster's. Each stage's time is
    printed on stderr.
    """
    history, run_dir = locate(path)
    results_path, _ = output_paths(history)
    refuse_foreign_results(results_path, history)
    notes: list[str] = []
    config = load_config(run_dir, notes)
    min_ops = spark_min_ops if spark_min_ops is not None else config.spark_min_ops
    if min_ops is None:
        min_ops = SPARK_MIN_OPS
    with _writing(history):
        return _check(history, run_dir, config, notes, spark_master, backend, min_ops)


def _engine(backend: str, ops: int, min_ops: int, master: str) -> str:
    """"spark", "native" or "in-process" for a history of `ops` operations. A cluster master
    (anything but local[...]) always gets Spark: whoever set one wants the work done there."""
    if backend == "native":
        return "native" if native_checks.binary() is not None else "in-process"
    if backend == "reference":
        return "in-process"
    local = master == "local" or master.startswith("local[")
    return "spark" if ops >= min_ops or not local else "in-process"


# Errors of a disk that cannot take what the checker writes: said in one line, with the place.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


@contextmanager
def _writing(history: Path) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        if e.errno not in _NO_ROOM:
            raise
        raise UserError(f"cannot write the results of {history} in {history.parent}: "
                        f"{e.strerror} (nothing was replaced)") from None


def _check(history: Path, run_dir: Path, config: RunConfig, notes: list[str],
           spark_master: str | None, backend: str, min_ops: int) -> dict:
    results_path, _ = output_paths(history)
    partitions = history_partitions(config)  # with transformers, the output topic's too
    ahead = _session_ahead(backend, min_ops, spark_master, config.spark_master)
    # The history's tables: a new folder of our own, readable by Spark workers, removed after.
    scratch = make_private_tempdir(".check-", run_dir)
    try:
        os.chmod(scratch, 0o755)
        started = time.perf_counter()
        try:
            # read-uncommitted polls are judged by their isolation level (checkers/txn)
            ing = ingest(committed_view(history, scratch), scratch, partitions)
        except HistoryError as e:
            results = {
                "history": history.name,
                "valid": "unknown",
                "anomalies": {},
                "stats": {},
                "notes": [f"history is corrupt, not checked: {e.total} bad line(s)"],
                "errors": e.errors,
                "lost": {},
            }
            write_results(results_path, results)
            return results
        notes += ing.notes
        ingested = time.perf_counter()
        how = "native" if ing.path == "native" else f"exact path: {ing.path}"
        say(f"ingest of {ing.ops:,} ops and {ing.reads:,} records: "
             f"{ingested - started:.1f} s ({how})")
        acks = config.acks or "all"
        configured = config.spark_master
        engine = _engine(backend, ing.ops, min_ops, resolve_master(spark_master, configured))
        where = "in this process"
        spark = None
        out = _native(ing.ops_path, ing.reads_path, acks) if engine == "native" else None
        if out is not None:
            where = "in this process's machine (histcheck)"
        elif engine != "spark":
            out = reference.run(ing.ops_path, ing.reads_path, acks)
        else:
            spark = ahead.result() if ahead else get_session(spark_master, configured)
            where = (f"on Spark {spark.sparkContext.master}, after "
                     f"{time.perf_counter() - ingested:.1f} s for its session"
                     + (" (started with the ingest)" if ahead else ""))
            ingested = time.perf_counter()
            with driver_watched():
                out = spark_checks.run(spark, ing.ops_path, ing.reads_path, acks)
        checked = time.perf_counter()
        with driver_watched():
            results = finish(out, config, history, ing.ops_path, notes, spark)
        say(f"check {checked - ingested:.1f} s {where}; forensics and results "
             f"{time.perf_counter() - checked:.1f} s")
        return results
    finally:
        if ahead:
            ahead.release()
        shutil.rmtree(scratch, ignore_errors=True)


def _session_ahead(backend: str, min_ops: int, spark_master: str | None,
                   configured: str | None) -> SessionAhead | None:
    """The Spark session started, and its Python workers with it, while the history is
    ingested, when the check will be on Spark whatever the history's size; None otherwise.
    On 2 cores the two share the CPU, so this gains what they leave idle: a cold check of 10M
    operations took 23 s this way against 26 s with the session started after (docs/checkers.md)."""
    master = resolve_master(spark_master, configured)
    if _engine(backend, 0, min_ops, master) != "spark":
        return None
    return session_ahead(spark_master, configured, spark_native.warm_up)


def _native(ops_path: Path, reads_path: Path, acks: str) -> CheckOutput | None:
    """histcheck's findings on one thread, or None (said why) when it could not check."""
    try:
        return native_checks.run(ops_path, reads_path, acks, threads=1)
    except native_checks.NativeCheckError as e:
        say(f"{e}: the reference checks instead")
        return None
