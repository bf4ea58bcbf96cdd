"""The embedded default host provider: N network-namespace hosts on this machine.

Layout of a cluster directory:
    ssh/id_ed25519[.pub], ssh/authorized_keys, ssh/known_hosts   ephemeral, per cluster
    n<i>/sshd/   sshd_config, host key, sshd.pid, sshd.log
    n<i>/data/   the node's data directory (events.jsonl lands in n<i>/)
    n<i>/run/    pidfiles of daemons   n<i>/logs/  node logs

It holds private keys and configurations root's sshds read, so it is root's alone: a fresh
mkdtemp directory when none is given (removed again by down(), or by cleanup_stale() after a
crash), else a directory checked -- with lstat, never through a symlink -- to be ours, 0700,
under parents nobody else can rename things in.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from control import cleanup, keys, netns, slots, sshd, toxiproxy
from control.files import (
    UnsafePathError,
    check_private_dir,
    check_trusted_parents,
    make_private_tempdir,
    remove_private_dir,
)
from control.host import Host
from control.parallel import on_hosts
from control.remote import Endpoint, Remote

MARKER = cleanup.CLUSTER_MARKER  # only directories carrying it are ever wiped


class NetnsProvider:
    def __init__(self, cluster_dir: Path | None, n: int, *, prefix: str = "kch-") -> None:
        """`cluster_dir` None: up() makes a fresh private directory named `prefix`... in the
        temp dir (unique even for simultaneous runs), and down() removes it."""
        if not 1 <= n <= slots.MAX_HOSTS:
            raise ValueError(f"nodes must be between 1 and {slots.MAX_HOSTS}, got {n}")
        self.temporary = cluster_dir is None
        self.cluster_dir: Path = (Path(cluster_dir).absolute() if cluster_dir is not None
                                  else Path())  # set by up()
        self._prefix = prefix
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
        if self.temporary:
            self.cluster_dir = make_private_tempdir(self._prefix)
            (self.cluster_dir / MARKER).write_text("")
        else:
            _refuse_if_live(self.cluster_dir)
            self._prepare_dir()
        try:
            self._lease = _acquire_slot()
            self._lease.write_state({"cluster_dir": str(self.cluster_dir), "n": self.n,
                                     "pid": os.getpid(), "remove_dir": self.temporary})
            addresses = netns.create_network(self._lease.slot, self.n)
            self.hosts = self._start_hosts(addresses)
        except BaseException:
            self.down()
            raise
        return self.hosts

    def down(self) -> None:
        """Stop everything of this cluster; idempotent. Files in a given cluster_dir are
        kept; a temporary one is removed."""
        for host in self.hosts:
            host.remote.close()
        self.hosts = []
        if self._lease is not None:
            cleanup.clean_slot(self._lease.slot, str(self.cluster_dir), remove_dir=self.temporary)
            self._lease.release()
            self._lease = None
        elif self.temporary and self.cluster_dir != Path():
            remove_private_dir(self.cluster_dir, MARKER)

    def _prepare_dir(self) -> None:
        """An empty private cluster_dir carrying MARKER; an old cluster directory of ours is
        emptied, anything else refused."""
        d = self.cluster_dir
        d.parent.mkdir(parents=True, exist_ok=True)
        check_trusted_parents(d)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            st = os.lstat(d)
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
                raise FileExistsError(f"{d} exists and is not a directory (a symlink or a "
                                      "file): not a kch cluster directory") from None
            if not (d / MARKER).exists() and any(d.iterdir()):
                raise FileExistsError(f"{d} exists, is not empty and is not a kch cluster "
                                      "directory") from None
            if st.st_uid != os.geteuid():
                raise UnsafePathError(f"{d} is owned by uid {st.st_uid}, not {os.geteuid()}: "
                                      "refusing to use it") from None
            for child in list(d.iterdir()):  # never follows a symlink: removes the link
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
            os.chmod(d, 0o700)
        check_private_dir(d)
        (d / MARKER).write_text("")

    def _start_hosts(self, addresses: list[str]) -> list[Host]:
        slot = self.slot
        assert slot is not None
        self.ssh_dir.mkdir(mode=0o700)
        client = keys.generate_ed25519(self.ssh_dir / "id_ed25519", f"kch-{self.cluster_dir.name}")
        # The one forward the key may open: to Toxiproxy's API on a host's loopback.
        keys.write_authorized_keys(self.ssh_dir / "authorized_keys", [client.public_line],
                                   permit_open=f"{toxiproxy.API_HOST}:{toxiproxy.API_PORT}")
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
        on_hosts(hosts, lambda h: h.remote.connect())
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
        state = slots.read_state(slot)
        cleanup.clean_slot(slot, state.get("cluster_dir"), remove_dir=state.get("remove_dir") is True)
        return lease
    raise RuntimeError(f"all {slots.MAX_SLOTS} network slots are held by live clusters")
