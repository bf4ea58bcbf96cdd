"""The transactional checks (checkers/txn): the graph search, each cycle class, the budget,
the evidence of failed polls, the drawing, and transactions read back from a history."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest

from checkers.txn.analysis import analyse
from checkers.txn.draw import cycle_svg, is_cycle
from checkers.txn.graph import WR, WW, Graph, components, cycle_in, spans
from checkers.txn.hook import drop_witnessed, merge
from checkers.txn.ops import Poll, Send, Txn, load, read_txns


def txn(tid, process, invoke, complete, sends=(), polls=(), type_="ok"):
    """A transaction: sends (key, value, offset), polls {key: [(offset, value)]}."""
    return Txn(tid, str(process), type_, invoke, complete,
               [Send(i, k, v, o) for i, (k, v, o) in enumerate(sends)],
               [Poll(len(sends) + i, k, list(rs), str(process))
                for i, (k, rs) in enumerate(dict(polls).items())])


def test_components_of_a_long_chain_with_a_back_edge_without_recursion():
    n = 50_000
    g = Graph(n + 10)
    for i in range(n - 1):
        g.link(i, i + 1, WW)
    g.link(n - 1, 0, WR)
    g.link(n + 1, n + 2, WW)  # outside any cycle
    [scc] = components(g, WW | WR)
    assert sorted(scc) == list(range(n))
    assert components(g, WW) == []  # without the wr edge, no cycle
    steps = cycle_in(g, scc, WW | WR, (WR,))
    assert len(steps) == n and steps[0][2] == WR


def test_a_cycle_that_comes_down_by_two_back_edges_meeting_at_one_node_is_found():
    """A(0) -> C(2) forward, C -> B(1) and B -> A back: the back intervals [1, 2] and [0, 1]
    only touch, at B, and the cycle spans both (a merge of overlapping intervals alone would
    miss it)."""
    g = Graph(3)
    g.link(0, 2, WW)
    g.link(2, 1, WR)
    g.link(1, 0, WW)
    assert spans(g, WW | WR) == [(0, 2)]
    assert [sorted(c) for c in components(g, WW | WR)] == [[0, 1, 2]]


def _reachable(n: int, edges: list[tuple[int, int]]) -> list[set[int]]:
    reach = [{b for a, b in edges if a == v} for v in range(n)]
    for k in range(n):  # Warshall's transitive closure
        for v in range(n):
            if k in reach[v]:
                reach[v] |= reach[k]
    return reach


@pytest.mark.parametrize("seed", range(40))
def test_components_within_spans_are_every_strongly_connected_component(seed):
    """Against mutual reachability on random graphs whose ranks most edges follow forward,
    with a few back edges (as a history's): the same components of more than one node."""
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    rank = list(range(n))
    rng.shuffle(rank)
    by_rank = sorted(range(n), key=rank.__getitem__)
    edges = set()
    for _ in range(rng.randint(1, 3 * n)):
        i, j = sorted(rng.sample(range(n), 2))
        edges.add((by_rank[i], by_rank[j]))  # forward
    for _ in range(rng.randint(0, 4)):
        i, j = sorted(rng.sample(range(n), 2))
        edges.add((by_rank[j], by_rank[i]))  # back
    g = Graph(n, rank)
    for a, b in sorted(edges):
        g.link(a, b, WW if (a + b) % 2 else WR)
    reach = _reachable(n, sorted(edges))
    expected = {frozenset(v for v in range(n) if v == u or (v in reach[u] and u in reach[v]))
                for u in range(n)}
    assert {frozenset(c) for c in components(g, WW | WR)} == {c for c in expected
                                                               if len(c) > 1}


def test_a_rank_that_is_not_a_permutation_is_refused():
    with pytest.raises(ValueError, match="permutation"):
        Graph(3, [0, 0, 2])
    with pytest.raises(ValueError, match="permutation"):
        Graph(2, [0, 1, 2])


def test_a_reported_cycle_names_the_keys_and_values_of_its_edges():
    """The explanations are looked up when a cycle is reported: for ww the key and the place
    where one transaction's value is followed by the other's, for wr the value read."""
    t1 = txn(1, 0, 0, 10, sends=[(5, 1, 0), (6, 2, 1)])
    t2 = txn(2, 1, 1, 11, sends=[(5, 3, 1), (6, 4, 0)])  # t1 first on key 5, t2 on key 6
    [g0] = analyse([t1, t2], ww=True).found["G0"][1]
    assert sorted((s["key"], s["value"], s["value'"]) for s in g0["steps"]) == [
        (5, 1, 3), (6, 4, 2)]
    t3 = txn(3, 0, 0, 10, sends=[(8, 50, 0)], polls={9: [(0, 60)]})
    t4 = txn(4, 1, 1, 11, sends=[(9, 60, 0)], polls={8: [(0, 50)]})
    [g1c] = analyse([t3, t4]).found["G1c"][1]
    assert sorted((s["type"], s["key"], s["value"]) for s in g1c["steps"]) == [
        ("wr", 8, 50), ("wr", 9, 60)]


def test_g0_process_needs_the_process_edge_and_two_keys():
    t1 = txn(1, 0, 0, 10, sends=[(0, 1, 1)])  # x=1 at 1
    t2 = txn(2, 1, 1, 30, sends=[(0, 2, 0), (1, 2, 1)])  # x=2 at 0, y=2 at 1
    t3 = txn(3, 0, 11, 20, sends=[(1, 3, 0)])  # y=3 at 0, after t1 on client 0
    assert analyse([t1, t2, t3]).found == {}  # Kafka interleaves: no ww edges by default
    f = analyse([t1, t2, t3], ww=True)
    assert set(f.found) == {"G0-process"}
    [example] = f.found["G0-process"][1]
    assert {t["txn"] for t in example["cycle"]} == {1, 2, 3}
    assert sorted(s["type"] for s in example["steps"]) == ["process", "ww", "ww"]


def test_a_one_key_send_order_cycle_is_left_to_the_per_partition_checks():
    t1 = txn(1, 0, 0, 10, sends=[(0, 1, 1)])
    t2 = txn(2, 0, 11, 20, sends=[(0, 2, 0)])  # nonmonotonic-send, not also G0-process
    assert analyse([t1, t2], ww=True).found == {}


def test_a_future_read_is_g1c_realtime():
    t1 = txn(1, 0, 0, 5, sends=[(0, 1, 0)], polls={1: [(0, 2)]})  # reads y=2 ...
    t2 = txn(2, 1, 6, 9, sends=[(1, 2, 0)])  # ... which t2, invoked after t1 ended, sent
    found = analyse([t1, t2]).found
    assert list(found) == ["G1c-realtime"]
    assert [s["type"] for s in found["G1c-realtime"][1][0]["steps"]] in (
        ["realtime", "wr"], ["wr", "realtime"])


def test_a_planted_g1c_among_many_transactions_is_found_once():
    txns = [txn(i, i % 7, 2 * i, 2 * i + 100, sends=[(i % 5, i, i // 5)],
                polls={(i + 1) % 5: [((i - 4) // 5, i - 4)]} if i >= 5 else {})
            for i in range(5_000)]  # concurrent windows: reads of earlier sends only
    txns.append(txn(9_001, 100, 1, 50_000, sends=[(7, 1, 0)], polls={8: [(0, 2)]}))
    txns.append(txn(9_002, 101, 2, 50_000, sends=[(8, 2, 0)], polls={7: [(0, 1)]}))
    f = analyse(txns)
    assert {n: c for n, (c, _) in f.found.items()} == {"G1c": 1}
    assert {t["txn"] for t in f.found["G1c"][1][0]["cycle"]} == {9_001, 9_002}


def test_a_search_out_of_time_leaves_the_verdict_unknown_with_a_note():
    t1 = txn(1, 0, 0, 3, sends=[(0, 1, 0), (1, 1, 1)])
    t2 = txn(2, 1, 1, 4, sends=[(0, 2, 1), (1, 2, 0)])
    assert "G0" in analyse([t1, t2], ww=True).found
    f = analyse([t1, t2], budget_s=-1, ww=True)
    assert not f.complete and "G0" not in f.found
    results = {"valid": True, "anomalies": {}, "notes": [], "stats": {}}
    merge(results, f, [])
    assert results["valid"] == "unknown" and "not fully judged" in results["notes"][0]


def test_failed_polls_prove_records_and_a_rewind():
    sent = txn(1, 0, 0, 1, sends=[(0, v, v) for v in range(4)])
    ok = txn(2, 1, 2, 3, polls={0: [(0, 0)]})
    failed = txn(3, 1, 4, 5, polls={0: [(2, 2), (3, 3)]}, type_="fail")  # from 0 to 2
    # Nothing but its ack shows 1 was ever in the log: lost (or unconfirmed), not skipped
    assert "poll-skip" not in analyse([sent, ok, failed]).found
    other = txn(4, 2, 6, 7, polls={0: [(1, 1)]})  # a read shows it: skipped
    f = analyse([sent, ok, failed, other])
    [skip] = f.found["poll-skip"][1]
    assert skip["txns"] == [2, 3] and skip["types"] == ["ok", "fail"]
    assert f.witnessed == {(0, 2, 2), (0, 3, 3)}


def test_witnessed_records_are_not_lost_unless_a_final_read_says_so():
    t = txn(3, 1, 4, 5, polls={0: [(2, 2)], 1: [(2, 9)]}, type_="fail")
    f = analyse([t])
    unread = pd.DataFrame({"partition": [0, 1, 0], "offset": [2, 2, 5], "value": [2, 9, 5],
                           "kind": "unconfirmed"})
    kept = drop_witnessed(unread, f, {1})  # partition 1's final read completed
    assert kept[["partition", "value"]].values.tolist() == [[1, 9], [0, 5]]


def test_the_drawing_escapes_what_the_history_wrote():
    example = {"type": "G1c", "cycle": [{"txn": "<script>", "process": 0},
                                        {"txn": 2, "process": 1}, {"txn": "<script>"}],
               "steps": [{"type": "wr", "key": "<b>", "value": 1},
                         {"type": "ww", "key": 2, "value": 3, "value'": 4}]}
    assert is_cycle(example) and not is_cycle({"cycle": [], "steps": []})
    svg = str(cycle_svg(example))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "&lt;b&gt;" in svg
    assert svg.startswith("<svg") and svg.count("<line") == 2 and "3 &lt; 4" in svg


def test_transactions_read_back_from_a_translated_history(tmp_path):
    from checkers.jepsen_kafka import translate
    from tests.checkers.test_jepsen_kafka_suite import edn_history, op, poll, send

    ops = [op(0, 0, "invoke", "txn", [send("x", 1), poll()]),
           op(1, 0, "fail", "txn", [send("x", 1), poll({"y": [(4, 7), (5, 8)]})])]
    path = tmp_path / "h.edn"
    path.write_text(edn_history(ops))
    run = translate(path, tmp_path / "run")
    lines = [json.loads(x) for x in (run / "history.jsonl").read_text().splitlines()]
    failed_poll = [e for e in lines if e["f"] == "poll" and e["type"] == "fail"]
    assert failed_poll and failed_poll[0]["records"] == [[4, 7], [5, 8]]
    assert failed_poll[0]["error"] == "fail" and failed_poll[0]["mop"] == 1
    [t] = load(run / "history.jsonl")
    assert (t.id, t.type, [(s.key, s.value, s.offset) for s in t.sends]) == (
        1, "fail", [(0, 1, None)])
    assert [(p.key, p.records) for p in t.polls] == [(1, [(4, 7), (5, 8)])]


def test_a_crashed_transaction_read_in_part_is_torn_when_a_final_read_misses_the_rest():
    crashed = txn(1, 0, 0, None, sends=[(0, 10, None), (1, 11, None)], type_="info")
    reader = txn(2, 1, 5, 6, polls={0: [(0, 10)]})  # proves the transaction committed
    final = txn(3, 2, 7, 8, polls={1: [(0, 12)]})
    final.polls[0].final = True
    [torn] = analyse([crashed, reader, final]).found["torn-transaction"][1]
    assert (torn["txn"], torn["partition"], torn["value"], torn["read"]) == (1, 1, 11, [[0, 10]])
    final.polls[0].records.append((1, 11))
    assert "torn-transaction" not in analyse([crashed, reader, final]).found
    reader.type = "fail"  # a failed poll proves the record was in the log, not the commit
    final.polls[0].records.pop()
    assert "torn-transaction" not in analyse([crashed, reader, final]).found


def test_ops_without_txn_never_join_a_transaction():
    lines = [{"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "send", "partition": 0,
              "value": 1, "txn": 1, "mop": 0},
             {"index": 1, "time": 1, "process": 0, "type": "ok", "f": "send", "partition": 0,
              "value": 1, "txn": 1, "mop": 0, "offset": 0},
             {"index": 2, "time": 2, "process": 9, "type": "invoke", "f": "final-poll",
              "partition": 0, "offset": 0},
             {"index": 1, "time": 3, "process": 9, "type": "ok", "f": "final-poll",
              "partition": 0, "offset": 0, "records": [[0, 1]], "complete": True}]
    sent, final = read_txns(lines)  # the final read's index 1 is not transaction 1
    assert (sent.id, len(sent.sends), sent.polls) == (1, 1, [])
    assert final.id == 3 and final.polls[0].final and final.polls[0].records == [(0, 1)]


def test_a_client_goes_on_under_a_new_jepsen_process_after_a_crash():
    from checkers.linear.edn import Keyword as K
    from checkers.txn.edn_export import jepsen_ops

    def part(index, time, process, type_, txn_id, **extra):
        return {"index": index, "time": time, "process": process, "type": type_, "f": "send",
                "partition": 0, "value": txn_id, "txn": txn_id, "mop": 0, "client": 7, **extra}

    lines = [part(0, 0, 1, "invoke", 1), part(1, 5, 1, "info", 1, error="timeout"),
             part(2, 6, 2, "invoke", 2), part(3, 9, 2, "ok", 2, offset=4)]
    ops = jepsen_ops(read_txns(lines))
    assert [(o[K("type")], o[K("process")], o[K("time")]) for o in ops] == [
        ("invoke", 0, 0), ("info", 0, 5), ("invoke", 1, 6), ("ok", 1, 9)]
    assert ops[3][K("value")] == ((K("send"), 0, (4, 2)),) and ops[0][K("f")] == "send"
