"""Apache Kafka (KRaft) as the system under test on the run's hosts (docs/kafka.md).

The layout is the embedded system's: n1 runs the one KRaft controller (node id 0, listener
`CONTROLLER`), n2..nN the brokers with node ids 1..N-1 (listener `PLAINTEXT`, for clients and
replication alike), every node at its host's address and port 9092. Each node is `java -cp 'libs/*' kafka.Kafka
server.properties` started as the host's "node" daemon, so every process fault (kill, pause,
restart), host fault (the lossy filesystem under `log.dirs`) and netfilter fault acts on it
exactly as on an embedded node. `server.properties` and the logging config sit in the host's
work directory, outside the data directory, so a power loss never takes them.

The [system] table speaks Kafka's names. Those Kafka has are translated (`flush.messages` is
the broker's `log.flush.interval.messages`), the embedded system's tuning knobs that Kafka
lacks are left out, and its weakness switches, which have no Kafka equivalent, are refused
unless left at their defaults (`refusals`)."""

from __future__ import annotations

import base64
import hashlib
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the config imports this module, and a simulated run has no SSH (PyPy)
    from control.host import Host

PORT = 9092  # every node's address, the controller's (on n1) as the brokers'
# Behind Toxiproxy (control.toxiproxy): a node listens on loopback, its host's proxy "in" at
# PORT stands for it, and a broker's own connections to a peer's PORT are redirected
# (iptables, `route_rules`) into its local proxy to that peer, whose upstream is the peer's
# second inbound proxy at PEER_PORT: not PORT, or the proxy's own connection would be
# redirected back into itself.
PEER_PORT = 9095
NODE_PORT = 19092  # control.toxiproxy.NODE_PORT: where a proxied node listens
ROUTE_CHAIN = "KCH-KAFKA-ROUTE"
CONTROLLER_ID = 0

# [system] key -> the broker's (or controller's) property of the same meaning
KAFKA_NAMES = {
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "replica.lag.time.max.ms": "replica.lag.time.max.ms",
    "broker.session.timeout.ms": "broker.session.timeout.ms",
    "broker.heartbeat.interval.ms": "broker.heartbeat.interval.ms",
    "replica.fetch.wait.max.ms": "replica.fetch.wait.max.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "segment.bytes": "log.segment.bytes",
}
# The embedded system's historical weaknesses: Kafka has none of these (docs/kafka.md), so a
# run that asks for one on Kafka is refused rather than silently run without it.
WEAKNESS_DEFAULTS = {
    "replica.truncation": "leader-epoch",  # KIP-101 truncation; Kafka removed the HWM one
    "unclean.shutdown.detection": True,  # KIP-966's unclean-shutdown handling
    "isr.update": "controller",  # KRaft leaders act on an ISR once committed (KIP-497)
}
# Embedded tuning knobs with no Kafka property: left out, said once in the node's notes.
EMBEDDED_ONLY = ("unclean.recovery.strategy", "unclean.recovery.timeout.ms",
                 "replica.fetch.max.records", "request.timeout.ms")
# Files Kafka maps into memory, shared and writable (its offset and time indexes). With the
# lossy filesystem's write-back caching (its default) every file may be mapped; on a mount
# without it they go through the kernel's page cache (`--page-cached`), since FUSE refuses
# such a mapping on a direct-I/O file. Kafka rebuilds them after an unclean shutdown.
MAPPED_SUFFIXES = (".index", ".timeindex")
# Settings a chaos run needs that Kafka's defaults would make slow or impossible on a few
# brokers: internal topics sized to the cluster, no auto-created topics, no rebalance delay.
_BROKER_BASE = {
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "controlled.shutdown.enable": "true",
    "log.flush.scheduler.interval.ms": "100",  # how often flush.ms is looked at (default: never)
    # A consumer with a group id makes the brokers create __consumer_offsets, 50 partitions by
    # default, each with two 10 MB preallocated indexes: one partition and 1 MB indexes keep
    # the data directories small enough to collect into the run folder in seconds.
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",  # the same for transactions' coordinator log
    "log.index.size.max.bytes": "1048576",
}


@dataclass(frozen=True)
class KafkaSettings:
    """The [kafka] table: which version runs, how big its JVMs are, and how long a JVM may take
    to start (the storage format, the brokers registering): seconds on this machine, minutes
    on VMs under software emulation (docs/vms.md)."""

    version: str
    heap_mb: int = 512
    controller_heap_mb: int = 256
    start_timeout_s: int = 120


def has_elr(version: str) -> bool:
    """KIP-966's Eligible Leader Replicas: a feature of 4.1 and later, on by default there."""
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) >= (4, 1)


def refusals(system: Mapping[str, object]) -> list[str]:
    """Why a [system] table cannot run on Kafka: one sentence per weakness switch set."""
    return [f"system.{key} = {system[key]!r} is a weakness switch of the embedded system that "
            "Apache Kafka has no equivalent of (docs/kafka.md); leave it at "
            f"{default!r} with system.kind = \"kafka\""
            for key, default in WEAKNESS_DEFAULTS.items()
            if key in system and system[key] != default]


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def translate(system: Mapping[str, object], version: str) -> tuple[dict[str, str], list[str]]:
    """The Kafka properties of a [system] table, and notes on what was left out."""
    props = {KAFKA_NAMES[k]: _text(v) for k, v in system.items() if k in KAFKA_NAMES}
    unused = [k for k in EMBEDDED_ONLY if k in system]
    notes = [f"left out, no Kafka property: {', '.join(unused)}"] if unused else []
    if system.get("eligible.leader.replicas.enable") and not has_elr(version):
        notes.append(f"eligible.leader.replicas.enable: Kafka {version} has no ELR (4.1+)")
    return props, notes


def cluster_id(name: str) -> str:
    """A KRaft cluster id (16 bytes, URL-safe base64) that is the same for every node of a
    run and differs between runs. Never one starting with "-", which kafka-storage's argument
    parser would take for an option (Kafka's own random ids avoid it for the same reason)."""
    for salt in range(64):
        digest = hashlib.sha256(f"{name}/{salt}".encode()).digest()[:16]
        text = base64.urlsafe_b64encode(digest).decode().rstrip("=")
        if not text.startswith("-"):
            return text
    raise AssertionError("64 hashes in a row began with '-'")


def _properties(props: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d{yyyy-MM-dd'T'HH:mm:ss.SSSZ}] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.clients
        level: WARN
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
"""
_LOG4J1 = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d{yyyy-MM-dd'T'HH:mm:ss.SSSZ}] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
"""


class KafkaNodes:
    """How each host's Kafka node is configured, formatted and started."""

    mapped_suffixes = MAPPED_SUFFIXES

    def __init__(self, hosts: list[Host], system: Mapping[str, object], settings: KafkaSettings,
                 libs: Mapping[str, str], java: str, name: str, *,
                 proxied: bool = False) -> None:
        """`libs`: each host's classpath folder (by host name); `java` runs the nodes."""
        self.hosts = hosts
        self.proxied = proxied  # behind Toxiproxy: listening on loopback
        self.settings = settings
        self.libs = libs
        self.java = java
        self.cluster_id = cluster_id(name)
        self.props, self.notes = translate(system, settings.version)
        self.elr = bool(system.get("eligible.leader.replicas.enable", True)) and has_elr(
            settings.version)

    @property
    def controller_host(self) -> Host:
        return self.hosts[0]

    def bootstrap(self) -> list[str]:
        """Clients bootstrap from the brokers: a KRaft controller serves no client."""
        return [f"{h.address}:{PORT}" for h in self.hosts[1:]]

    def _voters(self) -> str:
        return f"{CONTROLLER_ID}@{self.controller_host.address}:{PORT}"

    def _listen(self, host: Host) -> str:
        return f"127.0.0.1:{NODE_PORT}" if self.proxied else f"{host.address}:{PORT}"

    def server_properties(self, host: Host) -> dict[str, str]:
        common = {
            "controller.quorum.voters": self._voters(),
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(host.data_dir),
        }
        if host.name == self.controller_host.name:
            return {"process.roles": "controller", "node.id": str(CONTROLLER_ID), **common,
                    "listeners": f"CONTROLLER://{self._listen(host)}",
                    **{k: v for k, v in self.props.items()
                       if k in ("broker.session.timeout.ms", "unclean.leader.election.enable",
                                "min.insync.replicas")}}
        brokers = len(self.hosts) - 1
        internal_rf = str(min(3, brokers))
        return {"process.roles": "broker", "node.id": str(self.hosts.index(host)), **common,
                "listeners": f"PLAINTEXT://{self._listen(host)}",
                "advertised.listeners": f"PLAINTEXT://{host.address}:{PORT}",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
                "offsets.topic.replication.factor": internal_rf,
                "transaction.state.log.replication.factor": internal_rf,
                "transaction.state.log.min.isr": str(min(2, brokers)),
                **_BROKER_BASE, **self.props}

    def route_script(self, host: Host, proxy_port: Callable[[Host], int]) -> str | None:
        """A shell script (run as root on the host) that sends a broker's connections to each
        peer's PORT into its local proxy to that peer (`proxy_port(peer)`), replacing the rules
        of an earlier start; None on the controller, which opens no connections."""
        if host.name == self.controller_host.name:
            return None
        nat = "iptables -w -t nat"
        lines = [f"{nat} -N {ROUTE_CHAIN} 2>/dev/null || true", f"{nat} -F {ROUTE_CHAIN}",
                 f"{nat} -C OUTPUT -p tcp -j {ROUTE_CHAIN} 2>/dev/null || "
                 f"{nat} -A OUTPUT -p tcp -j {ROUTE_CHAIN}"]
        lines += [f"{nat} -A {ROUTE_CHAIN} -p tcp -d {shlex.quote(peer.address)}/32 --dport {PORT} "
                  f"-j REDIRECT --to-ports {int(proxy_port(peer))}"
                  for peer in self.hosts if peer.name != host.name]
        return " && ".join(f"{{ {line}; }}" for line in lines)

    def config_paths(self, host: Host) -> tuple[PurePosixPath, PurePosixPath]:
        """server.properties and the logging config, as written on the host."""
        return self._paths(host)

    def _paths(self, host: Host) -> tuple[PurePosixPath, PurePosixPath]:
        log_config = "log4j.properties" if self.settings.version.startswith("3.") else "log4j2.yaml"
        return host.work_dir / "server.properties", host.work_dir / log_config

    def configure(self, host: Host) -> None:
        """Write the node's server.properties and logging config on its host."""
        props_path, log_path = self._paths(host)
        log_text = _LOG4J1 if self.settings.version.startswith("3.") else _LOG4J2
        for path, text in ((props_path, _properties(self.server_properties(host))),
                           (log_path, log_text)):
            host.remote.run(["sh", "-c", 'umask 022 && cat > "$1"', "sh", str(path)], input=text)

    def format_argv(self, host: Host) -> list[str]:
        """kafka-storage format: meta.properties (and the controller's bootstrap metadata,
        with ELR's feature level) in the data directory; a formatted directory is kept."""
        argv = [self.java, "-Xmx256m", "-cp", f"{self.libs[host.name]}/*",
                "kafka.tools.StorageTool",
                "format", "-t", self.cluster_id, "-c", str(self._paths(host)[0]),
                "--ignore-formatted"]
        if has_elr(self.settings.version):
            argv += ["--feature", f"eligible.leader.replicas.version={int(self.elr)}"]
        return argv

    def is_formatted(self, host: Host) -> bool:
        return host.remote.run(["test", "-f", str(host.data_dir / "meta.properties")],
                               check=False).ok

    def argv(self, host: Host) -> list[str]:
        controller = host.name == self.controller_host.name
        heap = self.settings.controller_heap_mb if controller else self.settings.heap_mb
        props_path, log_path = self._paths(host)
        logging = (f"-Dlog4j.configuration=file:{log_path}"
                   if self.settings.version.startswith("3.")
                   else f"-Dlog4j2.configurationFile={log_path}")
        # Serial GC and C1 only: two cores shared by five JVMs start in seconds, not a minute
        return [self.java, f"-Xmx{heap}m", f"-Xms{min(heap, 128)}m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true", logging,
                "-cp", f"{self.libs[host.name]}/*", "kafka.Kafka", str(props_path)]
