"""Each consumer judged by its isolation level and its group (checkers/txn/consumers.py):
read-uncommitted polls may see aborted and uncommitted records, read-committed ones may not;
a group must return every committed record below what it read, across its rebalances.
Hand-written histories, checked end to end by the in-process checker."""

from __future__ import annotations

import json
from pathlib import Path

from checkers.check import check_path
from checkers.txn.analysis import analyse
from checkers.txn.consumers import _marked, committed_view
from checkers.txn.ops import UNCOMMITTED, Poll, Send, Txn
from tests.support.txn_history import HistoryLines


class History(HistoryLines):
    """history.jsonl lines: transactional sends and polls, one op at a time per process."""

    def txn_send(self, outcome: str, sends: list[tuple[int, int, int]], client: int) -> None:
        """One transaction of (partition, value, offset) sends, completed as `outcome`."""
        self.txn += 1
        for mop, (p, v, _) in enumerate(sends):
            self.op(100 * client + 10 * mop + p, "invoke", "send", partition=p, value=v, txn=self.txn,
                    mop=mop, client=client)
        for mop, (p, v, o) in enumerate(sends):
            done = {"offset": o} if outcome == "ok" else {"error": "aborted-on-purpose"}
            self.op(100 * client + 10 * mop + p, outcome, "send", partition=p, value=v, txn=self.txn,
                    mop=mop, client=client, **done)

    def poll(self, process, partition, start, records, isolation="read_committed",
             group=None) -> None:
        self.txn += 1
        extra = {"isolation": isolation, **({"group": group} if group else {}),
                 **({"offset": start} if start is not None else {})}
        self.op(process, "invoke", "poll", partition=partition, txn=self.txn, mop=0, **extra)
        self.op(process, "ok", "poll", partition=partition, txn=self.txn, mop=0,
                records=records, **extra)

    def final(self, partition, records) -> None:
        self.op(999, "invoke", "final-poll", partition=partition, offset=0)
        self.op(999, "ok", "final-poll", partition=partition, offset=0, records=records,
                complete=True)

    def check(self, tmp_path: Path) -> dict:
        run = tmp_path / "run"
        run.mkdir()
        (run / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in self.lines))
        (run / "test.json").write_text(json.dumps({"topic": {"name": "t", "partitions": 1},
                                                   "workload": {"acks": "all"}}))
        return check_path(run, backend="reference")


def committed_and_aborted() -> History:
    """Offsets 0-1 an aborted transaction's records, 2 its abort marker, 3 a committed
    record (4 its commit marker)."""
    h = History()
    h.txn_send("fail", [(0, 1, 0), (0, 2, 1)], client=0)
    h.txn_send("ok", [(0, 3, 3)], client=0)
    return h


def found(results: dict) -> dict[str, int]:
    return {k: v["count"] for k, v in results["anomalies"].items() if v["count"]}


def test_a_read_uncommitted_consumer_may_read_an_aborted_transaction(tmp_path):
    h = committed_and_aborted()
    h.poll(1, 0, 0, [[0, 1], [1, 2], [3, 3]], isolation=UNCOMMITTED)
    h.final(0, [[3, 3]])
    results = h.check(tmp_path)
    assert results["valid"] is True, results["anomalies"]
    assert results["stats"]["transactions"]["read_uncommitted"] == {
        "polls": 1, "records": 3, "aborted": 2, "before_commit": 0}


def test_a_read_committed_consumer_reading_it_is_an_aborted_read(tmp_path):
    h = committed_and_aborted()
    h.poll(1, 0, 0, [[0, 1], [1, 2], [3, 3]])
    h.final(0, [[3, 3]])
    results = h.check(tmp_path)
    # (the final read then "skips" what that read showed at 0-1: the per-partition checks'
    # poll-skip, a consequence of the aborted read)
    assert results["valid"] is False and found(results)["aborted-read"] == 2


def test_an_info_transaction_read_only_uncommitted_is_not_taken_as_committed(tmp_path):
    h = History()
    h.txn += 1
    h.op(0, "invoke", "send", partition=0, value=7, txn=h.txn, mop=0, client=0)
    h.op(0, "info", "send", partition=0, value=7, txn=h.txn, mop=0, client=0, error="timeout")
    h.txn_send("ok", [(0, 8, 2)], client=1)
    h.poll(1, 0, 0, [[0, 7], [2, 8]], isolation=UNCOMMITTED)  # 7 in the log, then aborted
    h.final(0, [[2, 8]])
    results = h.check(tmp_path)
    # taken as committed by that read, its absence from the final read would be a lost write
    assert results["valid"] is True and found(results) == {}


def test_read_uncommitted_polls_are_judged_against_the_log(tmp_path):
    h = committed_and_aborted()
    h.txn_send("ok", [(0, 5, 5)], client=0)
    h.poll(1, 0, 0, [[0, 1], [3, 3], [5, 9]], isolation=UNCOMMITTED)  # 9 where the log has 5
    h.poll(1, 0, 3, [[5, 5]], isolation=UNCOMMITTED)  # jumps over 3 from where it asked
    h.poll(1, 0, 5, [[3, 3]], isolation=UNCOMMITTED)  # below where it asked
    h.final(0, [[3, 3], [5, 5]])
    results = h.check(tmp_path)
    assert found(results) == {"inconsistent-offsets": 1, "poll-skip": 1,
                              "nonmonotonic-poll": 1}
    [skip] = results["anomalies"]["poll-skip"]["examples"]
    assert skip["isolation"] == UNCOMMITTED and skip["skipped_offsets"] == [3]


def test_the_per_partition_checks_read_the_history_without_uncommitted_records(tmp_path):
    h = committed_and_aborted()
    h.poll(1, 0, 0, [[0, 1]], isolation=UNCOMMITTED)
    h.poll(2, 0, 0, [[3, 3]])
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in h.lines))
    view = committed_view(path, tmp_path)
    lines = [json.loads(x) for x in view.read_text().splitlines()]
    assert len(lines) == len(h.lines)  # every line kept: indexes stay as they were
    assert [x.get("records") for x in lines if x["type"] == "ok" and x["f"] == "poll"] == [
        [], [[3, 3]]]
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps(x) + "\n" for x in h.lines[:4]))
    assert committed_view(plain, tmp_path) == plain  # nothing to take out: no copy


def test_a_read_uncommitted_mark_is_found_wherever_the_blocks_split_it(tmp_path):
    path = tmp_path / "history.jsonl"
    line = b'{"f": "poll", "isolation": "read_uncommitted", "records": []}\n'
    path.write_bytes(line)
    assert all(_marked(path, block) for block in range(1, len(line) + 1))
    path.write_bytes(line.replace(b"read_uncommitted", b"read_committed"))  # twin: no mark
    assert not any(_marked(path, block) for block in range(1, len(line) + 1))


def group_poll(tid, process, key, records):
    return Txn(tid, str(process), "ok", tid * 10, tid * 10 + 5, [],
               [Poll(0, key, records, str(process), group="g")])


def committed(offsets):
    return Txn(0, "producer", "ok", 0, 1, [Send(i, 0, 100 + o, o) for i, o in
                                           enumerate(offsets)])


def test_a_group_must_return_every_committed_record_below_what_it_read():
    writes = committed([0, 1, 2, 3, 4])
    # member a reads 0-1, the partition moves to b, which resumes at 3: 2 is never returned
    found_ = analyse([writes, group_poll(1, "a", 0, [(0, 100), (1, 101)]),
                      group_poll(2, "b", 0, [(3, 103), (4, 104)])]).found
    count, [example] = found_["poll-skip"]
    assert count == 1 and example["skipped"] == [[2, 102]] and example["group"] == "g"


def test_a_group_returning_records_twice_across_a_rebalance_is_at_least_once():
    writes = committed([0, 1, 2])
    f = analyse([writes, group_poll(1, "a", 0, [(0, 100), (1, 101)]),
                 group_poll(2, "b", 0, [(1, 101), (2, 102)])])
    assert "poll-skip" not in f.found and "nonmonotonic-poll" not in f.found
    assert f.stats["group_redelivered"] == 1


def test_a_group_is_not_blamed_for_records_beyond_what_it_read_or_lost_ones():
    writes = committed([0, 1, 2, 3])
    final = Txn(9, "final", "ok", 90, 95, [],
                [Poll(0, 0, [(0, 100), (2, 102), (3, 103)], "final", final=True)])
    f = analyse([writes, final, group_poll(1, "a", 0, [(0, 100), (2, 102)])])
    # 1 is gone from the final read (the loss check reports it), 3 is past what it read
    assert "poll-skip" not in f.found
