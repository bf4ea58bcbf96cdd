"""Apache Kafka broker versions on this machine: resolved by Maven from the repository's
systems/kafka/pom.xml into `.venv/kafka/<version>/libs`, the classpath every host runs
(`java -cp 'libs/*' kafka.Kafka`). `make bootstrap` runs `python -m control.kafka_install`
for the pinned versions; docs/kafka.md says more.

Maven resolves each version's whole runtime closure (about 45 MB, 25-50 s), so no tarball is
fetched and nothing is installed by hand. A missing `java` or `mvn` is one clear error."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# The versions `make bootstrap` resolves: the last 3.x (no ELR) and a 4.x with KIP-966's
# Eligible Leader Replicas on by default (from 4.1).
VERSIONS = ("3.9.1", "4.2.1")
DEFAULT_VERSION = "4.2.1"
POM = Path(__file__).resolve().parents[1] / "systems" / "kafka" / "pom.xml"
_VERSION = re.compile(r"[34]\.\d{1,2}\.\d{1,2}")
_DONE = ".resolved"  # written last: a folder without it is an interrupted resolve


class KafkaInstallError(RuntimeError):
    """A version that is not installed or cannot be resolved; the message is one line."""


def root() -> Path:
    """Where versions live: $HARNESS_KAFKA_HOME, else the venv's kafka/ folder."""
    return Path(os.environ.get("HARNESS_KAFKA_HOME") or Path(sys.prefix) / "kafka")


def check_version(version: str) -> str:
    if not _VERSION.fullmatch(version):
        raise KafkaInstallError(f"kafka.version {version!r} is not a Kafka 3.x or 4.x release "
                                "number such as 3.9.1 or 4.2.1")
    return version


def libs_dir(version: str) -> Path:
    return root() / check_version(version) / "libs"


def is_installed(version: str) -> bool:
    return (libs_dir(version).parent / _DONE).is_file()


def java() -> str:
    """The `java` the brokers run with ($JAVA_HOME's first, as Kafka's own scripts do)."""
    home = os.environ.get("JAVA_HOME")
    found = (str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").is_file()
             else shutil.which("java"))
    if not found:
        raise KafkaInstallError("Kafka needs Java 17 or newer: no `java` on the PATH or in "
                                "$JAVA_HOME (Debian: apt-get install openjdk-17-jre-headless)")
    return found


def require(version: str) -> Path:
    """The classpath folder of an installed version, or a one-line error that says how to
    install it."""
    if not is_installed(version):
        raise KafkaInstallError(f"Kafka {version} is not installed under {root()}: run `make "
                                f"bootstrap` (it resolves {', '.join(VERSIONS)}) or `.venv/bin/"
                                f"python -m control.kafka_install {version}`")
    return libs_dir(version)


def install(version: str) -> Path:
    """Resolve a version's runtime classpath with Maven (nothing done when present)."""
    if is_installed(version):
        return libs_dir(version)
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaInstallError("resolving Kafka needs Maven: no `mvn` on the PATH (Debian: "
                                "apt-get install maven)")
    java()
    target = libs_dir(version).parent
    target.parent.mkdir(parents=True, exist_ok=True)
    # A private scratch folder renamed into place: an interrupted resolve leaves no half folder
    scratch = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=target.parent))
    try:
        profile = "kafka3" if version.startswith("3.") else "kafka4"
        argv = [mvn, "-q", "-B", "-f", str(POM), f"-Dkafka.version={version}", "-P", profile,
                "dependency:copy-dependencies", "-DincludeScope=runtime",
                f"-DoutputDirectory={scratch / 'libs'}"]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            raise KafkaInstallError(f"mvn could not resolve Kafka {version}: {' | '.join(tail)}")
        (scratch / _DONE).write_text(version + "\n")
        scratch.chmod(0o755)
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return libs_dir(version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m control.kafka_install",
                                     description="resolve Kafka broker versions with Maven")
    parser.add_argument("versions", nargs="*", default=list(VERSIONS))
    args = parser.parse_args(argv)
    try:
        for version in args.versions:
            fresh = not is_installed(check_version(version))
            path = install(version)
            print(f"kafka {version}: {path}{' (resolved now)' if fresh else ''}")
    except KafkaInstallError as e:
        print(f"kafka_install: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
