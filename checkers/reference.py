"""Single-process pandas implementation of the same checks (definitions.py).

Two uses: the baseline the Spark path is benchmarked against (benchmarks/
checker_throughput.py), and an independent second implementation the tests compare the
Spark results with. It must stay a fair, vectorised implementation, not a straw man.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from checkers.definitions import EXAMPLE_ORDER, EXAMPLES, READ_FS, findings
from checkers.verdict import UNREAD_COLUMNS, CheckOutput, py_scalar, read_exact, records

P = "partition"


def _found(df: pd.DataFrame, order: list[str], cap: int) -> tuple[int, list[dict]]:
    return len(df), records(df.sort_values(order, kind="stable").head(cap))


def _nested(df: pd.DataFrame, keys: list[str], inner: list[str], name: str) -> pd.DataFrame:
    """Group rows by keys and collect `inner` columns as a sorted list of dicts."""
    if df.empty:
        return pd.DataFrame(columns=keys + [name])
    df = df.sort_values(keys + inner)
    out = df.groupby(keys, sort=True)[inner].apply(
        lambda g: [{c: py_scalar(v) for c, v in zip(inner, row, strict=True)} for row in g.values]
    )
    return out.rename(name).reset_index()


class ReferenceChecks:
    def __init__(self, ops_path: Path, reads_path: Path, acks: str) -> None:
        self.default_acks = acks
        # Integers stay exact (nullable Int64, never float64): values and offsets go past 2^53.
        self.ops = read_exact(ops_path)
        self.reads = read_exact(reads_path)
        sends = self.ops[self.ops["f"] == "send"]
        self.sends = sends
        acked = sends[(sends["type"] == "ok") & sends["offset"].notna()]
        self.acked = pd.DataFrame(
            {
                P: acked[P].astype("Int32"),
                "value": acked["value"].astype("Int64"),
                "offset": acked["offset"].astype("Int64"),
                "process": acked["process"],
                "ack_index": acked["index"],
                "ack_time": acked["time"],
                "invoke_time": acked["invoke_time"],
                "node": acked["node"],
                "epoch": acked["epoch"],
                "acks": acked["acks"].fillna(acks),
            }
        )
        obs = pd.concat(
            [
                self.reads[[P, "offset", "value", "index"]].assign(is_read=True),
                self.acked[[P, "offset", "value", "ack_index"]]
                .rename(columns={"ack_index": "index"})
                .assign(is_read=False),
            ],
            ignore_index=True,
        )
        self.cells = (
            obs.groupby([P, "offset", "value"], sort=False)
            .agg(read=("is_read", "max"), first_op=("index", "min"))
            .reset_index()
        )
        self.read_set = self.cells.loc[self.cells["read"], [P, "value"]].drop_duplicates()
        # the final state: each partition's last ok final-poll; elsewhere, every read
        o = self.ops
        final = o[(o["f"] == "final-poll") & (o["type"] == "ok") & o[P].notna()]
        self.last_final = final.groupby(P)["index"].max()
        fr = self.reads[self.reads["index"].isin(set(self.last_final))]
        in_final = fr[[P, "offset", "value"]].drop_duplicates().assign(in_final=True)
        cells = self.cells.merge(in_final, on=[P, "offset", "value"], how="left")
        has_final = cells[P].isin(set(self.last_final.index))
        cells["present"] = np.where(has_final, cells["in_final"].eq(True), cells["read"])
        self.cells = cells.drop(columns="in_final")
        # completed sends with their offsets, learned from reads where the send names none
        read_min = (self.cells[self.cells["read"]].groupby([P, "value"])["offset"].min()
                    .rename("read_offset").reset_index())
        done = sends[sends["type"].isin(["ok", "info"])].astype({P: "Int32", "value": "Int64"})
        done = done.merge(read_min, on=[P, "value"], how="left")
        # an info send has an offset only once committed (read): else it may never have been
        own = done["offset"].fillna(done["read_offset"])
        done["resolved"] = own.where((done["type"] == "ok") | done["read_offset"].notna())
        self.done = done
        self.committed = done[(done["type"] == "ok") | done["read_offset"].notna()]
        self._unread: pd.DataFrame | None = None

    def _multi(self, keys: list[str]) -> pd.DataFrame:
        n = self.cells.groupby(keys, sort=False)[keys[0]].transform("size")
        return self.cells[n > 1]

    def inconsistent_offsets(self) -> pd.DataFrame:
        return _nested(self._multi([P, "offset"]), [P, "offset"], ["value", "first_op"], "values")

    def duplicate(self) -> pd.DataFrame:
        return _nested(self._multi([P, "value"]), [P, "value"], ["offset", "first_op"], "offsets")

    def unread(self) -> pd.DataFrame:
        """As SparkChecks.unread: committed sends whose value is missing from the final state
        of their partition (never read, where no final read completed)."""
        if self._unread is not None:
            return self._unread
        present = self.cells[self.cells["present"]]
        c = self.committed.merge(present[[P, "value"]].drop_duplicates(), on=[P, "value"],
                                 how="left", indicator=True)
        c = c[c["_merge"] == "left_only"]
        max_present = present.groupby(P)["offset"].max().rename("max_read_offset").reset_index()
        u = pd.DataFrame({
            P: c[P].astype("Int32"), "value": c["value"].astype("Int64"),
            "offset": c["resolved"], "process": c["process"], "ack_index": c["index"],
            "ack_time": c["time"], "invoke_time": c["invoke_time"], "node": c["node"],
            "epoch": c["epoch"], "acks": c["acks"].fillna(self.default_acks),
        }).merge(max_present, on=P, how="left")
        self._unread = u[UNREAD_COLUMNS].reset_index(drop=True)
        return self._unread

    def known(self) -> pd.DataFrame:
        """(partition, offset) of the records known to exist, sorted, without the records
        the loss check reports (definitions.py: poll-skip)."""
        lost = self.unread()[[P, "offset", "value"]].dropna().astype({"offset": "Int64"})
        k = self.cells.merge(lost.assign(lost=True), on=[P, "offset", "value"], how="left")
        k = k.loc[k["lost"].ne(True), [P, "offset"]].drop_duplicates()
        return k.rename(columns={"offset": "k"}).astype({"k": "Int64"}).sort_values("k")

    def _in_range(self, probes: pd.DataFrame, lo: str, hi: str) -> pd.DataFrame:
        """Probes with ``skipped_offset``: the highest known offset in [lo, hi], if any."""
        if probes.empty:
            return probes.assign(skipped_offset=pd.Series(dtype="Int64"))
        p = probes.assign(_hi=probes[hi].astype("Int64")).sort_values("_hi")
        m = pd.merge_asof(p, self.known(), left_on="_hi", right_on="k", by=P,
                          direction="backward")
        m = m[m["k"].notna() & (m["k"] >= m[lo])]
        return m.rename(columns={"k": "skipped_offset"}).drop(columns="_hi")

    def read_steps(self) -> pd.DataFrame:
        r = self.reads
        seek = (r["pos"] == 0) & r["from_offset"].notna()
        expected = r["from_offset"].where(seek, r["prev_offset"] + 1)
        steps = r.assign(expected=expected)
        return steps[expected.notna() & (steps["offset"] != expected).fillna(False)]

    @staticmethod
    def nonmonotonic_poll(steps: pd.DataFrame, internal: bool) -> pd.DataFrame:
        s = steps[(steps["offset"] < steps["expected"]) & ((steps["pos"] > 0) == internal)]
        s = s.rename(columns={"index": "op"})
        return s[["process", P, "op", "prev_op", "expected", "offset", "value"]]

    def poll_skip(self, steps: pd.DataFrame, internal: bool) -> pd.DataFrame:
        jumps = steps[(steps["offset"] > steps["expected"]) & ((steps["pos"] > 0) == internal)]
        s = self._in_range(jumps.assign(hi=jumps["offset"] - 1), "expected", "hi")
        s = s.rename(columns={"index": "op"})
        return s[["process", P, "op", "prev_op", "expected", "offset", "skipped_offset"]]

    def send_steps(self) -> pd.DataFrame:
        """Each completed send with the one before it (same process and partition), both
        with known offsets; `internal` when both are parts of one operation."""
        d = self.done
        prev = d[["index", "resolved"]].rename(columns={"index": "prev_send_op",
                                                         "resolved": "prev_offset"})
        s = d[d["prev_send_op"].notna()].astype({"prev_send_op": "Int64"})
        s = s.merge(prev, on="prev_send_op")
        s = s[s["resolved"].notna() & s["prev_offset"].notna()]
        return s.assign(internal=(s["txn"] == s["prev_send_txn"]).fillna(False))

    @staticmethod
    def nonmonotonic_send(steps: pd.DataFrame, internal: bool) -> pd.DataFrame:
        a = steps[(steps["resolved"] <= steps["prev_offset"]) & (steps["internal"] == internal)]
        a = a.drop(columns="offset").rename(columns={"index": "op", "resolved": "offset", "prev_send_op": "prev_op"})
        return a[["process", P, "op", "offset", "prev_op", "prev_offset"]]

    def int_send_skip(self, steps: pd.DataFrame) -> pd.DataFrame:
        a = steps[steps["internal"] & (steps["resolved"] > steps["prev_offset"] + 1)]
        a = a.assign(lo=a["prev_offset"] + 1, hi=a["resolved"] - 1)
        a = self._in_range(a, "lo", "hi")
        a = a.drop(columns="offset").rename(columns={"index": "op", "resolved": "offset", "prev_send_op": "prev_op"})
        return a[["process", P, "op", "offset", "prev_op", "prev_offset", "skipped_offset"]]

    def realtime_send_order(self) -> pd.DataFrame:
        """Committed sends that landed below a send acknowledged before they were invoked."""
        lost = set(self.unread()["ack_index"])
        c = self.committed[self.committed["resolved"].notna() & ~self.committed["index"].isin(lost)]
        a = c[c["type"] == "ok"].sort_values(["time", "index"])
        a = a[a["resolved"] == a.groupby(P)["resolved"].cummax()]  # running-max holders
        a = a[[P, "time", "resolved", "index"]].rename(
            columns={"time": "earlier_ack_time", "resolved": "earlier_offset",
                     "index": "earlier_op"})
        b = c[c["invoke_time"].notna()].astype({"invoke_time": "Int64"}).sort_values("invoke_time")
        m = pd.merge_asof(b, a, left_on="invoke_time", right_on="earlier_ack_time", by=P,
                          allow_exact_matches=False)
        m = m[m["earlier_offset"].notna() & (m["resolved"] < m["earlier_offset"])]
        m = m.drop(columns="offset").rename(columns={"index": "op", "resolved": "offset"})
        return m[["process", P, "op", "offset", "invoke_time", "earlier_op", "earlier_offset",
                  "earlier_ack_time"]]

    def aborted_read(self) -> pd.DataFrame:
        s = self.sends
        failed = s.loc[(s["type"] == "fail") & s["value"].notna() & s[P].notna(),
                       [P, "value", "index", "error"]].astype({P: "Int32", "value": "Int64"})
        done = self.done[[P, "value"]].drop_duplicates().assign(done=True)
        failed = failed.merge(done, on=[P, "value"], how="left")
        failed = failed[failed["done"].ne(True)].drop(columns="done")
        failed = failed.rename(columns={"index": "fail_op"})
        hit = self.cells[self.cells["read"]].merge(failed, on=[P, "value"])
        hit = hit.rename(columns={"first_op": "read_op"})
        return hit[[P, "offset", "value", "read_op", "fail_op", "error"]]

    # -- stale reads -----------------------------------------------------------------

    def _polls(self) -> pd.DataFrame:
        o = self.ops
        polls = o[o["f"].isin(READ_FS) & (o["type"] == "ok") & o["invoke_time"].notna()]
        polls = polls.astype({P: "Int32", "invoke_time": "Int64"})
        return polls.rename(columns={"index": "op", "invoke_offset": "from_offset"})

    def _visible(self) -> pd.DataFrame:
        read = self.cells.loc[self.cells["read"], [P, "offset", "value"]]
        v = self.acked[self.acked["acks"] == "all"].merge(read, on=[P, "offset", "value"])
        return v.rename(columns={"ack_index": "ack_op"})

    @staticmethod
    def _missed(df: pd.DataFrame) -> pd.Series:
        cols = ["offset", "value", "ack_op", "ack_time"]
        return pd.Series(
            [dict(zip(cols, map(py_scalar, row), strict=True)) for row in df[cols].values],
            index=df.index,
            dtype=object,
        )

    def _stale_hwm(self, visible: pd.DataFrame, polls: pd.DataFrame) -> pd.DataFrame:
        v = visible.sort_values("ack_time")
        v = v[v["offset"] == v.groupby(P)["offset"].cummax()]  # running-max holders
        p = polls[polls["hwm"].notna()].sort_values("invoke_time")
        m = pd.merge_asof(
            p[["op", "process", P, "invoke_time", "from_offset", "hwm"]],
            v[[P, "ack_time", "offset", "value", "ack_op"]],
            left_on="invoke_time",
            right_on="ack_time",
            by=P,
            allow_exact_matches=False,
        )
        m = m[
            m["offset"].notna()
            & (m["hwm"] <= m["offset"])
            & (m["from_offset"].isna() | (m["from_offset"] <= m["offset"]))
        ]
        return m.assign(kind="hwm-behind", missed=self._missed(m))

    def _stale_other_value(self, visible, polls, inconsistent) -> pd.DataFrame:
        hits = self.reads.merge(inconsistent[[P, "offset"]], on=[P, "offset"])
        v = visible[[P, "offset", "value", "ack_op", "ack_time"]].rename(
            columns={"value": "sent_value"}
        )
        m = hits.merge(v, on=[P, "offset"])
        m = m[(m["value"] != m["sent_value"]) & (m["invoke_time"] > m["ack_time"])]
        m = m.drop(columns=["value", "process", P, "invoke_time", "from_offset"])
        m = m.rename(columns={"index": "op", "sent_value": "value"}).merge(polls, on="op")
        return m.assign(kind="other-value", missed=self._missed(m))

    def _stale_skipped(self, visible, polls, steps) -> pd.DataFrame:
        gaps = steps[
            (steps["offset"] > steps["expected"])
            & ((steps["pos"] > 0) | steps["from_offset"].notna())
        ]
        gaps = gaps.assign(key=gaps["expected"].astype("Int64"), hi=gaps["offset"] - 1)
        gaps = gaps[["index", "key", P, "hi"]].rename(columns={"index": "op"})
        v = visible.assign(key=visible["offset"]).sort_values("key")
        m = pd.merge_asof(
            gaps.sort_values("key"),
            v[["key", P, "offset", "value", "ack_op", "ack_time"]],
            on="key",
            by=P,
            direction="forward",
        ).merge(polls.drop(columns=[P]), on="op")
        m = m[(m["offset"] <= m["hi"]) & (m["ack_time"] < m["invoke_time"])]
        return m.assign(kind="skipped", missed=self._missed(m))

    def stale_read(self, steps: pd.DataFrame, inconsistent: pd.DataFrame) -> pd.DataFrame:
        visible, polls = self._visible(), self._polls()
        polls = polls[["op", "process", P, "invoke_time", "from_offset", "hwm"]]
        parts = [
            self._stale_hwm(visible, polls),
            self._stale_other_value(visible, polls, inconsistent),
            self._stale_skipped(visible, polls, steps),
        ]
        cols = ["op", "process", P, "invoke_time", "from_offset", "hwm", "kind", "missed"]
        found = [p[cols] for p in parts if len(p)]
        if not found:
            return pd.DataFrame(columns=cols)
        stale = pd.concat(found, ignore_index=True)
        stale["_o"] = [m["offset"] for m in stale["missed"]]
        stale["_a"] = [m["ack_op"] for m in stale["missed"]]
        stale = stale.sort_values(["op", "_o", "kind", "_a"]).drop_duplicates("op")
        return stale.drop(columns=["_o", "_a"])

    def complete_partitions(self) -> set[int]:
        o = self.ops
        final = o[(o["f"] == "final-poll") & (o["type"] == "ok") & o[P].notna()]
        fr = self.reads[self.reads["f"] == "final-poll"]
        last = fr.groupby("index")["offset"].max().rename("max_off")
        f = final.join(last, on="index")
        ok = (
            f["hwm"].isna()
            | (f["hwm"] <= 0)
            | (f["max_off"] + 1 >= f["hwm"])
            | (f["max_off"].isna() & (f["invoke_offset"] >= f["hwm"]))
        )
        return {int(p) for p in f.loc[ok, P].unique()}

    def stats(self) -> dict:
        by = self.ops.groupby(["f", "type"]).size()
        ok = self.sends[self.sends["type"] == "ok"]
        acked = ok.groupby(P).size()
        info = self.sends[self.sends["type"] == "info"].merge(self.read_set, on=[P, "value"])
        return {
            "ops": int(by.sum()),
            "ops_by_f_type": {f"{f}:{t}": int(n) for (f, t), n in sorted(by.items())},
            "reads": len(self.reads),
            "acked_by_partition": {str(int(p)): int(n) for p, n in sorted(acked.items())},
            "info_sends_read": len(info),
        }


def run(ops_path: Path, reads_path: Path, acks: str, examples: int = EXAMPLES) -> CheckOutput:
    c = ReferenceChecks(ops_path, reads_path, acks)
    found = findings(c)
    anomalies = {name: _found(df, list(EXAMPLE_ORDER[name]), examples)
                 for name, df in found.items()}
    return CheckOutput(
        anomalies=anomalies,
        unread=c.unread(),
        complete_partitions=c.complete_partitions(),
        stats=c.stats(),
    )
