"""How long a restarted broker takes to register, and to rejoin the ISR, in real runs.

    .venv/bin/python benchmarks/restart_times.py RUN_DIR|RESULTS_FOLDER...

For every fault in a run's history that ends by starting broker processes again (the
`stop-<kind>` of kill, power-loss, torn-power-loss, outage, restart, page-cache-loss,
corrupt-segment), the time from that line to the broker's next registration with the
controller, and to the first partition state (partition 0) that has it in the ISR again.
Registrations are the controller's `broker-registered` events on the embedded system, and its
log's "Registering a new incarnation of broker N" on Apache Kafka (the log's wall clock put
on the run clock by test.json's `started_at`); simulated runs (hosts.provider = "sim") are
counted apart, as "sim". Prints one line per restart and, per system,
the median and range. The simulator's start-up delay (`[sim] startup_s`, docs/simulation.md)
is held to these figures. No assertions: a measurement.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.kafka_events import log_lines  # noqa: E402
from runformat import events, history  # noqa: E402

RESTARTING = {"kill", "power-loss", "torn-power-loss", "outage", "restart", "page-cache-loss",
              "corrupt-segment"}
_REGISTER = re.compile(r"Registering a new incarnation of broker (\d+)\.")


def run_folders(paths: list[Path]) -> list[Path]:
    out = []
    for path in paths:
        out += sorted(p.parent for p in path.rglob("test.json") if (p.parent / "history.jsonl").exists())
    return out


def system_of(run: Path) -> str:
    config = json.loads((run / "test.json").read_text())["config"]
    if config.get("hosts", {}).get("provider") == "sim":
        return "sim"
    kind = config["system"].get("kind", "embedded")
    return f"kafka:{config.get('kafka', {}).get('version')}" if kind == "kafka" else kind


def registrations(run: Path, system: str) -> list[tuple[float, int]]:
    """(run-clock seconds, broker id) of every registration with the controller."""
    if system in ("embedded", "sim"):
        return [(e["time"] / 1e9, e["broker"]) for e in events(run / "events.jsonl")
                if e.get("kind") == "broker-registered"]
    started = json.loads((run / "test.json").read_text())["started_at"]
    lines = (run / "nodes" / "n1" / "node.log").read_text(errors="replace").splitlines()
    return [(ts - started, int(r.group(1))) for ts, message in log_lines(lines)
            if (r := _REGISTER.search(message))]


def in_isr(run: Path) -> list[tuple[float, frozenset[int]]]:
    return [(e["time"] / 1e9, frozenset(e["isr"])) for e in events(run / "events.jsonl")
            if e.get("kind") == "partition-change" and e.get("partition") == 0]


def restarts(run: Path) -> list[tuple[str, str, float, float | None, float | None]]:
    """(kind, node, started at, seconds to register, seconds to rejoin the ISR)."""
    system = system_of(run)
    regs, isrs = registrations(run, system), in_isr(run)
    out = []
    for op in history(run / "history.jsonl"):
        f = op.get("f", "")
        if op.get("process") != "nemesis" or not f.startswith("stop-") or f[5:] not in RESTARTING:
            continue
        t = op["time"] / 1e9
        for node in op["value"].get("nodes", []):
            broker = int(node[1:]) - 1
            if broker < 1:
                continue
            reg = next((rt - t for rt, b in regs if b == broker and rt >= t), None)
            back = next((it - t for it, isr in isrs if it >= t and broker in isr), None)
            out.append((f[5:], node, t, reg, back))
    return out


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    args = ap.parse_args()
    reg, back = defaultdict(list), defaultdict(list)
    for run in run_folders(args.paths):
        system = system_of(run)
        for kind, node, t, r, b in restarts(run):
            print(f"{run.parent.name}/{run.name} {system} {kind} {node} at {t:.2f}: "
                  f"registered {'-' if r is None else f'{r:.2f} s'}, "
                  f"in the ISR {'-' if b is None else f'{b:.2f} s'}")
            if r is not None:
                reg[system].append(r)
            if b is not None:
                back[system].append(b)
    for system in sorted(set(reg) | set(back)):
        print(f"{system}: registered {summary(reg[system])}; back in the ISR {summary(back[system])}")


if __name__ == "__main__":
    main()
