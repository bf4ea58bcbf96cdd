"""The host provider a run's config asks for (`[hosts]`), and the interpreter its nodes use."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from control import kafka_hosts, kafka_install
from control.host import Host
from control.inventory import HostEntry, InventoryError
from control.netns_provider import NetnsProvider
from control.parallel import on_hosts
from control.ssh_provider import SshProvider
from control.toxiproxy import local_binary


class Provider(Protocol):
    python: str  # the interpreter that runs `-m replication` and `-m nemesis.lazyfs` on the hosts
    code: str | None  # the checkout that interpreter imports first; None: what it has installed

    def up(self) -> list[Host]: ...

    def down(self) -> None: ...

    def toxiproxy_server(self) -> str:
        """toxiproxy-server on the hosts (a clear error when it cannot be there)."""
        ...

    def kafka(self, hosts: list[Host], version: str, libs: Path) -> tuple[str, dict[str, str]]:
        """Apache Kafka on the hosts: the `java` that runs it and each host's classpath folder
        (`libs` is the local one; a clear error when the hosts cannot run it)."""
        ...


# The checkout this package was imported from (the harness's packages sit side by side in it).
CHECKOUT = Path(__file__).resolve().parents[1]


class LocalNetnsProvider(NetnsProvider):
    """Netns hosts share this machine's filesystem, so they run our own interpreter and the
    toxiproxy-server `make bootstrap` built."""

    python = sys.executable
    code = str(CHECKOUT)

    def toxiproxy_server(self) -> str:
        return local_binary()

    def kafka(self, hosts: list[Host], version: str, libs: Path) -> tuple[str, dict[str, str]]:
        return kafka_install.java(), {h.name: str(libs) for h in hosts}


class InventoryProvider(SshProvider):
    """The first `nodes` hosts of an inventory; n1 (the controller) is the first listed."""

    def __init__(self, inventory: Path, nodes: int) -> None:
        super().__init__(inventory)
        if len(self.entries) < nodes:
            raise InventoryError(f"{self.inventory}: lists {len(self.entries)} host(s), "
                                 f"but the run needs nodes = {nodes}")
        self.entries = self.entries[:nodes]
        self.python = shared_value(self.inventory, self.entries, "python")
        self.code = None

    def toxiproxy_server(self) -> str:
        return shared_value(self.inventory, self.entries, "toxiproxy")

    def kafka(self, hosts: list[Host], version: str, libs: Path) -> tuple[str, dict[str, str]]:
        """Each host's JVM checked, the classpath copied over SSH (control/kafka_hosts.py)."""
        java = shared_value(self.inventory, self.entries, "java")
        on_hosts(hosts, lambda h: kafka_hosts.check_java(h, java))
        folders = on_hosts(hosts, lambda h: kafka_hosts.place_libs(h, libs, version))
        return java, {h.name: str(f) for h, f in zip(hosts, folders, strict=True)}


def shared_value(inventory: Path, entries: Sequence[HostEntry], key: str) -> str:
    """The one value of `key` (python, java, toxiproxy) of the hosts used: a cluster starts every node
    the same way."""
    found = {getattr(e, key) for e in entries}
    if len(found) != 1 or "" in found:
        detail = ", ".join(f"{e.name}: {getattr(e, key)!r}" for e in entries)
        raise InventoryError(f"{inventory}: {key} must be one non-empty path for all the hosts "
                             f"a run uses (set it in [defaults]); got {detail}")
    return found.pop()


def make_provider(provider: str, nodes: int, inventory: str | None = None,
                  cluster_dir: Path | None = None, *, name: str = "cluster") -> Provider:
    """The provider of a run's [hosts] (`provider`, its `inventory`) for `nodes` hosts.
    `cluster_dir` is the netns cluster's local folder; None gives a fresh private one in the
    temp dir, named kch-<name>-<random>, that the provider removes when it goes down."""
    if provider == "netns":
        return LocalNetnsProvider(cluster_dir, nodes, prefix=f"kch-{name}-")
    if provider == "ssh" and inventory is not None:
        return InventoryProvider(Path(inventory), nodes)
    raise ValueError(f"hosts.provider: unknown provider {provider!r} (or ssh without an inventory)")
