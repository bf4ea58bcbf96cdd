"""The `ssh` provider: hosts listed in an inventory (real machines, or vagrant/ VMs)."""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.hosts.control import Endpoint, Remote
from harness.hosts.host import Host
from harness.hosts.inventory import HostEntry, load_inventory
from nemesis.partition import heal


class SshProvider:
    """up() connects to every host, stops daemons a crashed run left there (by pidfile),
    heals leftover partitions and gives each host fresh data and log directories."""

    def __init__(self, inventory: Path) -> None:
        self.inventory = Path(inventory)
        self.entries = load_inventory(self.inventory)
        self.hosts: list[Host] = []

    def __enter__(self) -> list[Host]:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> list[Host]:
        hosts = [_host(e) for e in self.entries]
        try:
            with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
                list(pool.map(_prepare, hosts))
        except BaseException:
            for h in hosts:
                h.remote.close()
            raise
        self.hosts = hosts
        return hosts

    def down(self) -> None:
        """Stop every daemon started through the hosts and close the connections."""
        if not self.hosts:
            return
        with ThreadPoolExecutor(max_workers=min(16, len(self.hosts))) as pool:
            list(pool.map(lambda h: h.remote.stop_all(), self.hosts))
        for h in self.hosts:
            h.remote.close()
        self.hosts = []


def _host(entry: HostEntry) -> Host:
    hdir = entry.work_dir / entry.name
    endpoint = Endpoint(entry.name, entry.address, entry.port, entry.user, entry.key_file,
                        entry.known_hosts, hdir / "run", sudo=entry.sudo)
    return Host(entry.name, entry.address, hdir / "data", hdir / "run", hdir / "logs",
                Remote(endpoint))


def _prepare(host: Host) -> None:
    host.remote.connect()
    host.remote.stop_all()
    heal([host])
    # A FUSE data directory whose daemon died with the crashed run is a dead mount.
    data = shlex.quote(str(host.data_dir))
    host.remote.run(f"if mountpoint -q {data}; then fusermount3 -uz {data}; fi", sudo=True)
    host.remote.run(["rm", "-rf", "--", str(host.data_dir), str(host.log_dir)])
    host.remote.run(["mkdir", "-p", "--", str(host.data_dir), str(host.run_dir), str(host.log_dir)])
