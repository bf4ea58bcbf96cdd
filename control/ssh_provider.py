"""The `ssh` provider: hosts listed in an inventory (real machines, or vagrant/ VMs)."""

from __future__ import annotations

import shlex
from pathlib import Path

from control.host import Host
from control.inventory import HostEntry, load_inventory
from control.parallel import on_hosts
from control.remote import Endpoint, Remote


class SshProvider:
    """up() connects to every host, stops daemons a crashed run left there (by pidfile),
    and gives each host fresh data and log directories."""

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
            on_hosts(hosts, _prepare)
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
        on_hosts(self.hosts, lambda h: h.remote.stop_all())
        for h in self.hosts:
            h.remote.close()
        self.hosts = []


def _host(entry: HostEntry) -> Host:
    hdir = entry.work_dir / entry.name
    endpoint = Endpoint(entry.name, entry.address, entry.port, entry.user, entry.key_file,
                        entry.known_hosts, hdir / "run", sudo=entry.sudo)
    return Host(entry.name, entry.address, hdir / "data", hdir / "run", hdir / "logs",
                Remote(endpoint), vm=entry.libvirt_domain)


def _prepare(host: Host) -> None:
    host.remote.connect()
    host.remote.stop_all()
    # A FUSE data directory whose daemon died with the crashed run is a dead mount.
    data = shlex.quote(str(host.data_dir))
    host.remote.run(f"if mountpoint -q {data}; then fusermount3 -uz {data}; fi", sudo=True)
    # events.jsonl and lazyfs's backing directory (beside data/) too: a long-lived host keeps
    # them from run to run otherwise, and the next run would collect the earlier runs' events
    # with its own, and its nodes would find the earlier run's logs under their lazyfs mount.
    host.remote.run(["rm", "-rf", "--", str(host.data_dir), str(host.log_dir),
                     str(host.work_dir / "events.jsonl"), str(host.work_dir / "backing")])
    host.remote.run(["mkdir", "-p", "--", str(host.data_dir), str(host.run_dir), str(host.log_dir)])
