"""The system under test as one run drives it (Jepsen's `db`): how its nodes are laid out on
the hosts, how its topic is created and its health awaited, which workload client speaks to
it, and how fault targets learn its live leaders, ISR and ELR.

Two systems plug in here, chosen by `[system] kind`: the embedded one (replication/, its own
client) and Apache Kafka (control.kafka on the hosts; confluent-kafka for the workload;
docs/kafka.md). The run sequence (harness.runner) is written once against `System`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from checkers.exitcodes import UserError
from control import kafka_install
from control.host import Host
from control.kafka import KafkaNodes
from control.provider import Provider
from harness.config import WorkloadSettings
from harness.kafka_events import PartitionWatch, node_log_events
from harness.test import Test
from nemesis.faults import metadata_topology
from nemesis.kinds.base import NO_GROUPS, NO_TRANSACTIONS, Topology
from workloads import kafka_admin, topics
from workloads.history import HistoryWriter
from workloads.kafka import KafkaWorkload, WorkloadParams
from workloads.rdkafka import RdKafkaWorkload
from workloads.rdkafka_ctp import CTP_GROUP, TransformingTxnWorkload
from workloads.rdkafka_txn import (
    GROUP,
    OFFSETS_LOG,
    TXN_LOG,
    RdKafkaTxnWorkload,
    coordinator_partition,
    transactional_id,
)
from workloads.sequence import Workload


class System(Protocol):
    kind: str

    def nodes(self, hosts: list[Host], run_name: str, provider: Provider) -> KafkaNodes | None:
        """The node layout the cluster starts (None: the embedded system's own)."""
        ...

    async def create_topic(self, bootstrap: list[str], brokers: int, topic: str,
                           partitions: int, replication_factor: int) -> None: ...
    async def wait_healthy(self, bootstrap: list[str], topic: str, partitions: int,
                           timeout: float) -> bool: ...
    def workload(self, params: WorkloadParams, bootstrap: list[str],
                 history: HistoryWriter) -> Workload: ...
    def topology(self, nodes: list[str], bootstrap: list[str], topic: str) -> Topology: ...

    async def observe(self, bootstrap: list[str], topic: str) -> None:
        """Watch the cluster from outside until cancelled (the embedded nodes log their own
        events, so they need no watching)."""
        ...

    def node_events(self, nodes_dir: Path, hosts: list[Host]) -> list[dict[str, Any]]:
        """Events to merge beside the nodes' own, from the observations and collected logs
        under nodes_dir (one folder per host)."""
        ...


class Embedded:
    """replication/'s controller and brokers, driven by its own client."""

    kind = "embedded"

    def nodes(self, hosts: list[Host], run_name: str, provider: Provider) -> None:
        return None

    async def create_topic(self, bootstrap: list[str], brokers: int, topic: str,
                           partitions: int, replication_factor: int) -> None:
        await topics.create_topic(bootstrap, brokers, topic, partitions, replication_factor)

    async def wait_healthy(self, bootstrap: list[str], topic: str, partitions: int,
                           timeout: float) -> bool:
        return await topics.wait_healthy(bootstrap, topic, partitions, timeout)

    def workload(self, params: WorkloadParams, bootstrap: list[str],
                 history: HistoryWriter) -> Workload:
        return KafkaWorkload(params, bootstrap, history)

    def topology(self, nodes: list[str], bootstrap: list[str], topic: str) -> Topology:
        return metadata_topology(nodes, bootstrap, topic)

    async def observe(self, bootstrap: list[str], topic: str) -> None:
        return None

    def node_events(self, nodes_dir: Path, hosts: list[Host]) -> list[dict[str, Any]]:
        return []


class ApacheKafka:
    """Apache Kafka in KRaft mode, driven by confluent-kafka."""

    kind = "kafka"

    def __init__(self, test: Test) -> None:
        self.test = test
        self.settings = test.config.kafka
        self.libs = str(kafka_install.require(self.settings.version))  # before any host is made
        if test.config.hosts.provider == "netns":
            kafka_install.java()  # the hosts are this machine: a missing JVM is said now
        self.watch: PartitionWatch | None = None

    def nodes(self, hosts: list[Host], run_name: str, provider: Provider) -> KafkaNodes:
        """On netns hosts the local classpath and JVM; on an inventory's hosts their own JVM
        and a copy of the classpath (control/kafka_hosts.py)."""
        java, libs = provider.kafka(hosts, self.settings.version, Path(self.libs))
        return KafkaNodes(hosts, self.test.config.node_settings, self.settings,
                          libs, java, run_name, proxied=self.test.config.hosts.toxiproxy)

    async def create_topic(self, bootstrap: list[str], brokers: int, topic: str,
                           partitions: int, replication_factor: int) -> None:
        await kafka_admin.create_topic(bootstrap, brokers, topic, partitions, replication_factor,
                                       timeout=self.settings.start_timeout_s)

    async def wait_healthy(self, bootstrap: list[str], topic: str, partitions: int,
                           timeout: float) -> bool:
        return await kafka_admin.wait_healthy(bootstrap, topic, partitions, timeout)

    def workload(self, params: WorkloadParams, bootstrap: list[str],
                 history: HistoryWriter) -> Workload:
        w = self.test.config.workload
        if w.kind == "txn" and w.transformers:
            return TransformingTxnWorkload(params, bootstrap, history,
                                           uncommitted=w.uncommitted_consumers,
                                           transformers=w.transformers)
        if w.kind == "txn":
            return RdKafkaTxnWorkload(params, bootstrap, history,
                                      uncommitted=w.uncommitted_consumers)
        return RdKafkaWorkload(params, bootstrap, history,
                               idempotence=self.test.config.workload.idempotence)

    def topology(self, nodes: list[str], bootstrap: list[str], topic: str) -> Topology:
        async def partition_state(partition: int) -> dict[str, Any] | None:
            try:
                states = await kafka_admin.describe_partitions(bootstrap, topic)
            except kafka_admin.KafkaAdminError:
                return None
            return next((p for p in states if p["partition"] == partition), None)

        async def coordinating(log: str, coordinated_id: str) -> dict[str, Any] | None:
            """The log partition coordinating `coordinated_id` (the workload's ids all hash
            alike while each log has one partition, as control.kafka sets it)."""
            try:
                states = await kafka_admin.describe_partitions(bootstrap, log)
            except kafka_admin.KafkaAdminError:
                return None  # not created before the first transactional producer (member)
            wanted = coordinator_partition(coordinated_id, len(states))
            return next((p for p in states if p["partition"] == wanted), None)

        async def txn_state() -> dict[str, Any] | None:
            return await coordinating(TXN_LOG, transactional_id(self.test.config.seed, 0))

        group = consumer_group(self.test.config.workload)

        async def group_state() -> dict[str, Any] | None:
            return None if group is None else await coordinating(OFFSETS_LOG, group)

        brokers = {i: name for i, name in enumerate(nodes[1:], start=1)}
        return Topology(tuple(nodes), nodes[0], brokers, partition_state, txn_state=txn_state,
                        group_state=group_state)

    async def observe(self, bootstrap: list[str], topic: str) -> None:
        self.watch = PartitionWatch(bootstrap, topic)
        await self.watch.run()

    def node_events(self, nodes_dir: Path, hosts: list[Host]) -> list[dict[str, Any]]:
        """The watched partition changes (as the controller's, on n1) and what each node's
        log says; node ids as the embedded nodes give them ("controller", or broker ids)."""
        watched = self.watch.events if self.watch else []
        topic_ids = self.watch.topic_ids if self.watch else {}
        events = [{**e, "host": hosts[0].name} for e in watched]
        for i, host in enumerate(hosts):
            node: int | str = "controller" if i == 0 else i
            events += [{**e, "host": host.name}
                       for e in node_log_events(nodes_dir / host.name / "node.log", node,
                                                topic_ids)]
        return events


def consumer_group(w: WorkloadSettings) -> str | None:
    """The group a `group-coordinator` target aims at: the transformers' (consume-transform-
    produce commits its offsets in transactions), else the group members' of the
    transactional workload (half its consumers, rounded down); None: no group runs."""
    if w.kind != "txn":
        return None
    if w.transformers:
        return CTP_GROUP
    return GROUP if w.consumers >= 2 else None


def system_of(test: Test) -> System:
    """The system a test runs (a missing Kafka install is a one-line error here, before any
    host is made)."""
    if test.config.nemesis.targets == "txn-coordinator" and test.config.workload.kind != "txn":
        raise UserError("targets = 'txn-coordinator' aims at the transactions of "
                        "workload.kind = 'txn'" if test.config.system_kind == "kafka"
                        else NO_TRANSACTIONS)
    if test.config.nemesis.targets == "group-coordinator":
        if test.config.system_kind != "kafka":
            raise UserError(NO_GROUPS)
        if consumer_group(test.config.workload) is None:
            raise UserError("targets = 'group-coordinator' aims at a consumer group: "
                            "workload.kind = 'txn' with workload.transformers >= 1 or "
                            "workload.consumers >= 2")
    for key in ("uncommitted_consumers", "transformers"):
        if getattr(test.config.workload, key) and test.config.workload.kind != "txn":
            raise UserError(f"workload.{key} needs transactions: workload.kind = 'txn' "
                            f"(on Apache Kafka)")
    if test.config.system_kind == "kafka":
        return ApacheKafka(test)
    if test.config.workload.kind != "log":
        raise UserError(f"workload.kind = {test.config.workload.kind!r} needs transactions: "
                        f"run it on Apache Kafka (--set system.kind=kafka)")
    return Embedded()
