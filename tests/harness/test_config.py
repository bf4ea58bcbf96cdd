"""harness.config: layering, --set parsing, validation errors naming key, file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import config as cfg
from harness.config import ConfigError, load_config, parse_set, validate


def write(tmp_path: Path, text: str, name: str = "test.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(*args, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(*args, **kwargs)
    return info.value


def test_default_matches_the_shared_shape():
    c = load_config()
    assert (c["name"], c["nodes"], c["time_limit"], c["seed"]) == ("default", 5, 60, 0)
    assert c["topic"] == {"name": "chaos", "partitions": 3, "replication_factor": 3}
    assert c["workload"] == {"acks": "all", "rate": 500, "producers": 4, "consumers": 2,
                             "request_timeout_ms": 3000, "final_read_timeout": 60,
                             "idempotence": True, "kind": "log", "uncommitted_consumers": 0,
                             "transformers": 0}
    assert c["system"]["kind"] == "embedded"
    assert c["kafka"] == {"version": "4.2.1", "heap_mb": 512, "controller_heap_mb": 256,
                          "start_timeout_s": 120}
    assert c["nemesis"]["faults"] == ["kill", "partition"]
    assert (c["nemesis"]["interval"], c["nemesis"]["duration"]) == (10, 5)
    assert c["nemesis"]["targets"] == "auto"
    assert c["checker"] == {"allow": [], "spark_master": "local[2]", "spark_min_ops": 0}
    assert c["system"]["min.insync.replicas"] == 2


def test_resolved_config_validates_unchanged_after_json_round_trip():
    c = load_config("fast", sets=["workload.acks=1"])
    again = validate(json.loads(json.dumps(c)))
    assert again == c


def test_validate_names_the_given_source_for_a_stored_config():
    c = load_config()
    c["topic"]["partitions"] = "three"
    with pytest.raises(ConfigError) as info:
        validate(c, source="results/x/test.json")
    assert info.value.key == "topic.partitions"
    assert str(info.value).startswith("results/x/test.json: topic.partitions: expected")
    c = load_config()
    c["extra"] = 1
    with pytest.raises(ConfigError, match="unknown key 'extra'"):
        validate(c, source="results/x/test.json")


def test_fast_profile_overlays_default():
    c = load_config("fast")
    assert c["name"] == "fast"
    assert c["system"]["broker.session.timeout.ms"] == 2000
    assert c["system"]["replica.lag.time.max.ms"] == 2000
    assert c["topic"]["replication_factor"] == 3  # untouched default


def test_file_layer_with_dotted_and_quoted_kafka_names(tmp_path):
    path = write(tmp_path, """
name = "mine"
nodes = 4
[topic]
partitions = 1
[system]
min.insync.replicas = 1
"flush.messages" = 1
isr.update = "local-first"
[nemesis.weights]
kill = 5
""")
    c = load_config(path)
    assert c["name"] == "mine" and c["nodes"] == 4 and c["topic"]["partitions"] == 1
    assert c["system"]["min.insync.replicas"] == 1
    assert c["system"]["flush.messages"] == 1
    assert c["system"]["isr.update"] == "local-first"
    assert c["nemesis"]["weights"]["kill"] == 5.0
    assert c["nemesis"]["weights"]["partition"] == 1.0  # merged, not replaced


def test_layers_in_order_default_file_set_flags(tmp_path):
    path = write(tmp_path, "seed = 1\ntime_limit = 10\n")
    c = load_config(path, sets=["seed=2", "time_limit=20"], overrides={"seed": 3})
    assert c["seed"] == 3 and c["time_limit"] == 20


@pytest.mark.parametrize(("item", "key", "value"), [
    ("system.min.insync.replicas=2", "system.min.insync.replicas", 2),
    ("workload.acks=all", "workload.acks", "all"),
    ("workload.acks=1", "workload.acks", 1),
    ('nemesis.faults=["kill", "pause"]', "nemesis.faults", ["kill", "pause"]),
    ("nemesis.faults=kill", "nemesis.faults", "kill"),
    ("system.unclean.leader.election.enable=true", "system.unclean.leader.election.enable", True),
    ("topic.name=orders", "topic.name", "orders"),
    ('topic.name="1979-05-27"', "topic.name", "1979-05-27"),
    ("topic.name=1979-05-27", "topic.name", "1979-05-27"),
    ("time_limit=2.5", "time_limit", 2.5),
    ("nemesis.weights={kill = 2}", "nemesis.weights", {"kill": 2}),
    ("nodes=3\nseed = 4", "nodes", "3\nseed = 4"),
])
def test_parse_set(item, key, value):
    assert parse_set(item) == (key, value)


@pytest.mark.parametrize("item", ["nodes", "=3", ".x=1", "a..b=1"])
def test_parse_set_rejects_malformed(item):
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_set(item)


def test_set_overrides_reach_every_kind_of_key():
    c = load_config(sets=["system.min.insync.replicas=3", "workload.acks=0",
                          "nemesis.weights.kill=3", "nemesis.faults=[\"kill\",\"outage\"]",
                          "checker.allow=[\"unseen\"]"])
    assert c["system"]["min.insync.replicas"] == 3
    assert c["workload"]["acks"] == "0"
    assert c["nemesis"]["weights"]["kill"] == 3.0
    assert c["nemesis"]["faults"] == ["kill", "outage"]
    assert c["checker"]["allow"] == ["unseen"]


@pytest.mark.parametrize(("given", "normal"), [(0, "0"), (1, "1"), ("1", "1"), ("all", "all"),
                                               (-1, "all")])
def test_acks_normalised_to_string(given, normal):
    assert load_config(overrides={"workload.acks": given})["workload"]["acks"] == normal


def test_malformed_toml_names_file_and_line(tmp_path):
    path = write(tmp_path, 'name = "x"\nnodes = 5\n[topic\npartitions = 3\n')
    e = error_of(path)
    assert e.source == str(path) and e.line == 3
    assert str(path) in str(e) and "line 3" in str(e) and "malformed TOML" in str(e)


def test_unknown_key_in_file_named_with_line_and_suggestion(tmp_path):
    path = write(tmp_path, "[system]\nmin.insync.replicas = 2\nmin.insync.replica = 2\n")
    e = error_of(path)
    assert e.key == "system.min.insync.replica" and e.line == 3
    assert "did you mean 'system.min.insync.replicas'" in str(e)


def test_known_key_in_wrong_table_suggests_the_right_one(tmp_path):
    e = error_of(write(tmp_path, "[system]\nacks = 1\n"))
    assert "did you mean 'workload.acks'" in str(e) and e.line == 2


def test_unknown_table_and_top_level_key():
    assert "did you mean 'nodes'" in str(error_of(sets=["nodse=3"]))
    e = error_of(sets=["systm.flush.ms=3"])
    assert e.key.startswith("systm") and e.source == "--set systm.flush.ms=3"


def test_bad_value_names_key_file_line_and_expectation(tmp_path):
    path = write(tmp_path, '[workload]\nrate = 10\nacks = "most"\n')
    e = error_of(path)
    assert e.key == "workload.acks" and e.line == 3 and e.source == str(path)
    assert "expected" in str(e) and "'most'" in str(e)


@pytest.mark.parametrize(("item", "key"), [
    ("system.unclean.recovery.strategy=eager", "system.unclean.recovery.strategy"),
    ("system.replica.truncation=hwm", "system.replica.truncation"),
    ("system.isr.update=leader", "system.isr.update"),
    ("system.eligible.leader.replicas.enable=1", "system.eligible.leader.replicas.enable"),
    ("system.flush.ms=0", "system.flush.ms"),
    ("nodes=true", "nodes"),
    ("nodes=1", "nodes"),
    ("time_limit=0", "time_limit"),
    ("seed=-1", "seed"),
    ("name=../etc", "name"),
    ("name=latest", "name"),
    ("name=campaigns", "name"),
    ("topic.partitions=0", "topic.partitions"),
    ('nemesis.faults=["kil"]', "nemesis.faults"),
    ('nemesis.faults=["kill", "kill"]', "nemesis.faults"),
    ("nemesis.targets=everyone", "nemesis.targets"),
    ("nemesis.shrink_first=2", "nemesis.shrink_first"),
    ("nemesis.weights.kill=-1", "nemesis.weights"),
    ('checker.allow=["lost"]', "checker.allow"),
    ("workload.producers=0", "workload.producers"),
])
def test_bad_values_rejected_naming_the_key(item, key):
    e = error_of(sets=[item])
    assert e.key == key and e.source == f"--set {item}"


def test_fault_typo_gets_suggestion():
    assert "did you mean 'power-loss'" in str(error_of(sets=['nemesis.faults=["power-los"]']))


def test_min_insync_cannot_exceed_replication_factor():
    e = error_of(sets=["system.min.insync.replicas=4"])
    assert e.key == "system.min.insync.replicas" and "replication_factor = 3" in str(e)


def test_replication_factor_needs_enough_brokers_blames_what_the_user_changed():
    e = error_of(overrides={"nodes": 3})
    assert e.key == "nodes" and "gives 2" in str(e)
    e = error_of(sets=["topic.replication_factor=5"])
    assert e.key == "topic.replication_factor"


def test_heartbeat_must_be_below_session_timeout():
    e = error_of(sets=["system.broker.heartbeat.interval.ms=6000"])
    assert e.key == "system.broker.heartbeat.interval.ms"


def test_all_selected_faults_weighted_zero_is_an_error():
    e = error_of(sets=["nemesis.faults=[\"kill\"]", "nemesis.weights.kill=0"])
    assert e.key == "nemesis.weights"


def test_missing_file_that_is_not_a_profile(tmp_path):
    e = error_of(tmp_path / "nope.toml")
    assert "nope.toml" in str(e) and "fast" in str(e)


def test_schema_system_keys_are_known_to_the_nodes():
    node_config = pytest.importorskip("replication.config",
                                      reason="replication.config not in this checkout")
    # every key but `kind`, which says which system runs (not a node setting)
    assert set(cfg.SCHEMA["system"]) - {cfg.KIND} <= set(node_config.known_keys())


def test_from_args_maps_the_run_flags():
    from harness.cli import build_parser
    args = build_parser().parse_args(["run", "--config", "fast", "--nodes", "4",
                                      "--nemesis", "kill,pause", "--time-limit", "2m",
                                      "--seed", "7", "--set", "topic.partitions=2"])
    c = cfg.from_args(args)
    assert (c["name"], c["nodes"], c["time_limit"], c["seed"]) == ("fast", 4, 120, 7)
    assert c["nemesis"]["faults"] == ["kill", "pause"] and c["topic"]["partitions"] == 2
    args = build_parser().parse_args(["run", "--nemesis", "none"])
    assert cfg.from_args(args)["nemesis"]["faults"] == []


def test_typed_config_sections_and_node_settings():
    from harness.config import typed
    t = typed(load_config(sets=["system.flush.messages=1", "nemesis.faults=['kill','slow-link']"]))
    assert t.system.flush_messages == 1 and t.system.min_insync_replicas == 2
    assert t.nemesis.faults == ("kill", "slow-link") and t.nemesis.link["link_delay_ms"] == 200
    assert t.brokers == t.nodes - 1 and t.topic.replication_factor == 3


def _written_back(config: dict) -> dict:
    """test.json's config as a run writes it: from the typed form."""
    from harness.config import typed
    record = typed(config).record()
    assert validate(record) == record and typed(record) == typed(config)
    return record


def test_the_typed_form_writes_back_every_setting_a_config_gave():
    from harness.campaign_spec import load_spec
    root = Path(__file__).resolve().parents[2]
    stored = json.loads((root / "tests/data/acks1-sim/test.json").read_text())["config"]
    every_optional = load_config(sets=[
        "checker.spark_min_ops=5", "checker.ww_deps=true", "hosts.toxiproxy=true",
        "hosts.startup_s=[1, 2]", "nemesis.toxics.latency={direction='outbound'}",
        "system.kind=kafka", "kafka.heap_mb=1024", "workload.kind=txn", "workload.transformers=2"])
    configs = ([load_config(p) for p in sorted(cfg.PROFILE_DIR.glob("*.toml"))]
               + [c.resolved for c in load_spec(root / "campaigns/validation.toml")[1]]
               + [validate(stored), every_optional])
    for config in configs:
        record = _written_back(config)
        for table, value in config.items():
            given = value.items() if isinstance(value, dict) else [(None, value)]
            for key, v in given:
                assert (record[table] if key is None else record[table][key]) == v, (table, key)


def test_a_stored_config_of_an_older_run_is_written_back_with_its_defaults():
    # tests/data/acks1-sim predates [kafka], hosts.toxiproxy and workload.idempotence
    root = Path(__file__).resolve().parents[2]
    stored = json.loads((root / "tests/data/acks1-sim/test.json").read_text())["config"]
    record = _written_back(validate(stored))
    assert record["hosts"] == {"provider": "sim", "toxiproxy": "auto"}
    assert record["workload"]["idempotence"] is True and record["kafka"]["heap_mb"] == 512


def test_node_rules_apply_at_validation():
    # flush.ms >= 1 and the like are the nodes' rules (replication.config), checked once
    with pytest.raises(ConfigError):
        load_config(sets=["system.unclean.recovery.strategy=sometimes"])


def test_with_sets_is_with_values_of_the_items_as_the_command_line_reads_them():
    c = load_config()
    sets = ["system.min.insync.replicas=1", "workload.acks=all", "nemesis.weights={kill=3}",
            "nemesis.weights={pause=2}"]
    out = cfg.with_sets(c, sets)
    assert out == cfg.with_values(c, [parse_set(s) for s in sets], "x")
    assert out == load_config(sets=sets)  # the same as --set on the command line
    # pairs apply in order, so a merged table gets both items (a dict would keep the last)
    assert (out["nemesis"]["weights"]["kill"], out["nemesis"]["weights"]["pause"]) == (3, 2)
    with pytest.raises(ConfigError, match=r"--against workload\.nope=1"):
        cfg.with_sets(c, ["workload.nope=1"], "--against")
