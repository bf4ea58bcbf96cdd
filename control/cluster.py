"""The system under test on the run's hosts: which node runs where, starting and stopping it.

n1 runs the controller, n2..nN the brokers with ids 1..N-1. Every action goes through the
host's SSH `Remote`, exactly as it would on a VM.

With `toxiproxy` set (the path of toxiproxy-server on the hosts), each node listens on
loopback and is reached only through its host's Toxiproxy (control.toxiproxy has the layout):
its advertised address `host:9092` is a proxy to it, and a broker's own connections to its
peers go through local proxies (`--route`).

With `kafka` set (control.kafka), the nodes are Apache Kafka's instead, in the same layout: n1
the KRaft controller, n2..nN the brokers, each the host's "node" daemon."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from control import kafka
from control import toxiproxy as tp
from control.host import Host
from control.kafka import KafkaNodes

PORT = 9092
LAZYFS_SOCK = "lazyfs.sock"


def python_argv(python: str, code: str | None) -> list[str]:
    """The start of a command that runs `python` on a host importing `code` first (the
    run's checkout; None: what the interpreter has installed)."""
    return ["env", f"PYTHONPATH={code}", python] if code else [python]


@dataclass
class Cluster:
    hosts: list[Host]
    system: Mapping[str, object]
    python: str = sys.executable
    lazyfs: bool = False
    down: set[str] = field(default_factory=set)  # hosts whose node is deliberately stopped
    toxiproxy: str | None = None  # toxiproxy-server on the hosts; None: nodes listen directly
    kafka: KafkaNodes | None = None  # Apache Kafka's nodes; None: the embedded system's
    # The checkout the hosts' Python imports first (their PYTHONPATH): netns hosts share this
    # machine's files, and without it `python -m replication` in an ssh session's home found
    # whatever the interpreter had installed (an editable install's checkout), not the code
    # the run was started from. None: what the hosts' interpreter has installed.
    code: str | None = None

    @property
    def controller_host(self) -> Host:
        return self.hosts[0]

    @property
    def broker_hosts(self) -> dict[int, Host]:
        return {i: h for i, h in enumerate(self.hosts[1:], start=1)}

    @property
    def controller_address(self) -> str:
        return f"{self.controller_host.address}:{PORT}"

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def broker_of(self, host: Host) -> int | None:
        for b, h in self.broker_hosts.items():
            if h.name == host.name:
                return b
        return None

    def bootstrap(self) -> list[str]:
        if self.kafka:
            return self.kafka.bootstrap()
        return [self.controller_address] + [f"{h.address}:{PORT}" for h in self.broker_hosts.values()]

    def _config_args(self) -> list[str]:
        args: list[str] = []
        for k, v in self.system.items():
            args += ["--config", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
        return args

    def _python(self) -> list[str]:
        """The start of a command that runs our Python on a host."""
        return python_argv(self.python, self.code)

    def node_argv(self, host: Host) -> list[str]:
        if self.kafka:
            return self.kafka.argv(host)
        advertised = f"{host.address}:{PORT}"
        listen = f"127.0.0.1:{tp.NODE_PORT}" if self.toxiproxy else advertised
        if host.name == self.controller_host.name:
            return [*self._python(), "-m", "replication", "controller", "--listen", listen,
                    "--data", str(host.data_dir), *self._config_args()]
        broker = self.broker_of(host)
        proxied: list[str] = []
        if self.toxiproxy:
            proxied = ["--advertise", advertised]
            for peer in self.hosts:
                if peer.name != host.name:
                    proxied += ["--route", f"{peer.address}:{PORT}=127.0.0.1:"
                                           f"{tp.node_port(self._index(peer))}"]
        return [*self._python(), "-m", "replication", "broker", "--id", str(broker), "--listen", listen,
                *proxied, "--controller", self.controller_address, "--data", str(host.data_dir),
                *self._config_args()]

    def start_toxiproxy(self, host: Host, seed: int = 0) -> None:
        """The host's toxiproxy-server up with exactly its proxies, no toxics left over."""
        assert self.toxiproxy, "this cluster runs without Toxiproxy"
        host.remote.run(["mkdir", "-p", str(host.log_dir)])
        tp.start(host, self.toxiproxy, seed)
        peers = [] if host.name == self.controller_host.name else self.hosts
        peer_port = kafka.PEER_PORT if self.kafka else None
        tp.ensure_proxies(host, tp.proxies_of(host, peers, PORT, self._index, peer_port))
        script = self.kafka.route_script(host, lambda p: tp.node_port(self._index(p))) \
            if self.kafka else None
        if script:  # Kafka has no --route: its connections to peers are redirected instead
            host.remote.run(script, sudo=True)

    def _index(self, host: Host) -> int:
        return self.hosts.index(host) + 1

    def lazyfs_paths(self, host: Host) -> tuple[PurePosixPath, PurePosixPath]:
        return host.work_dir / "backing", host.work_dir / LAZYFS_SOCK

    def mount_lazyfs(self, host: Host) -> None:
        """The data directory becomes a lossy page-cache FUSE mount over a backing directory."""
        backing, sock = self.lazyfs_paths(host)
        host.remote.run(["mkdir", "-p", str(backing), str(host.data_dir)])
        mapped = [a for s in self.kafka.mapped_suffixes for a in ("--page-cached", s)] \
            if self.kafka else []
        host.remote.run([*self._python(), "-m", "nemesis.lazyfs", "mount", str(backing), str(host.data_dir),
                         "--control", str(sock), *mapped], timeout=30)

    def lazyfs_ctl(self, host: Host, *command: str) -> str:
        _, sock = self.lazyfs_paths(host)
        return host.remote.run([*self._python(), "-m", "nemesis.lazyfs", "ctl", str(sock), *command],
                               timeout=30).stdout

    def umount_lazyfs(self, host: Host) -> None:
        host.remote.run([*self._python(), "-m", "nemesis.lazyfs", "umount", str(host.data_dir)],
                        timeout=30, check=False)

    def start(self, host: Host) -> None:
        host.remote.run(["mkdir", "-p", str(host.data_dir), str(host.log_dir)])
        if self.kafka and not self.kafka.is_formatted(host):
            self.format_kafka(host)
        if not host.remote.is_running("node"):
            host.remote.start_daemon("node", self.node_argv(host), host.log_dir / "node.log")
        self.down.discard(host.name)

    def format_kafka(self, host: Host) -> None:
        """A Kafka node's config and formatted storage, made durable: the cluster was set up
        long before the faults, so a power loss must not take its meta.properties."""
        assert self.kafka
        self.kafka.configure(host)
        host.remote.run(self.kafka.format_argv(host), timeout=self.kafka.settings.start_timeout_s)
        if self.lazyfs:
            self.lazyfs_ctl(host, "flush-all")

    def signal(self, host: Host, sig: str) -> bool:
        return host.remote.signal("node", sig)

    def kill(self, host: Host) -> None:
        self.signal(host, "KILL")
        self.down.add(host.name)

    def stop_clean(self, host: Host, timeout: float = 20.0) -> None:
        """SIGTERM and wait: the node's controlled shutdown."""
        pid = host.remote.pid("node")
        self.down.add(host.name)
        if pid is None:
            return
        self.signal(host, "CONT")
        self.signal(host, "TERM")
        host.remote.run(["sh", "-c", f"for i in $(seq {int(timeout * 10)}); do "
                         f"kill -0 {shlex.quote(str(pid))} 2>/dev/null || exit 0; "
                         "sleep 0.1; done; exit 1"], check=False, timeout=timeout + 5)
