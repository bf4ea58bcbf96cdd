"""Which system a run is on, as a command line or a campaign names it, and a config moved there.

    sim             the embedded system in the deterministic simulator
    embedded        the embedded system on real hosts
    kafka[:X.Y.Z]   Apache Kafka on real hosts (the default version without X.Y.Z)

Moving a config onto Kafka keeps everything Kafka has (acks, min.insync.replicas, unclean
election, ELR, flush policy, timeouts) and sets the embedded system's weakness switches, which
Kafka has no equivalent of, back to Kafka's own behaviour, saying so: a schedule that loses
data because of one of them is still run on Kafka, where it must lose nothing
(docs/differential.md). Kafka's stale reads are allowed there, as campaigns/kafka.toml does. The hosts are the config's own, netns for a simulated one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkers.exitcodes import UserError
from control import kafka_install
from control.kafka import WEAKNESS_DEFAULTS
from harness.config import KIND, typed, validate, with_values
from harness.sim_run import SIM, as_simulated

KINDS = ("sim", "embedded", "kafka")
STALE_READ = "stale-read"


@dataclass(frozen=True)
class SystemSpec:
    kind: str  # sim | embedded | kafka
    version: str | None = None  # Kafka's, None for the others

    @property
    def label(self) -> str:
        return f"kafka:{self.version}" if self.kind == "kafka" else self.kind


def parse_system(text: str) -> SystemSpec:
    """`sim`, `embedded`, `kafka` or `kafka:3.9.1`; a UserError names what is known."""
    kind, _, version = text.strip().partition(":")
    if kind not in KINDS or (version and kind != "kafka"):
        raise UserError(f"unknown system {text!r}: use sim, embedded, kafka or kafka:VERSION "
                        f"(versions: {', '.join(kafka_install.VERSIONS)})")
    if kind != "kafka":
        return SystemSpec(kind)
    version = version or kafka_install.DEFAULT_VERSION
    if version not in kafka_install.VERSIONS:
        raise UserError(f"unknown Kafka version {version!r} in {text!r}: "
                        f"{', '.join(kafka_install.VERSIONS)} are installed by make bootstrap")
    return SystemSpec(kind, version)


def parse_systems(text: str) -> list[SystemSpec]:
    """A comma-separated list of systems, each named once."""
    specs = [parse_system(t) for t in text.split(",") if t.strip()]
    labels = [s.label for s in specs]
    if not specs or len(set(labels)) != len(labels):
        raise UserError(f"--systems needs distinct systems, got {text!r}")
    return specs


def on_system(config: Mapping[str, Any], spec: SystemSpec,
              real_hosts: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The config moved onto `spec`, validated, and one note per setting changed on the way.
    `real_hosts`: the [hosts] table a simulated config runs on when moved onto real hosts."""
    t = typed(config)
    source = f"the config moved onto {spec.label}"
    if t.hosts.provider == SIM and spec.kind != "sim":
        config = {**config, "hosts": dict(real_hosts or {"provider": "netns"})}
    values: dict[str, Any] = {f"system.{KIND}": "kafka" if spec.kind == "kafka" else "embedded"}
    notes: list[str] = []
    if spec.kind == "kafka":
        values["kafka.version"] = spec.version
        notes += _kafka_behaviour(t.node_settings, values) + _kafka_reads(t.checker.allow, values)
    out = with_values(config, values, source)
    return (validate(as_simulated(out), source=source) if spec.kind == "sim" else out), notes


def _kafka_behaviour(system: Mapping[str, Any], values: dict[str, Any]) -> list[str]:
    """Weakness switches set back to what Kafka does (into `values`), with a note for each."""
    notes = []
    for key, default in WEAKNESS_DEFAULTS.items():
        if key in system and system[key] != default:
            notes.append(f"system.{key} = {system[key]!r} has no Kafka equivalent: "
                         f"Kafka behaves as {default!r}")
            values[f"system.{key}"] = default
    return notes


def _kafka_reads(allow: Sequence[str], values: dict[str, Any]) -> list[str]:
    """Kafka's consumers read a deposed or restarted leader's own high watermark, which the
    checker calls stale-read (docs/kafka.md, finding 4): allowed (into `values`), so that
    what is compared across systems is what was lost."""
    if STALE_READ in allow:
        return []
    values["checker.allow"] = [*allow, STALE_READ]
    return [f"checker.allow += {STALE_READ}: Kafka serves reads from a deposed leader "
            "(docs/kafka.md); what is compared is what was lost"]


def expectation_on(expect: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """A cell's expectation once its config was moved: a weakness switch set back to Kafka's
    behaviour leaves nothing that may lose data, so the cell expects no loss there."""
    was, now = typed(before).node_settings, typed(after).node_settings
    reset = any(was.get(k) != now.get(k) for k in WEAKNESS_DEFAULTS)
    return "no-loss" if reset else expect
