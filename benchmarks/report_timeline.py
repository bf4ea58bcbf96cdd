"""Report and timeline of a big history: render time, page sizes, time to first paint.

Generates a synthetic history with benchmarks/checker_throughput.py's generator (producers,
tailing consumers, a final read; a lost write every 50,000 sends), writes a run folder around
it (test.json, events.jsonl with a leader change and a truncation per lost write, loss.parquet
with the lost writes as the checker's forensics would), renders report.html + timeline.html,
and opens both in headless Chromium (over the DevTools protocol, as the browser tests do), reading
first-contentful-paint, the timeline's first canvas draw (performance mark `tl-first-draw`)
and the load event from the page's own Performance timeline.

    .venv/bin/python benchmarks/report_timeline.py --ops 1000000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support: scaffolding

from support.machine import what_ran  # noqa: E402

from harness.report.render import render_run  # noqa: E402

NS = 1_000_000_000


def _generator():
    spec = importlib.util.spec_from_file_location("ct", ROOT / "benchmarks/checker_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(run: Path, n_ops: int) -> None:
    ct = _generator()
    run.mkdir(parents=True, exist_ok=True)
    g = ct.generate(run / "history.jsonl", n_ops)
    lost, end = [], 0
    with open(run / "history.jsonl") as fh:
        for line in fh:
            if '"ok", "f": "send"' not in line:
                continue
            op = json.loads(line)
            end = op["time"]
            if g.logs[op["partition"]][op["offset"]] == -1:
                lost.append(op)
    events = []
    for p in range(ct.PARTITIONS):
        events.append({"time": 1000, "kind": "partition-change", "partition": p, "leader": p + 1,
                       "leader_epoch": 1, "isr": [1, 2, 3], "elr": [], "reason": "create"})
    rows = []
    for i, op in enumerate(lost):
        t, p, o = op["time"], op["partition"], op["offset"]
        change = {"time": t + 1000, "kind": "partition-change", "partition": p,
                  "leader": 2 + i % 2, "leader_epoch": 2 + i, "isr": [2, 3], "elr": [],
                  "reason": "fence"}
        trunc = {"time": t + 5000, "kind": "truncate", "partition": p, "node": op["node"],
                 "from_offset": o + 1, "to_offset": o, "removed": 1, "reason": "leader-epoch"}
        events += [change, trunc]
        rows.append({"partition": p, "value": op["value"], "offset": o, "ack_time": t,
                     "node": str(op["node"]), "epoch": 1, "kind": "lost-write",
                     "isr_at_ack": "[1, 2, 3]", "truncations": json.dumps([trunc]),
                     "unclean": "[]", "storage": "truncated/lost",
                     "explanation": f"acked by broker {op['node']} ...; truncated"})
    events.sort(key=lambda e: e["time"])
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    pq.write_table(pa.Table.from_pylist(rows), run / "loss.parquet")
    (run / "results.json").write_text(json.dumps({
        "valid": False, "anomalies": {"lost-write": {"count": len(rows), "examples": []}}}))
    (run / "test.json").write_text(json.dumps({"name": "bench", "config": {
        "workload": {"acks": "1"}}}))
    print(f"history: {n_ops:,} ops, {(run / 'history.jsonl').stat().st_size / 1e6:.0f} MB, "
          f"{end / NS:.1f} s of history time, {len(rows)} lost writes")


PAINT = ("(() => { const p = {}; for (const e of performance.getEntriesByType('paint')) "
         "p[e.name] = e.startTime; for (const e of performance.getEntriesByType('mark')) "
         "p[e.name] = e.startTime; const n = performance.getEntriesByType('navigation')[0]; "
         "p.load = n ? n.loadEventEnd : null; return p; })()")


class DevTools:
    """Chrome DevTools protocol over --remote-debugging-pipe (as tests/harness/test_campaign_browser.py;
    repeated here so the benchmark does not import the test suite)."""

    def __init__(self, profile: Path) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [shutil.which("chromium") or "/usr/bin/chromium", "--headless", "--no-sandbox",
             "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=wire_fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_child], [], [], max(0, deadline - time.time()))
            if not ready:
                raise TimeoutError("no message from chromium in time")
            self._buffer += os.read(self._from_child, 1 << 20)
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, timeout: float = 120, **params):
        self._next_id += 1
        command = {"id": self._next_id, "method": method, "params": params}
        if session:
            command["sessionId"] = session
        os.write(self._to_child, json.dumps(command).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            message = self._read(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_event(self, method: str, timeout: float = 120) -> dict:
        deadline = time.time() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._read(deadline))


def measure(run: Path) -> None:
    with tempfile.TemporaryDirectory() as profile:
        dt = DevTools(Path(profile))
        try:
            for name in ("report.html", "timeline.html"):
                target = dt.call("Target.createTarget", url="about:blank")["targetId"]
                session = dt.call("Target.attachToTarget", targetId=target,
                                  flatten=True)["sessionId"]
                dt.call("Page.enable", session)
                dt.call("Emulation.setDeviceMetricsOverride", session, width=1200, height=900,
                        deviceScaleFactor=1, mobile=False)
                dt.events.clear()
                start = time.perf_counter()
                dt.call("Page.navigate", session, url=(run / name).as_uri())
                dt.wait_event("Page.loadEventFired", timeout=120)
                wall = time.perf_counter() - start
                time.sleep(0.5)
                marks = dt.call("Runtime.evaluate", session, returnByValue=True,
                                expression=PAINT)["result"]["value"]
                shown = ", ".join(f"{k} {v:.0f} ms" for k, v in sorted(marks.items()) if v)
                print(f"{name}: {(run / name).stat().st_size / 1e6:.2f} MB; {shown}; "
                      f"navigate-to-load wall {wall * 1000:.0f} ms")
                dt.call("Target.closeTarget", targetId=target)
        finally:
            dt.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--measure-only", action="store_true",
                    help="only open the pages already rendered under --workdir")
    args = ap.parse_args(argv)
    print(what_ran(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        run = (args.workdir or Path(tmp)) / "bench" / "20260101T000000-s0"
        if args.measure_only:
            measure(run)
            return
        t = time.perf_counter()
        build(run, args.ops)
        print(f"built in {time.perf_counter() - t:.1f} s")
        # CPU time too: on a machine shared with other work, wall time says more of them.
        t, cpu = time.perf_counter(), time.process_time()
        render_run(run)
        print(f"render_run (history scans, incidents, timeline, plots): "
              f"{time.perf_counter() - t:.1f} s wall, {time.process_time() - cpu:.1f} s CPU")
        measure(run)


if __name__ == "__main__":
    main()
