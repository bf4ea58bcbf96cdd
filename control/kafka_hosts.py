"""Apache Kafka on hosts reached over SSH (an inventory's machines or VMs): each host's JVM is
checked and the broker's classpath, resolved here by `make bootstrap` (kafka_install), is
copied to it. Netns hosts share this machine's filesystem and need neither.

The classpath goes to <host's folder>/kafka/<version>/libs and stays there between runs: the
next run copies only what differs (a jar missing or of another size) and removes jars that
are not in the local folder, so the hosts run exactly the resolved version."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from control.host import Host
from control.kafka_install import KafkaInstallError


def libs_dir(host: Host, version: str) -> PurePosixPath:
    return host.work_dir / "kafka" / version / "libs"


def check_java(host: Host, java: str) -> None:
    """A one-line error when `java` does not run on the host."""
    result = host.remote.run([java, "-version"], check=False, timeout=60)
    if not result.ok:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise KafkaInstallError(
            f"{host.name}: `{java} -version` failed ({detail[0]}): Kafka needs Java 17 or newer "
            "on every host (set `java` in the inventory; Debian: apt-get install "
            "openjdk-17-jre-headless)")


def remote_jars(host: Host, folder: PurePosixPath) -> dict[str, int]:
    """{jar name: size} in the host's folder (made if missing)."""
    listing = host.remote.run(["sh", "-c", 'mkdir -p -- "$1" && find "$1" -maxdepth 1 -type f '
                               "-printf '%f %s\\n'", "sh", str(folder)]).stdout
    jars = {}
    for line in listing.splitlines():
        name, _, size = line.rpartition(" ")
        if name and size.isdigit():
            jars[name] = int(size)
    return jars


def place_libs(host: Host, local: Path, version: str) -> PurePosixPath:
    """The host's copy of the local classpath folder, made equal to it; its path."""
    folder = libs_dir(host, version)
    there = remote_jars(host, folder)
    here = {p.name: p.stat().st_size for p in sorted(local.iterdir()) if p.is_file()}
    missing = [(local / name, folder / name) for name, size in here.items()
               if there.get(name) != size]
    if missing:
        host.remote.put_all(missing)
    stale = sorted(set(there) - set(here))
    if stale:
        host.remote.run(["rm", "-f", "--", *(str(folder / n) for n in stale)])
    return folder
