"""The embedded default host provider: N network-namespace hosts on this machine.

Layout of a cluster directory:
    ssh/id_ed25519[.pub], ssh/authorized_keys, ssh/known_hosts   ephemeral, per cluster
    n<i>/sshd/   sshd_config, host key, sshd.pid, sshd.log
    n<i>/data/   the node's data directory (events.jsonl lands in n<i>/)
    n<i>/run/    pidfiles of daemons   n<i>/logs/  node logs
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from harness.hosts import cleanup, keys, netns, slots, sshd
from harness.hosts.control import Endpoint, Remote
from harness.hosts.host import Host

MARKER = ".kch-cluster"  # only directories carrying it are ever wiped


class NetnsProvider:
    def __init__(self, cluster_dir: Path, n: int) -> None:
        if not 1 <= n <= slots.MAX_HOSTS:
            raise ValueError(f"nodes must be between 1 and {slots.MAX_HOSTS}, got {n}")
        self.cluster_dir = Path(cluster_dir).absolute()
        self.n = n
        self.hosts: list[Host] = []
        self._lease: slots.SlotLease | None = None

    @property
    def slot(self) -> int | None:
        return self._lease.slot if self._lease else None

    @property
    def ssh_dir(self) -> Path:
        return self.cluster_dir / "ssh"

    def __enter__(self) -> list[Host]:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> list[Host]:
        """Create the hosts and connect to each; on any failure everything is undone."""
        if self._lease is not None:
            raise RuntimeError("cluster is already up")
        # A crashed run may have left processes or FUSE mounts inside this very directory.
        cleanup.cleanup_stale()
        _refuse_if_live(self.cluster_dir)
        self._prepare_dir()
        self._lease = _acquire_slot()
        try:
            self._lease.write_state({"cluster_dir": str(self.cluster_dir), "n": self.n,
                                     "pid": os.getpid()})
            addresses = netns.create_network(self._lease.slot, self.n)
            self.hosts = self._start_hosts(addresses)
        except BaseException:
            self.down()
            raise
        return self.hosts

    def down(self) -> None:
        """Stop everything of this cluster; idempotent. Files in cluster_dir are kept."""
        for host in self.hosts:
            host.remote.close()
        self.hosts = []
        if self._lease is not None:
            cleanup.clean_slot(self._lease.slot, str(self.cluster_dir))
            self._lease.release()
            self._lease = None

    def _prepare_dir(self) -> None:
        d = self.cluster_dir
        if d.exists():
            if not (d / MARKER).exists() and any(d.iterdir()):
                raise FileExistsError(f"{d} exists, is not empty and is not a kch cluster directory")
            shutil.rmtree(d)
        d.mkdir(mode=0o700, parents=True)
        st = d.stat()
        if st.st_uid != os.getuid():
            raise PermissionError(f"{d} is not owned by uid {os.getuid()}")
        (d / MARKER).write_text("")

    def _start_hosts(self, addresses: list[str]) -> list[Host]:
        slot = self.slot
        assert slot is not None
        self.ssh_dir.mkdir(mode=0o700)
        client = keys.generate_ed25519(self.ssh_dir / "id_ed25519", f"kch-{self.cluster_dir.name}")
        keys.write_authorized_keys(self.ssh_dir / "authorized_keys", [client.public_line])
        specs, host_keys = [], []
        for i, address in enumerate(addresses, start=1):
            hdir = self.cluster_dir / f"n{i}"
            for sub in ("data", "run", "logs"):
                (hdir / sub).mkdir(parents=True)
            spec = sshd.SshdSpec(slots.netns_name(slot, i), address, hdir / "sshd",
                                 self.ssh_dir / "authorized_keys")
            sshd.write_config(spec)
            host_keys.append((address, 22, keys.generate_ed25519(spec.host_key, f"n{i}").public_line))
            specs.append(spec)
        keys.write_known_hosts(self.ssh_dir / "known_hosts", host_keys)
        sshd.start_all(specs)
        hosts = [self._host(i, a) for i, a in enumerate(addresses, start=1)]
        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
            list(pool.map(lambda h: h.remote.connect(), hosts))
        return hosts

    def _host(self, index: int, address: str) -> Host:
        hdir = PurePosixPath(self.cluster_dir / f"n{index}")
        endpoint = Endpoint(
            name=f"n{index}", address=address, port=22, user="root",
            key_file=self.ssh_dir / "id_ed25519", known_hosts=self.ssh_dir / "known_hosts",
            run_dir=hdir / "run",
        )
        return Host(f"n{index}", address, hdir / "data", hdir / "run", hdir / "logs", Remote(endpoint))


def _refuse_if_live(cluster_dir: Path) -> None:
    for slot in slots.recorded_slots():
        state = slots.read_state(slot)
        if state.get("cluster_dir") == str(cluster_dir):
            if not slots.is_locked(slot):
                continue  # stale: cleanup_stale() has just removed or will remove it
            raise RuntimeError(f"{cluster_dir} is in use by a live cluster (pid {state.get('pid')})")


def _acquire_slot() -> slots.SlotLease:
    for slot in range(slots.MAX_SLOTS):
        lease = slots.try_lock(slot)
        if lease is None:
            continue
        # Anything still present under a slot nobody holds was left by a crashed run.
        cleanup.clean_slot(slot, slots.read_state(slot).get("cluster_dir"))
        return lease
    raise RuntimeError(f"all {slots.MAX_SLOTS} network slots are held by live clusters")
