"""Single-process pandas implementation of the same checks (definitions.py).

Two uses: the baseline the Spark path is benchmarked against (benchmarks/
checker_throughput.py), and an independent second implementation the tests compare the
Spark results with. It must stay a fair, vectorised implementation, not a straw man.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from checkers.definitions import EXAMPLES, READ_FS
from checkers.verdict import UNREAD_COLUMNS, CheckOutput, py_scalar, records

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
        self.ops = pd.read_parquet(ops_path)
        self.reads = pd.read_parquet(reads_path)
        sends = self.ops[self.ops["f"] == "send"]
        self.sends = sends
        acked = sends[(sends["type"] == "ok") & sends["offset"].notna()]
        self.acked = pd.DataFrame(
            {
                P: acked[P].astype("int32"),
                "value": acked["value"].astype("int64"),
                "offset": acked["offset"].astype("int64"),
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

    def _multi(self, keys: list[str]) -> pd.DataFrame:
        n = self.cells.groupby(keys, sort=False)[keys[0]].transform("size")
        return self.cells[n > 1]

    def inconsistent_offsets(self) -> pd.DataFrame:
        return _nested(self._multi([P, "offset"]), [P, "offset"], ["value", "first_op"], "values")

    def duplicate(self) -> pd.DataFrame:
        return _nested(self._multi([P, "value"]), [P, "value"], ["offset", "first_op"], "offsets")

    def unread(self) -> pd.DataFrame:
        """As SparkChecks.unread: missing from the last final read, or never read where no
        final read completed."""
        final = self.ops[(self.ops["f"] == "final-poll") & (self.ops["type"] == "ok")]
        last_index = final.groupby(P)["index"].max()
        final_reads = self.reads[self.reads["index"].isin(set(last_index))]
        with_final = set(last_index.index)
        acked_final = self.acked[self.acked[P].isin(with_final)]
        m = acked_final.merge(final_reads[[P, "value"]].drop_duplicates(), on=[P, "value"],
                              how="left", indicator=True)
        m = m[m["_merge"] == "left_only"].drop(columns="_merge")
        max_final = final_reads.groupby(P)["offset"].max().rename("max_read_offset").reset_index()
        missing_final = m.merge(max_final, on=P, how="left")
        acked_rest = self.acked[~self.acked[P].isin(with_final)]
        u = acked_rest.merge(self.read_set, on=[P, "value"], how="left", indicator=True)
        u = u[u["_merge"] == "left_only"].drop(columns="_merge")
        max_read = self.reads.groupby(P)["offset"].max().rename("max_read_offset").reset_index()
        never_read = u.merge(max_read, on=P, how="left")
        return pd.concat([missing_final[UNREAD_COLUMNS], never_read[UNREAD_COLUMNS]], ignore_index=True)

    def read_steps(self) -> pd.DataFrame:
        r = self.reads
        seek = (r["pos"] == 0) & r["from_offset"].notna()
        start = r["from_offset"].to_numpy("float64", na_value=np.nan)
        prev = r["prev_offset"].to_numpy("float64", na_value=np.nan)
        expected = pd.Series(np.where(seek, start, prev + 1), index=r.index)
        steps = r.assign(expected=expected)
        return steps[expected.notna() & (steps["offset"] != expected)]

    @staticmethod
    def nonmonotonic_poll(steps: pd.DataFrame) -> pd.DataFrame:
        s = steps[steps["offset"] < steps["expected"]]
        s = s.rename(columns={"index": "op"})
        return s[["process", P, "op", "prev_op", "expected", "offset", "value"]]

    def poll_skip(self, steps: pd.DataFrame) -> pd.DataFrame:
        known = self.cells[[P, "offset"]].drop_duplicates().sort_values([P, "offset"])
        known["prev_known"] = known.groupby(P)["offset"].shift(1)
        jumps = steps[steps["offset"] > steps["expected"]].merge(known, on=[P, "offset"])
        s = jumps[jumps["prev_known"] >= jumps["expected"]]
        s = s.rename(columns={"index": "op", "prev_known": "skipped_offset"})
        return s[["process", P, "op", "prev_op", "expected", "offset", "skipped_offset"]]

    def nonmonotonic_send(self) -> pd.DataFrame:
        a = self.sends[self.sends["type"] == "ok"]
        a = a[a["offset"] <= a["prev_ack_offset"]]
        a = a.rename(columns={"index": "op", "prev_ack_op": "prev_op",
                              "prev_ack_offset": "prev_offset"})  # fmt: skip
        return a[["process", P, "op", "offset", "prev_op", "prev_offset"]]

    def aborted_read(self) -> pd.DataFrame:
        s = self.sends
        failed = s.loc[s["type"] == "fail", ["value", "index", "error"]]
        done = set(s.loc[s["type"].isin(["ok", "info"]), "value"])
        failed = failed[~failed["value"].isin(done)].rename(columns={"index": "fail_op"})
        hit = self.cells[self.cells["read"]].merge(failed, on="value")
        hit = hit.rename(columns={"first_op": "read_op"})
        return hit[[P, "offset", "value", "read_op", "fail_op", "error"]]

    # -- stale reads -----------------------------------------------------------------

    def _polls(self) -> pd.DataFrame:
        o = self.ops
        polls = o[o["f"].isin(READ_FS) & (o["type"] == "ok") & o["invoke_time"].notna()]
        polls = polls.astype({P: "int32", "invoke_time": "int64"})
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
        gaps = gaps.assign(key=gaps["expected"].astype("int64"), hi=gaps["offset"] - 1)
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
    steps = c.read_steps()
    inconsistent = c.inconsistent_offsets()
    anomalies = {
        "inconsistent-offsets": _found(inconsistent, [P, "offset"], examples),
        "duplicate": _found(c.duplicate(), [P, "value"], examples),
        "nonmonotonic-poll": _found(c.nonmonotonic_poll(steps), ["op", "offset"], examples),
        "poll-skip": _found(c.poll_skip(steps), ["op", "offset"], examples),
        "nonmonotonic-send": _found(c.nonmonotonic_send(), ["op"], examples),
        "aborted-read": _found(c.aborted_read(), [P, "offset", "value"], examples),
        "stale-read": _found(c.stale_read(steps, inconsistent), ["op"], examples),
    }
    return CheckOutput(
        anomalies=anomalies,
        unread=c.unread(),
        complete_partitions=c.complete_partitions(),
        stats=c.stats(),
    )
