"""The EDN reader and the Jepsen history importers."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest
from support.linear_simulate import simulate

from checkers.linear import KV, CASRegister, HistoryError, check, edn, pair
from checkers.linear.importers import read_edn, read_events, read_text


@pytest.mark.parametrize("text, value", [
    ("nil", None),
    ("true", True),
    ("-12", -12),
    ("+7", 7),
    ("12N", 12),
    ("1.5", 1.5),
    ("2.5M", 2.5),
    ("1e3", 1000.0),
    ("1/2", Fraction(1, 2)),
    ('"a\\"b\\n\\u00e9"', 'a"b\né'),
    ("\\a", "a"),
    ("\\newline", "\n"),
    (":invoke", "invoke"),
    ("[1 [2 3] ()]", (1, (2, 3), ())),
    ("{:a 1, :b nil}", {"a": 1, "b": None}),
    ("#{1 2}", frozenset({1, 2})),
    ("[1 #_ 2 3 #_[4]]", (1, 3)),
    ("; a comment\n [1 ; two\n 2]", (1, 2)),
    ('#inst "2024-01-01T00:00:00Z"', "2024-01-01T00:00:00Z"),
    ("#jepsen.history.Op{:index 0, :type :ok}", {"index": 0, "type": "ok"}),
    ("{[1 2] :x}", {(1, 2): "x"}),
])
def test_reads_values(text, value):
    assert edn.loads(text) == value


def test_keywords_and_symbols_keep_their_kind():
    kw, sym = edn.loads("[:f foo/bar]")
    assert isinstance(kw, edn.Keyword) and repr(kw) == ":f"
    assert isinstance(sym, edn.Symbol) and sym == "foo/bar"


@pytest.mark.parametrize("text, line, message", [
    ('[1\n2\n"abc', 3, "unterminated string"),
    ("[1 2}", 1, "unexpected '}'"),
    ("{:a 1\n :b}", 2, "odd number of forms"),
    ("[1 2", 1, "unexpected end of input, expected ']'"),
    ("1 2", 1, "trailing data"),
    ("\n\n12abc", 3, "bad number '12abc'"),
    ('"\\q"', 1, "bad string escape"),
    ("{{:a 1} 2}", 1, "unusable map key"),
])
def test_errors_name_the_line(text, line, message):
    with pytest.raises(edn.EdnError, match=message) as err:
        edn.loads(text)
    assert err.value.line == line


def test_dumps_round_trips():
    value = {edn.Keyword("type"): edn.Keyword("ok"), edn.Keyword("value"): (1, None, "s\"q"),
             edn.Keyword("set"): frozenset({1}), edn.Keyword("x"): 1.5, edn.Keyword("t"): True}
    assert edn.loads(edn.dumps(value)) == value


JEPSEN_EDN = """\
{:type :invoke, :f :write, :value 3, :process 0, :time 100, :index 0}
{:type :invoke, :f :read, :value nil, :process 1, :time 110, :index 1}
{:type :ok, :f :write, :value 3, :process 0, :time 200, :index 2}
{:type :info, :f :start, :value nil, :process :nemesis, :time 210, :index 3}
#jepsen.history.Op{:type :ok, :f :read, :value 3, :process 1, :time 300, :index 4}
{:type :invoke, :f :cas, :value [3 4], :process 0, :time 400, :index 5}
{:type :ok, :f :cas, :value [3 4], :process 0, :time 500, :index 6}
{:type :invoke, :f :read, :value nil, :process 1, :time 600, :index 7}
{:type :ok, :f :read, :value %s, :process 1, :time 700, :index 8}
"""


@pytest.mark.parametrize("last_read, valid", [("4", True), ("3", False)])
def test_jepsen_cas_register_history(tmp_path, last_read, valid):
    path = tmp_path / "history.edn"
    path.write_text(JEPSEN_EDN % last_read)
    ops = pair(read_events(path))
    assert [(op.f, op.value, op.output) for op in ops][:3] == [
        ("write", 3, 3), ("read", None, 3), ("cas", (3, 4), (3, 4))]
    v = check(ops, CASRegister())
    assert v["valid"] is valid
    if not valid:
        assert v["failure"]["op"]["invoke_index"] == 7


def test_history_as_one_vector(tmp_path):
    path = tmp_path / "history.edn"
    path.write_text("[" + (JEPSEN_EDN % "4") + "]")
    assert check(pair(read_edn(path)), CASRegister())["valid"] is True


def test_jepsen_kv_independent_tuples(tmp_path):
    path = tmp_path / "history.edn"
    path.write_text(
        "{:type :invoke, :f :write, :value [:x 1], :process 0}\n"
        "{:type :ok, :f :write, :value [:x 1], :process 0}\n"
        "{:type :invoke, :f :read, :value [:y nil], :process 1}\n"
        "{:type :ok, :f :read, :value [:y 1], :process 1}\n")
    v = check(pair(read_edn(path)), KV())
    assert v["valid"] is False and v["invalid_keys"] == ["y"]


def test_jepsen_text_history(tmp_path):
    path = tmp_path / "history.txt"
    path.write_text("0\t:invoke\t:write\t1\n0\t:ok\t:write\t1\n"
                    ":nemesis\t:info\t:start\tnil\n"
                    "1\t:invoke\t:cas\t[1 2]\n1\t:fail\t:cas\t[1 2]\t:timeout\n"
                    "1\t:invoke\t:read\tnil\n1\t:ok\t:read\t1\n")
    events = read_text(path)
    assert events[4][1]["error"] == "timeout"
    assert check(pair(events), CASRegister())["valid"] is True


@pytest.mark.parametrize("name, text, message", [
    ("h.edn", '{:type :ok}\n{:type "x\n', r"h.edn:2: unterminated string"),
    ("h.edn", "{:type :ok}\n[1 2]\n", r"h.edn:2: expected an op map, got \[1 2\]"),
    ("h.txt", "0\t:invoke\t:read\n", r"h.txt:1: expected process, type, f and value"),
    ("h.txt", "0\t:invoke\t:read\t[1\n", r"h.txt:1: unexpected end of input"),
    ("h.jsonl", '{"process": 0}\n{oops\n', r"h.jsonl:2: invalid JSON"),
    ("h.csv", "", r"h.csv: unknown history format '.csv'"),
    ("h.edn", "{:type :ok, :f :read, :process 0}\n", r"h.edn:1: ok for process 0 without"),
])
def test_bad_files_name_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(HistoryError, match=message):
        pair(read_events(path))


def to_edn(event: dict, keyed: bool) -> str:
    """A Jepsen-style op map: keywords for type, f (and kv keys)."""
    value = event["value"]
    if keyed:
        value = (edn.Keyword(value[0]), value[1])
    m = {edn.Keyword(k): v for k, v in event.items()}
    m[edn.Keyword("type")] = edn.Keyword(event["type"])
    m[edn.Keyword("f")] = edn.Keyword(event["f"])
    m[edn.Keyword("value")] = value
    return edn.dumps(m)


@pytest.mark.parametrize("keys", [None, ["x", "y"]])
def test_edn_import_round_trip(tmp_path, keys):
    events = simulate(random.Random(5), 300, 4, keys=keys, info_rate=0.05)
    jsonl, edn_path = tmp_path / "h.jsonl", tmp_path / "h.edn"
    jsonl.write_text("".join(json.dumps(e) + "\n" for e in events))
    edn_path.write_text("".join(to_edn(e, keys is not None) + "\n" for e in events))
    from_json, from_edn = pair(read_events(jsonl)), pair(read_events(edn_path))
    strip = [(o.process, o.f, o.value, o.output, o.call, o.ret, o.invoke_index)
             for o in from_json]
    assert [(o.process, o.f, o.value, o.output, o.call, o.ret, o.invoke_index)
            for o in from_edn] == strip
    model = KV() if keys else CASRegister()
    assert check(from_edn, model)["valid"] is True
