"""Apache Kafka as the system under test, the parts that are pure logic: how [system] maps onto
Kafka's properties, what is refused, the KRaft layout, DescribeTopicPartitions' encoding, how
a delivery error is classed, and the events read from Kafka's own log lines."""

from __future__ import annotations

import asyncio
import struct
from pathlib import PurePosixPath

import pytest

from control.kafka import (
    PORT,
    KafkaNodes,
    KafkaSettings,
    cluster_id,
    has_elr,
    refusals,
    translate,
)
from harness.config import ConfigError, load_config, typed
from harness.kafka_events import PartitionWatch, log_events
from workloads.kafka_admin import (
    _uvarint,
    create_again,
    describe_partitions,
    describe_request,
    parse_describe,
)
from workloads.rdkafka import send_outcome

SYSTEM = load_config(None, [])["system"]


def test_system_settings_map_onto_kafka_properties():
    props, notes = translate({**SYSTEM, "flush.messages": 1}, "4.2.1")
    assert props["log.flush.interval.messages"] == "1"
    assert props["min.insync.replicas"] == "2"
    assert props["unclean.leader.election.enable"] == "false"
    assert props["log.segment.bytes"] == str(SYSTEM["segment.bytes"])
    assert "replica.truncation" not in props and "kind" not in props
    assert any("replica.fetch.max.records" in n for n in notes)
    _, notes_39 = translate(SYSTEM, "3.9.1")
    assert any("no ELR" in n for n in notes_39), "3.9 has no ELR, and says so"


def test_elr_is_a_feature_from_4_1():
    assert not has_elr("3.9.1") and not has_elr("4.0.2")
    assert has_elr("4.1.0") and has_elr("4.2.1") and has_elr("4.10.0")


@pytest.mark.parametrize("key,value", [("replica.truncation", "high-watermark"),
                                       ("unclean.shutdown.detection", False),
                                       ("isr.update", "local-first")])
def test_weakness_switches_are_refused_on_kafka(key, value):
    assert refusals({**SYSTEM, key: value})
    with pytest.raises(ConfigError, match=key):
        load_config(None, ["system.kind=kafka", f"system.{key}={str(value).lower()}"])


def test_fault_kinds_that_cannot_act_on_kafka_are_refused():
    with pytest.raises(ConfigError, match="corrupt-segment"):
        load_config(None, ["system.kind=kafka", "nemesis.faults=['corrupt-segment']"])


def test_vm_power_off_is_accepted_on_kafka():
    # Tried on Kafka on the VMs of `make vms` (tests/vms/test_vms_runs.py, docs/vms.md).
    config = load_config(None, ["system.kind=kafka", "nemesis.faults=['vm-power-off']"])
    assert config["nemesis"]["faults"] == ["vm-power-off"]


def test_the_simulator_refuses_kafka():
    from checkers.exitcodes import UserError
    from harness.sim_run import as_simulated

    with pytest.raises(UserError, match="embedded system"):
        as_simulated(load_config(None, ["system.kind=kafka"]))
    assert as_simulated(load_config(None, []))["hosts"] == {"provider": "sim", "toxiproxy": "auto"}


def test_kafka_config_resolves_and_defaults():
    config = load_config(None, ["system.kind=kafka", "kafka.version=3.9.1",
                                "nemesis.faults=['kill', 'pause', 'power-loss', 'partition']"])
    t = typed(config)
    assert (t.system_kind, t.kafka.version, t.kafka.heap_mb) == ("kafka", "3.9.1", 512)
    assert typed(load_config(None, [])).system_kind == "embedded"
    with pytest.raises(ConfigError, match="kafka.version"):
        load_config(None, ["kafka.version=latest"])


def _hosts(n: int) -> list:
    class H:
        def __init__(self, i: int) -> None:
            self.name, self.address = f"n{i}", f"10.0.0.{i}"
            self.data_dir = PurePosixPath(f"/c/n{i}/data")

        @property
        def work_dir(self) -> PurePosixPath:
            return self.data_dir.parent

    return [H(i) for i in range(1, n + 1)]


LIBS = {f"n{i}": f"/libs/n{i}" for i in range(1, 5)}  # each host's classpath folder


def test_the_kraft_layout_is_the_embedded_one():
    hosts = _hosts(4)
    nodes = KafkaNodes(hosts, SYSTEM, KafkaSettings("4.2.1"), LIBS, "/usr/bin/java", "run-1")
    controller = nodes.server_properties(hosts[0])
    assert controller["process.roles"] == "controller" and controller["node.id"] == "0"
    assert controller["controller.quorum.voters"] == f"0@10.0.0.1:{PORT}"
    assert controller["listeners"] == f"CONTROLLER://10.0.0.1:{PORT}"
    assert controller["unclean.leader.election.enable"] == "false", "the controller elects"
    broker = nodes.server_properties(hosts[2])
    assert (broker["process.roles"], broker["node.id"]) == ("broker", "2")
    assert broker["advertised.listeners"] == "PLAINTEXT://10.0.0.3:9092"
    assert broker["log.dirs"] == "/c/n3/data"
    assert nodes.bootstrap() == ["10.0.0.2:9092", "10.0.0.3:9092", "10.0.0.4:9092"]
    assert "eligible.leader.replicas.version=1" in nodes.format_argv(hosts[0])
    no_elr = KafkaNodes(hosts, {**SYSTEM, "eligible.leader.replicas.enable": False},
                        KafkaSettings("4.2.1"), LIBS, "java", "run-1")
    assert "eligible.leader.replicas.version=0" in no_elr.format_argv(hosts[0])
    old = KafkaNodes(hosts, SYSTEM, KafkaSettings("3.9.1"), LIBS, "java", "run-1")
    assert not any("eligible" in a for a in old.format_argv(hosts[0]))
    assert any(a.startswith("-Dlog4j.configuration=") for a in old.argv(hosts[1]))
    assert "-Xmx512m" in nodes.argv(hosts[1]) and "-Xmx256m" in nodes.argv(hosts[0])
    assert "/libs/n3/*" in nodes.argv(hosts[2]) and "/libs/n1/*" in nodes.format_argv(hosts[0])


def test_behind_toxiproxy_nodes_listen_on_loopback_and_brokers_redirect_to_their_proxies():
    hosts = _hosts(4)
    nodes = KafkaNodes(hosts, SYSTEM, KafkaSettings("4.2.1"), LIBS, "java", "r",
                       proxied=True)
    assert nodes.server_properties(hosts[1])["listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert nodes.server_properties(hosts[1])["advertised.listeners"] == "PLAINTEXT://10.0.0.2:9092"
    assert nodes.server_properties(hosts[0])["listeners"] == "CONTROLLER://127.0.0.1:19092"
    assert nodes.route_script(hosts[0], lambda p: 0) is None, "the controller opens nothing"
    script = nodes.route_script(hosts[2], lambda p: 29100 + int(p.name[1:]))
    assert "-d 10.0.0.1/32 --dport 9092 -j REDIRECT --to-ports 29101" in script
    assert "-d 10.0.0.4/32 --dport 9092 -j REDIRECT --to-ports 29104" in script
    assert "10.0.0.3/32" not in script, "a broker's connections to itself are not redirected"


def test_cluster_ids_are_kraft_uuids_per_run():
    a, b = cluster_id("run-1"), cluster_id("run-2")
    assert a != b and len(a) == 22 and a == cluster_id("run-1")
    # a campaign's run failed to format: kafka-storage took an id starting "-" for an option
    ids = [cluster_id(f"20261126T135926-s{i}") for i in range(300)]
    assert not any(i.startswith("-") for i in ids) and len(set(ids)) == 300


def _describe_response(partitions: list[tuple]) -> bytes:
    """A DescribeTopicPartitions v0 response frame for topic "t", as a broker sends it."""
    def ints(xs):
        return _uvarint(len(xs) + 1) + b"".join(struct.pack(">i", x) for x in xs)

    body = struct.pack(">i", 7) + b"\x00" + struct.pack(">i", 0) + _uvarint(2)
    body += struct.pack(">h", 0) + _uvarint(2) + b"t" + bytes(range(16)) + b"\x00"
    body += _uvarint(len(partitions) + 1)
    for index, leader, epoch, replicas, isr, elr in partitions:
        body += struct.pack(">hiii", 0, index, leader, epoch)
        body += ints(replicas) + ints(isr) + ints(elr) + ints([]) + ints([]) + b"\x00"
    return body + struct.pack(">i", 0) + b"\x00" + struct.pack(">b", -1) + b"\x00"


def test_describe_topic_partitions_is_encoded_and_decoded():
    request = describe_request(["chaos"], 7)
    size, key, version, correlation = struct.unpack_from(">ihhi", request)
    assert (size, key, version, correlation) == (len(request) - 4, 75, 0, 7)
    topics = parse_describe(_describe_response([(1, -1, 4, [1, 2, 3], [2], [1, 3]),
                                                (0, 2, 9, [1, 2, 3], [1, 2, 3], [])]))
    first, second = topics["t"]
    assert (first["partition"], first["leader"], first["isr"], first["elr"]) == (0, 2, [1, 2, 3], [])
    assert (second["leader"], second["leader_epoch"], second["elr"]) == (None, 4, [1, 3])
    assert first["topic_id"] == "AAECAwQFBgcICQoLDA0ODw"


def test_a_silent_broker_does_not_hold_up_a_description_from_another():
    """A paused broker accepts a connection and never answers; the partition states come
    from the next broker at once, not after the paused one's timeout (real TCP, loopback)."""
    frame = _describe_response([(1, 2, 3, [1, 2, 3], [2, 3], [])])

    async def silent(reader, writer):
        await reader.read()  # never answers

    async def answers(reader, writer):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)
        writer.write(struct.pack(">i", len(frame)) + frame)
        await writer.drain()

    async def main():
        quiet = await asyncio.start_server(silent, "127.0.0.1", 0)
        live = await asyncio.start_server(answers, "127.0.0.1", 0)
        addresses = [f"127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in (quiet, live)]
        async with quiet, live:
            return await asyncio.wait_for(describe_partitions(addresses, "t", timeout=60), 20)

    states = asyncio.run(main())
    assert [(p["leader"], p["isr"]) for p in states] == [(2, [2, 3])]


def test_a_delivery_error_is_a_fail_only_when_nothing_can_have_been_written():
    import confluent_kafka as ck

    e = ck.KafkaError
    assert send_outcome(e._UNKNOWN_PARTITION, single_attempt=False) == "fail"
    assert send_outcome(e.NOT_ENOUGH_REPLICAS, single_attempt=True) == "fail"
    # after internal retries, an earlier attempt may have reached the log
    assert send_outcome(e.NOT_ENOUGH_REPLICAS, single_attempt=False) == "info"
    assert send_outcome(e._MSG_TIMED_OUT, single_attempt=True) == "info"
    assert send_outcome(e.NOT_ENOUGH_REPLICAS_AFTER_APPEND, single_attempt=True) == "info"
    assert send_outcome(e.REQUEST_TIMED_OUT, single_attempt=True) == "info"


def test_a_topic_creation_is_asked_again_after_a_dropped_broker_handle_only():
    import confluent_kafka as ck

    e = ck.KafkaError
    # librdkafka dropped the handle the request was on ("Broker handle destroyed"), or the
    # request or its answer was lost: ask again (an existing topic is then success)
    for code in (e._DESTROY_BROKER, e._TRANSPORT, e.REQUEST_TIMED_OUT, e.NOT_CONTROLLER):
        assert create_again(ck.KafkaError(code)), code
    for code in (e.INVALID_REPLICATION_FACTOR, e.TOPIC_AUTHORIZATION_FAILED,
                 e.INVALID_PARTITIONS, e._DESTROY):
        assert not create_again(ck.KafkaError(code)), code


LOG = """\
[2026-11-26T13:10:58.873+0000] INFO [QuorumController id=0] Replayed PartitionRecord (org.apache.kafka.controller.ReplicationControlManager)
[2026-11-26T13:11:02.500+0000] INFO [QuorumController id=0] Setting new leader for topicId x5r9CRd3Q9Wee2wiXxof1Q, partition 1 to 3 using an unclean election. Previous partition: P, change record: R (org.apache.kafka.controller.PartitionChangeBuilder)
[2026-11-26T13:11:03.000+0000] INFO [UnifiedLog partition=chaos-2, dir=/c/n2/data] Truncating to offset 1500 (org.apache.kafka.storage.internals.log.UnifiedLog)
[2026-11-26T13:11:03.000+0000] INFO [UnifiedLog partition=chaos-2, dir=/c/n2/data] Truncating to 0 has no effect as the largest offset in the log is -1 (org.apache.kafka.storage.internals.log.UnifiedLog)
[2026-11-26T13:11:04.250+0000] WARN [LogLoader partition=chaos-0, dir=/c/n2/data] Corruption found in segment 0, truncating to offset 77 (org.apache.kafka.storage.internals.log.LogLoader)
[2026-11-26T13:11:04.250+0000] INFO [LogLoader partition=chaos-0, dir=/c/n2/data] Recovering unflushed segment 0. 0 recovered for chaos-0. (org.apache.kafka.storage.internals.log.LogLoader)
"""


def test_kafkas_log_lines_become_events():
    events = list(log_events(LOG.splitlines(), "controller", {"x5r9CRd3Q9Wee2wiXxof1Q": "chaos"}))
    assert [e["kind"] for e in events] == ["unclean-election", "truncate", "log-recovery"]
    unclean, truncate, recovery = events
    assert (unclean["topic"], unclean["partition"], unclean["leader"]) == ("chaos", 1, 3)
    assert unclean["ts"] == pytest.approx(1795698662.5)
    assert (truncate["topic"], truncate["partition"], truncate["to_offset"]) == ("chaos", 2, 1500)
    assert (recovery["partition"], recovery["log_end_offset"]) == (0, 77)


def test_the_watch_records_changes_only():
    watch = PartitionWatch(["b:9092"], "chaos")
    state = {"partition": 0, "leader": 1, "leader_epoch": 0, "isr": [1, 2], "elr": [],
             "last_known_elr": [], "replicas": [1, 2], "topic_id": "ID"}
    watch.observe([state], 1.0)
    watch.observe([state], 2.0)
    watch.observe([{**state, "leader": 2, "leader_epoch": 1, "isr": [2]}], 3.0)
    assert [(e["ts"], e["leader"], e["isr"]) for e in watch.events] == [(1.0, 1, [1, 2]),
                                                                         (3.0, 2, [2])]
    assert watch.events[0]["kind"] == "partition-change" and watch.topic_ids == {"ID": "chaos"}


def test_the_shipped_kafka_campaign_resolves_on_both_versions():
    from pathlib import Path

    from harness.campaign_spec import load_spec

    _, cells = load_spec(Path(__file__).parents[2] / "campaigns" / "kafka.toml")
    resolved = [c.resolved for c in cells]
    assert {r["system"]["kind"] for r in resolved} == {"kafka"}
    assert {r["kafka"]["version"] for r in resolved} == {"3.9.1", "4.2.1"}


def test_a_fatal_error_replaces_the_producer_once(tmp_path):
    """librdkafka's producer is unusable after a fatal error: the workload makes a new one,
    once for all the sends that saw the same failed producer."""
    from workloads.history import HistoryWriter
    from workloads.kafka import WorkloadParams
    from workloads.rdkafka import RdKafkaWorkload, _Delivery

    with HistoryWriter(tmp_path / "history.jsonl") as history:
        workload = RdKafkaWorkload(WorkloadParams("t", 1), ["127.0.0.1:1"], history)
        failed = workload._delivery = _Delivery(workload.producer_config())
        workload._renew(failed)
        workload._renew(failed)  # a second send that saw the same producer fail
        assert workload._delivery is not failed
        assert workload.stats["producers-renewed"] == 1
        workload._delivery.close()


def test_a_delivery_report_without_an_offset_is_acknowledged_without_one():
    # confluent-kafka gives None for it: `None >= 0` ended a run on a VM in a TypeError.
    from workloads.rdkafka import known_offset

    assert known_offset(None) is None
    assert known_offset(-1001) is None
    assert known_offset(0) == 0 and known_offset(41) == 41
