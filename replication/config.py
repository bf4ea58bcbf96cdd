"""Node configuration: Kafka config names, their defaults and parsing of `--config K=V`.

The defaults are Kafka's where Kafka has one, scaled down where Kafka's would make a chaos
test wait for minutes (session and lag timeouts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum

_BOOL = {"true": True, "false": False}


class RecoveryStrategy(StrEnum):
    """unclean.recovery.strategy (KIP-966)."""

    NONE = "none"
    PROACTIVE = "proactive"
    BALANCED = "balanced"
    MANUAL = "manual"
    # Apache Kafka 4.x as shipped (the controller's useLastKnownLeaderInBalancedRecovery):
    # LastKnownELR holds only the leader the partition had when its ISR emptied, and once
    # ISR and ELR are both empty that broker is elected, unclean, without asking anyone's
    # log end. KIP-966's recovery manager, which would ask, is not in Kafka 4.2.
    LAST_LEADER = "last-leader"


class ReplicaTruncation(StrEnum):
    """replica.truncation: by leader epoch (KIP-101) or, as before it, to the local HWM."""

    LEADER_EPOCH = "leader-epoch"
    HIGH_WATERMARK = "high-watermark"


class IsrUpdate(StrEnum):
    """isr.update: the leader acts on an ISR once the controller committed it, or at once."""

    CONTROLLER = "controller"
    LOCAL_FIRST = "local-first"


class ConfigError(ValueError):
    """A `--config` entry that is unknown or has a bad value."""


@dataclass(frozen=True)
class NodeConfig:
    min_insync_replicas: int = 1
    eligible_leader_replicas_enable: bool = True
    unclean_leader_election_enable: bool = False
    unclean_recovery_strategy: str = "balanced"  # none | proactive | balanced | manual | last-leader
    unclean_recovery_timeout_ms: int = 1000  # proactive: how long to wait for log-info replies
    replica_lag_time_max_ms: int = 10_000
    broker_session_timeout_ms: int = 6_000
    broker_heartbeat_interval_ms: int = 300
    replica_fetch_wait_max_ms: int = 200
    replica_fetch_max_records: int = 4096
    request_timeout_ms: int = 5_000
    flush_messages: int | None = None  # None: Kafka's Long.MAX_VALUE
    flush_ms: int | None = None
    segment_bytes: int = 64 * 1024 * 1024
    replica_truncation: str = "leader-epoch"  # leader-epoch | high-watermark (pre-KIP-101)
    unclean_shutdown_detection: bool = True
    isr_update: str = "controller"  # controller | local-first (acts before the commit)

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> NodeConfig:
        """The defaults with Kafka-named settings laid over them ({"min.insync.replicas": 2,
        "eligible.leader.replicas.enable": False}), parsed exactly as `--config K=V` is."""
        text = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.items()}
        return cls().with_overrides(text)

    def with_overrides(self, overrides: dict[str, str]) -> NodeConfig:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for key, raw in overrides.items():
            attr = key.replace(".", "_")
            if attr not in values:
                raise ConfigError(f"unknown config key {key!r}; known: {', '.join(sorted(known_keys()))}")
            values[attr] = _parse(key, raw, values[attr], attr)
        config = NodeConfig(**values)
        config.validate()
        return config

    def validate(self) -> None:
        _choice("unclean.recovery.strategy", self.unclean_recovery_strategy, RecoveryStrategy)
        _choice("replica.truncation", self.replica_truncation, ReplicaTruncation)
        _choice("isr.update", self.isr_update, IsrUpdate)
        if self.min_insync_replicas < 1:
            raise ConfigError("min.insync.replicas must be >= 1")
        for name in ("flush_messages", "flush_ms"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name.replace('_', '.')} must be >= 1")


def known_keys() -> list[str]:
    return [f.name.replace("_", ".") for f in fields(NodeConfig)]


def _integer_fields() -> set[str]:
    return {"flush_messages", "flush_ms"}


def _parse(key: str, raw: str, current: object, attr: str) -> object:
    raw = str(raw).strip()
    if isinstance(current, bool):
        if raw.lower() not in _BOOL:
            raise ConfigError(f"{key} must be true or false, got {raw!r}")
        return _BOOL[raw.lower()]
    if isinstance(current, int) or attr in _integer_fields():
        if attr in _integer_fields() and raw.lower() in ("", "none", "max"):
            return None
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {raw!r}") from None
    return raw


def _choice(key: str, value: str, allowed: Iterable[str]) -> None:
    allowed = tuple(str(a) for a in allowed)
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")


def parse_config_args(pairs: Iterable[str]) -> dict[str, str]:
    """`["a.b=1", "c=x"]` -> `{"a.b": "1", "c": "x"}` with a clear error for malformed pairs."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out
