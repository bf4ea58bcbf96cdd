"""Hand-built histories for the checker tests: a writer of history.jsonl files, and merging
many small scenarios into one history checked at once."""

from __future__ import annotations

import json
from pathlib import Path

from checkers.check import check_path


class History:
    """Builds history.jsonl line by line; each op gets the next index and a later time."""

    def __init__(self) -> None:
        self.ops: list[dict] = []

    def _op(self, **fields) -> dict:
        op = {"index": len(self.ops), "time": (len(self.ops) + 1) * 1_000_000, **fields}
        self.ops.append(op)
        return op

    def operation(self, process, txn, sends) -> None:
        """One operation of several sends [(partition, value, offset), ...] (ok), as a Jepsen
        op becomes in our history: consecutive ops with one `txn`, which all share the
        operation's invoke and completion times."""
        start, end = (len(self.ops) + 1) * 1_000_000, (len(self.ops) + 2 * len(sends)) * 1_000_000
        for partition, value, offset in sends:
            self._op(process=process, type="invoke", f="send", partition=partition,
                     value=value, txn=txn, time=start)
            self._op(process=process, type="ok", f="send", partition=partition, value=value,
                     offset=offset, node=1, epoch=1, txn=txn, time=end)

    def invoke_send(self, process, partition, value) -> None:
        self._op(process=process, type="invoke", f="send", partition=partition, value=value)

    def complete_send(self, process, partition, value, offset=None, type="ok", node=1, epoch=1,
                      error=None) -> None:  # fmt: skip
        op = {"process": process, "type": type, "f": "send", "partition": partition,
              "value": value}  # fmt: skip
        if type == "ok":
            op.update(offset=offset, node=node, epoch=epoch)
        if error:
            op["error"] = error
        self._op(**op)

    def send(self, process, partition, value, offset=None, type="ok", **kw) -> None:
        self.invoke_send(process, partition, value)
        self.complete_send(process, partition, value, offset, type, **kw)

    def invoke_poll(self, process, partition, from_offset=None, f="poll") -> None:
        op = {"process": process, "type": "invoke", "f": f, "partition": partition}
        if from_offset is not None:
            op["offset"] = from_offset
        self._op(**op)

    def complete_poll(self, process, partition, records, hwm=None, f="poll") -> None:
        op = {"process": process, "type": "ok", "f": f, "partition": partition,
              "records": [list(r) for r in records]}  # fmt: skip
        if hwm is not None:
            op["hwm"] = hwm
        self._op(**op)

    def poll(self, process, partition, records, from_offset=None, hwm=None, f="poll") -> None:
        self.invoke_poll(process, partition, from_offset, f)
        self.complete_poll(process, partition, records, hwm, f)

    def final(self, process, partition, records, hwm=None, from_offset=0) -> None:
        if hwm is None:
            hwm = records[-1][0] + 1 if records else 0
        self.poll(process, partition, records, from_offset, hwm, f="final-poll")

    def nemesis(self, f, value=None) -> None:
        self._op(process="nemesis", type="info", f=f, value=value)

    def write(self, run_dir: Path, config: dict | None = None) -> Path:
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "history.jsonl", "w") as fh:
            for op in self.ops:
                fh.write(json.dumps(op) + "\n")
        if config is not None:
            (run_dir / "test.json").write_text(json.dumps({"name": "t", "config": config}))
        return run_dir


def run_check(history: History, tmp_path: Path, config: dict | None = None) -> dict:
    return check_path(history.write(tmp_path / "run", config))


def counts(results: dict) -> dict[str, int]:
    return {name: a["count"] for name, a in results["anomalies"].items()}


# -- many scenarios, one Spark job ------------------------------------------------------
# A Spark check costs seconds of fixed overhead however small the history, so the scenario
# tests merge every hand-built history into one "zoo" (disjoint partitions, processes and
# values), check it once, and look at each scenario's slice of the results.

PART_STRIDE = 100
VALUE_STRIDE = 1_000_000
TIME_STRIDE = 10**12


def merge(histories: list[History]) -> History:
    zoo = History()
    for sid, h in enumerate(histories):
        for op in json.loads(json.dumps(h.ops)):
            del op["index"]
            op["time"] += sid * TIME_STRIDE  # each scenario keeps its own times
            if op["process"] != "nemesis":
                op["process"] = f"s{sid}.{op['process']}"
            if "partition" in op:
                op["partition"] += sid * PART_STRIDE
            if isinstance(op.get("value"), int):
                op["value"] += sid * VALUE_STRIDE
            if "records" in op:
                op["records"] = [[o, v + sid * VALUE_STRIDE] for o, v in op["records"]]
            zoo._op(**op)
    return zoo


def _unmap(x, sid: int):
    if isinstance(x, list):
        return [_unmap(v, sid) for v in x]
    if not isinstance(x, dict):
        return x
    out = {}
    for k, v in x.items():
        if k == "partition" and v is not None:
            v -= sid * PART_STRIDE
        elif k == "value" and isinstance(v, int):
            v -= sid * VALUE_STRIDE
        elif k == "process" and isinstance(v, str):
            v = v.removeprefix(f"s{sid}.")
        out[k] = _unmap(v, sid)
    return out


def scenario_view(out, sid: int) -> dict[str, list[dict]]:
    """Anomaly examples (all of them: the zoo is checked uncapped) of scenario `sid`."""
    from checkers.verdict import classify_unread, records

    lo, hi = sid * PART_STRIDE, (sid + 1) * PART_STRIDE
    view = {
        name: [_unmap(e, sid) for e in examples if lo <= e["partition"] < hi]
        for name, (_, examples) in out.anomalies.items()
    }
    unread = classify_unread(out)
    mine = unread[(unread["partition"] >= lo) & (unread["partition"] < hi)]
    for kind in ("lost-write", "unseen", "unconfirmed"):
        view[kind] = [_unmap(r, sid) for r in records(mine[mine["kind"] == kind])]
    return {k: v for k, v in view.items() if v}
