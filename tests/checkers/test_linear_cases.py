"""Classic linearizability cases with known verdicts, for the WGL search and its reports."""

from __future__ import annotations

import pickle
import time

import pytest

from checkers.linear import (
    KV,
    UNKNOWN,
    Budget,
    CASRegister,
    HistoryError,
    Register,
    check,
    pair_events,
    search,
)


def h(*rows: tuple) -> list[dict]:
    """Events from (process, type, f, value) rows, indexed in order."""
    return [{"index": i, "time": i * 10, "process": p, "type": t, "f": f, "value": v}
            for i, (p, t, f, v) in enumerate(rows)]


def verdict(rows: list[dict], model=None, budget: Budget | None = None) -> dict:
    return check(pair_events(rows), model or CASRegister(), budget or Budget())


def test_concurrent_writes_with_overlapping_reads_are_linearizable():
    rows = h(
        (0, "invoke", "write", 1),
        (1, "invoke", "write", 2),
        (2, "invoke", "read", None),
        (2, "ok", "read", 2),  # write 2 took effect first...
        (1, "ok", "write", 2),
        (3, "invoke", "read", None),
        (3, "ok", "read", 1),  # ...then write 1, which was still running
        (0, "ok", "write", 1),
        (2, "invoke", "read", None),
        (2, "ok", "read", 1),
    )
    assert verdict(rows)["valid"] is True


def test_writes_cannot_flip_back_after_both_completed():
    rows = h(
        (0, "invoke", "write", 1),
        (1, "invoke", "write", 2),
        (0, "ok", "write", 1),
        (1, "ok", "write", 2),
        (2, "invoke", "read", None),
        (2, "ok", "read", 1),
        (2, "invoke", "read", None),
        (2, "ok", "read", 2),
    )
    v = verdict(rows)
    assert v["valid"] is False
    assert v["failure"]["op"]["output"] == 2
    assert v["failure"]["state"] == 1


def test_stale_read_is_reported_with_its_window():
    rows = h(
        (0, "invoke", "write", 1),
        (0, "ok", "write", 1),
        (0, "invoke", "write", 2),
        (0, "ok", "write", 2),
        (1, "invoke", "read", None),  # index 4: begins after write 2 completed
        (1, "ok", "read", 1),
    )
    v = verdict(rows, Register())
    assert v["valid"] is False
    f = v["failure"]
    assert (f["op"]["f"], f["op"]["output"], f["op"]["invoke_index"]) == ("read", 1, 4)
    assert f["state"] == 2
    assert f["linearized"] == 2
    assert [p["value"] for p in f["previous"]] == [1, 2]
    assert f["concurrent"] == []
    assert f["window"] == {"from_index": 2, "to_index": 5}


def test_lost_update_with_cas():
    rows = h(
        (0, "invoke", "write", 0),
        (0, "ok", "write", 0),
        (1, "invoke", "cas", [0, 1]),
        (2, "invoke", "cas", [0, 2]),
        (1, "ok", "cas", [0, 1]),
        (2, "ok", "cas", [0, 2]),  # both saw 0: one update was lost
    )
    v = verdict(rows)
    assert v["valid"] is False
    f = v["failure"]
    assert f["op"]["f"] == "cas" and f["concurrent"] == []
    assert f["previous"][-1]["f"] == "cas"


def test_failed_cas_did_not_happen():
    rows = h(
        (0, "invoke", "write", 0),
        (0, "ok", "write", 0),
        (1, "invoke", "cas", [0, 1]),
        (2, "invoke", "cas", [0, 2]),
        (1, "ok", "cas", [0, 1]),
        (2, "fail", "cas", [0, 2]),
        (1, "invoke", "read", None),
        (1, "ok", "read", 1),
    )
    assert verdict(rows)["valid"] is True


def test_read_of_a_never_written_value():
    rows = h(
        (0, "invoke", "write", 1),
        (1, "invoke", "read", None),
        (0, "ok", "write", 1),
        (1, "ok", "read", 7),
    )
    v = verdict(rows)
    assert v["valid"] is False
    f = v["failure"]
    assert f["op"]["output"] == 7
    # found before searching: no order of any ops explains a 7, so none is shown
    assert (v["explored"], f["linearized"], f["previous"], f["concurrent"]) == (0, 0, [], [])
    assert f["window"] == {"from_index": 1, "to_index": 3}
    assert "no op invoked before then can lead from the initial state None" in f["explanation"]


def test_a_value_is_explained_only_by_ops_invoked_before_the_read_returned():
    rows = [(0, "invoke", "write", 1), (0, "ok", "write", 1),
            (1, "invoke", "read", None), (1, "ok", "read", 1)]
    late = h(*rows, (2, "invoke", "read", None), (2, "ok", "read", 7),
             (3, "invoke", "write", 7), (3, "ok", "write", 7))
    v = verdict(late)
    assert v["valid"] is False and v["explored"] == 0
    assert v["failure"]["op"]["invoke_index"] == 4
    # the twin: the write of 7 begins before the read returns
    overlapping = h(*rows, (2, "invoke", "read", None), (3, "invoke", "write", 7),
                    (2, "ok", "read", 7), (3, "ok", "write", 7))
    assert verdict(overlapping)["valid"] is True


def test_a_cas_from_a_value_nobody_wrote_is_unexplained_even_by_itself():
    rows = [(0, "invoke", "write", 1), (0, "ok", "write", 1),
            (1, "invoke", "cas", [7, 7]), (1, "ok", "cas", [7, 7])]
    v = verdict(h(*rows))
    assert v["valid"] is False and v["explored"] == 0
    assert v["failure"]["op"]["f"] == "cas"
    assert "no op invoked before then" in v["failure"]["explanation"]
    # the twins: a write of 7 invoked before the cas returned makes it legal, one invoked
    # after does not, and a cas that timed out saw nothing
    write_7 = [(2, "invoke", "write", 7), (2, "ok", "write", 7)]
    assert verdict(h(*rows[:3], write_7[0], rows[3], write_7[1]))["valid"] is True
    assert verdict(h(*rows, *write_7))["valid"] is False
    assert verdict(h(*rows[:3], (1, "info", "cas", [7, 7])))["valid"] is True


def test_an_unexplained_read_is_found_without_trying_the_orders_of_hanging_writes():
    n = 40  # 2**40 subsets of hanging writes: a search that tried them would never end
    rows = [(p, "invoke", "write", p) for p in range(n)]
    rows += [(p, "info", "write", p) for p in range(n)]
    rows += [(n, "invoke", "write", "x"), (n, "ok", "write", "x"),
             (n + 1, "invoke", "read", None), (n + 1, "ok", "read", "y")]
    v = verdict(h(*rows), budget=Budget.of(seconds=60))  # the budget only keeps it finite
    assert v["valid"] is False and v["explored"] == 0
    assert v["failure"]["op"]["output"] == "y"


def test_initial_value_is_read_as_none():
    rows = h((0, "invoke", "read", None), (0, "ok", "read", None))
    assert verdict(rows)["valid"] is True
    assert verdict(h((0, "invoke", "read", None), (0, "ok", "read", 0)))["valid"] is False


INFO_WRITE = [(0, "invoke", "write", 1), (0, "info", "write", 1)]


@pytest.mark.parametrize("reads, valid", [
    ([1], True),  # the timed-out write took effect
    ([None], True),  # it did not (yet)
    ([None, 1], True),  # it took effect late
    ([1, None], False),  # it cannot be undone
    ([1, 1, 1], True),
])
def test_info_op_may_or_may_not_take_effect(reads, valid):
    rows = list(INFO_WRITE)
    for value in reads:
        rows += [(1, "invoke", "read", None), (1, "ok", "read", value)]
    assert verdict(h(*rows))["valid"] is valid


def test_info_op_takes_effect_only_after_its_invoke():
    rows = h(
        (1, "invoke", "read", None),
        (1, "ok", "read", 5),
        (0, "invoke", "write", 5),
        (0, "info", "write", 5),
    )
    assert verdict(rows)["valid"] is False


def test_never_completed_invoke_counts_as_info():
    rows = h((0, "invoke", "write", 3), (1, "invoke", "read", None), (1, "ok", "read", 3))
    assert verdict(rows)["valid"] is True


def test_info_cas_only_applies_when_it_matches():
    rows = h(
        (0, "invoke", "write", 0),
        (0, "ok", "write", 0),
        (1, "invoke", "cas", [5, 6]),
        (1, "info", "cas", [5, 6]),
        (2, "invoke", "read", None),
        (2, "ok", "read", 6),
    )
    assert verdict(rows)["valid"] is False


def kv_rows(bad_key: str | None) -> list[dict]:
    rows = []
    for k in ("a", "b", "c", "d"):
        stale = 1 if k == bad_key else 2
        rows += [
            (0, "invoke", "write", [k, 1]), (0, "ok", "write", [k, 1]),
            (1, "invoke", "write", [k, 2]), (2, "invoke", "read", [k, None]),
            (1, "ok", "write", [k, 2]), (2, "ok", "read", [k, 2]),
            (3, "invoke", "read", [k, None]), (3, "ok", "read", [k, stale]),
        ]
    return h(*rows)


def test_kv_finds_the_one_bad_key():
    assert verdict(kv_rows(None), KV())["valid"] is True
    v = verdict(kv_rows("c"), KV())
    assert v["valid"] is False
    assert v["partitions"] == 4
    assert v["invalid_keys"] == ["c"]
    assert v["failure"]["key"] == "c"
    assert v["failure"]["op"]["output"] == 1


def test_kv_accepts_a_key_field():
    rows = [{"process": 0, "type": t, "f": "write", "key": "x", "value": 1} for t in ("invoke", "ok")]
    rows += [{"process": 1, "type": t, "f": "read", "key": "x", "value": v}
             for t, v in (("invoke", None), ("ok", 1))]
    assert check(pair_events(rows), KV())["valid"] is True


@pytest.mark.parametrize("bad_key", [None, "b"])
def test_kv_whole_map_search_agrees_with_partitions(bad_key):
    model = KV()
    ops = model.prepare(pair_events(kv_rows(bad_key)))
    whole = search(ops, model)
    assert whole.valid is (bad_key is None)
    assert verdict(kv_rows(bad_key), KV())["valid"] is whole.valid


def hard_history(n: int) -> list[dict]:
    """n concurrent writes of distinct values and a write of "x"; a read of "x" returns, then
    a read of "y", written and returned before any of them began. Every subset of the n
    writes may precede "x", so each is a configuration the search must rule out (the read
    of "y" fails after each) before it can give up."""
    rows = [(n + 2, "invoke", "write", "y"), (n + 2, "ok", "write", "y")]
    rows += [(p, "invoke", "write", p) for p in range(n)]
    rows += [(n, "invoke", "write", "x"), (n + 1, "invoke", "read", None),
             (n + 1, "ok", "read", "x"), (n + 3, "invoke", "read", None),
             (n + 3, "ok", "read", "y"), (n, "ok", "write", "x")]
    rows += [(p, "ok", "write", p) for p in range(n)]
    return h(*rows)


def test_hard_history_is_decided_without_budget():
    v = verdict(hard_history(8))
    assert v["valid"] is False
    assert v["explored"] >= 2 ** 8 - 1


def test_state_budget_gives_unknown():
    v = verdict(hard_history(14), budget=Budget(max_states=2000))
    assert v["valid"] == "unknown"
    assert "2000" in v["unknown"]["reason"]
    assert v["failure"] is None


def test_time_budget_gives_unknown():
    v = verdict(hard_history(14), budget=Budget(deadline=time.time() - 1))
    assert v["valid"] == "unknown"
    assert v["unknown"]["reason"] == "time budget exhausted"


def test_invalid_key_beats_unknown_key():
    rows = kv_rows("a") + [dict(e, value=["z", e["value"]], index=e["index"] + 100)
                           for e in hard_history(14)]
    v = verdict(rows, KV(), Budget(max_states=5000))
    assert v["valid"] is False
    assert v["invalid_keys"] == ["a"]


@pytest.mark.parametrize("rows, message", [
    ([{"process": 0, "type": "ok", "f": "read", "value": 1}],
     "event 0: ok for process 0 without a pending invoke"),
    ([{"process": 0, "type": "invoke", "f": "read"}, {"process": 0, "type": "invoke", "f": "read"}],
     "event 1: process 0 invoked again while its op from event 0 is still pending"),
    ([{"process": 0, "type": "invoke", "f": "read"}, {"process": 0, "type": "ok", "f": "write"}],
     "event 1: completion f 'write' does not match"),
    ([{"process": 0, "type": "begin", "f": "read"}], "event 0: type 'begin' is not one of"),
    ([{"type": "invoke", "f": "read"}], "event 0: missing field 'process'"),
])
def test_malformed_histories_name_the_event(rows, message):
    with pytest.raises(HistoryError, match=message):
        pair_events(rows)


@pytest.mark.parametrize("model, rows, message", [
    (CASRegister(), [(0, "invoke", "send", 1)], r"event 0 \(index 0, process 0\): f 'send' is not"),
    (CASRegister(), [(0, "invoke", "cas", 1)], r"cas value must be \[expected, new\], got 1"),
    (KV(), [(0, "invoke", "write", 1)], r"kv op needs a `key` field or a \[key, value\] value"),
    (KV(), [(0, "invoke", "read", ["x", None]), (0, "ok", "read", ["y", 1])],
     r"completion value \['y', 1\] is not a \[key, value\] pair for key 'x'"),
    (Register(), [(0, "invoke", "write", 1)], None),
])
def test_ops_the_model_cannot_take_are_rejected(model, rows, message):
    ops = pair_events(h(*rows))
    if message is None:
        assert check(ops, model)["valid"] is True
        return
    with pytest.raises(HistoryError, match=message):
        check(ops, model)


def test_register_rejects_keyed_ops():
    rows = [{"process": 0, "type": "invoke", "f": "write", "key": "x", "value": 1}]
    with pytest.raises(HistoryError, match="check keyed histories with --model kv"):
        check(pair_events(rows), Register())


def test_nemesis_ops_are_ignored():
    rows = h((0, "invoke", "write", 1), ("nemesis", "info", "start-partition", None),
             (0, "ok", "write", 1), ("nemesis", "info", "stop-partition", None))
    v = verdict(rows)
    assert v["valid"] is True and v["ops"] == 1


def test_unknown_survives_pickling_for_spark_workers():
    assert pickle.loads(pickle.dumps(UNKNOWN)) is UNKNOWN
