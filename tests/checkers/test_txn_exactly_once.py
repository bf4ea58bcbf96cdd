"""Exactly-once delivery through a consume-transform-produce group (checkers/txn/exactly_once.py),
judged on hand-made histories checked end to end (`check_path`): one input partition (0), its
output partition (1, the history's number for the output topic's partition 0), a transformer
whose transactions poll 0 as a member of group "ctp" and send to 1 records naming their
sources. Each anomaly has its twin history that differs by the one fault, and must pass."""

from __future__ import annotations

import json
from pathlib import Path

from checkers.check import check_path
from checkers.txn.exactly_once import history_partitions
from runformat.run_config import RunConfig
from tests.support.txn_history import HistoryLines

GROUP = "ctp"


class History(HistoryLines):
    """history.jsonl lines: every part of a transaction invoked, then every part completed."""

    def parts(self, outcome: str, parts: list[tuple[int, str, dict, dict]]) -> None:
        """One transaction: (process, f, invoke fields, completion fields) a part."""
        self.txn += 1
        for mop, (process, f, fields, _) in enumerate(parts):
            self.op(process, "invoke", f, txn=self.txn, mop=mop, **fields)
        for mop, (process, f, fields, done) in enumerate(parts):
            error = {} if outcome == "ok" else {"error": "aborted-on-purpose"}
            self.op(process, outcome, f, txn=self.txn, mop=mop, **fields, **done, **error)

    def produce(self, value: int, offset: int) -> None:
        """A committed input record, sent by client 0."""
        self.parts("ok", [(0, "send", {"partition": 0, "value": value, "client": 0},
                           {"offset": offset})])

    def transform(self, outcome: str, records: list[list[int]], value: int, offset: int | None,
                  process: int = 10) -> None:
        """A transformer's transaction (client 1): it polls `records` of partition 0 and sends
        one record to partition 1 made of them."""
        sent = {"offset": offset} if outcome == "ok" else {}
        sources = [[0, o, v] for o, v in records]
        self.parts(outcome, [
            (process, "poll", {"partition": 0, "isolation": "read_committed", "group": GROUP,
                               "client": 1}, {"records": records}),
            (process + 1, "send", {"partition": 1, "value": value, "client": 1,
                                   "sources": sources}, sent)])

    def poll(self, partition: int, start: int, records: list[list[int]]) -> None:
        self.parts("ok", [(50, "poll", {"partition": partition, "offset": start,
                                        "isolation": "read_committed"}, {"records": records})])

    def final(self, partition: int, records: list[list[int]]) -> None:
        self.op(99, "invoke", "final-poll", partition=partition, offset=0)
        self.op(99, "ok", "final-poll", partition=partition, offset=0, records=records,
                complete=True)

    def check(self, tmp_path: Path, transformers: int = 1) -> dict:
        run = tmp_path / "run"
        run.mkdir()
        (run / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in self.lines))
        (run / "test.json").write_text(json.dumps({"config": {
            "topic": {"name": "t", "partitions": 1},
            "workload": {"acks": "all", "kind": "txn", "transformers": transformers}}}))
        return check_path(run, backend="reference")


def inputs() -> History:
    h = History()
    for offset, value in enumerate((1, 2, 3)):
        h.produce(value, offset)
    return h


def transformed_once(h: History) -> History:
    """1 and 2 transformed into 101 (committed); 3 into 102, aborted on purpose, then again
    into 103 (committed) after the transformer went back to its committed position."""
    h.transform("ok", [[0, 1], [1, 2]], 101, 0)
    h.transform("fail", [[2, 3]], 102, None)  # 102 at offset 1, its abort marker at 2
    h.transform("ok", [[2, 3]], 103, 3)
    return h


def found(results: dict) -> dict[str, int]:
    return {k: v["count"] for k, v in results["anomalies"].items() if v["count"]}


def test_each_input_transformed_once_through_an_abort_is_exactly_once(tmp_path):
    h = transformed_once(inputs())
    h.final(0, [[0, 1], [1, 2], [2, 3]])
    h.final(1, [[0, 101], [3, 103]])
    results = h.check(tmp_path)
    assert results["valid"] is True and found(results) == {}, results["anomalies"]
    assert results["stats"]["transactions"]["exactly_once"] == {
        "transactions": 3, "committed": 2, "outputs": 2, "inputs": 3, "lost": 0,
        "duplicated": 0, "past_position": 0}


def test_an_input_in_two_committed_outputs_is_a_duplicate_output(tmp_path):
    h = inputs()
    h.transform("ok", [[0, 1], [1, 2]], 101, 0)
    h.transform("ok", [[2, 3]], 102, 1)  # committed by a zombie ...
    h.transform("ok", [[2, 3]], 103, 3, process=20)  # ... and again by the member after it
    h.final(0, [[0, 1], [1, 2], [2, 3]])
    h.final(1, [[0, 101], [1, 102], [3, 103]])
    results = h.check(tmp_path)
    assert results["valid"] is False and found(results) == {"duplicate-output": 1}
    [dup] = results["anomalies"]["duplicate-output"]["examples"]
    assert (dup["partition"], dup["value"]) == (0, 3)
    assert sorted(o["value"] for o in dup["outputs"]) == [102, 103]


def test_an_aborted_output_is_not_a_duplicate(tmp_path):
    h = inputs()
    h.transform("ok", [[0, 1], [1, 2]], 101, 0)
    h.transform("fail", [[2, 3]], 102, None)
    h.transform("ok", [[2, 3]], 103, 3, process=20)
    h.final(0, [[0, 1], [1, 2], [2, 3]])
    h.final(1, [[0, 101], [3, 103]])
    assert found(h.check(tmp_path)) == {}


def test_an_input_below_the_committed_position_without_output_is_a_lost_output(tmp_path):
    h = inputs()
    h.produce(4, 3)
    h.transform("ok", [[0, 1], [1, 2]], 101, 0)
    h.transform("fail", [[2, 3]], 102, None)
    h.transform("ok", [[3, 4]], 104, 3, process=20)  # went on past 3 without going back
    h.final(0, [[0, 1], [1, 2], [2, 3], [3, 4]])
    h.final(1, [[0, 101], [3, 104]])
    results = h.check(tmp_path)
    assert results["valid"] is False
    assert found(results)["lost-output"] == 1, results["anomalies"]
    [lost] = results["anomalies"]["lost-output"]["examples"]
    assert (lost["partition"], lost["offset"], lost["value"], lost["group_position"]) == (
        0, 2, 3, 4)
    # the group's own reads skipped it too: no member returned it in a committed poll
    assert found(results)["poll-skip"] == 1


def test_an_input_past_the_committed_position_is_not_lost(tmp_path):
    h = inputs()
    h.transform("ok", [[0, 1], [1, 2]], 101, 0)
    h.transform("fail", [[2, 3]], 102, None)  # the run ended before it was transformed again
    h.final(0, [[0, 1], [1, 2], [2, 3]])
    h.final(1, [[0, 101]])
    results = h.check(tmp_path)
    assert results["valid"] is True and found(results) == {}, results["anomalies"]
    assert results["stats"]["transactions"]["exactly_once"]["past_position"] == 1


def test_an_aborted_output_read_committed_is_an_aborted_read(tmp_path):
    h = transformed_once(inputs())
    h.poll(1, 0, [[0, 101], [1, 102], [3, 103]])
    h.final(0, [[0, 1], [1, 2], [2, 3]])
    h.final(1, [[0, 101], [3, 103]])
    results = h.check(tmp_path)
    assert results["valid"] is False and found(results)["aborted-read"] == 1


def test_the_output_topic_partitions_follow_the_input_ones_in_the_history():
    config = RunConfig.of({"topic": {"partitions": 3}, "workload": {"transformers": 2}})
    assert history_partitions(config) == 6
    assert history_partitions(RunConfig.of({"topic": {"partitions": 3}, "workload": {}})) == 3
    assert history_partitions(RunConfig()) is None


def test_without_transformers_an_output_partition_is_out_of_range(tmp_path):
    h = transformed_once(inputs())
    results = h.check(tmp_path, transformers=0)
    assert results["valid"] == "unknown" and "partition" in results["errors"][0], results


def test_a_crashed_transaction_that_committed_is_neither_lost_nor_skipped(tmp_path):
    h = inputs()
    h.produce(4, 3)
    h.transform("ok", [[0, 1], [1, 2]], 101, 0)
    h.transform("info", [[2, 3]], 102, None)  # its commit timed out, yet it committed ...
    h.transform("ok", [[3, 4]], 104, 3, process=20)  # ... so the next member went on after it
    h.final(0, [[0, 1], [1, 2], [2, 3], [3, 4]])
    h.final(1, [[0, 101], [1, 102], [3, 104]])
    results = h.check(tmp_path)
    assert results["valid"] is True and found(results) == {}, results["anomalies"]
    assert results["stats"]["transactions"]["exactly_once"]["committed"] == 3


def test_a_crashed_transaction_that_did_not_commit_leaves_its_inputs_lost(tmp_path):
    h = inputs()
    h.produce(4, 3)
    h.transform("ok", [[0, 1], [1, 2]], 101, 0)
    h.transform("info", [[2, 3]], 102, None)  # it did not commit: its output is not there
    h.transform("ok", [[3, 4]], 104, 3, process=20)  # and yet the next member skipped 3
    h.final(0, [[0, 1], [1, 2], [2, 3], [3, 4]])
    h.final(1, [[0, 101], [3, 104]])
    results = h.check(tmp_path)
    assert found(results).get("lost-output") == 1, results["anomalies"]
