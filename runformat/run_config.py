"""What the checkers and reports read of a stored run's configuration: test.json's `config`.

harness/config.py parses and validates a configuration before a run and writes it whole into
test.json; afterwards a run folder may be of any age, or written by another tool
(checkers/jepsen_kafka.py), so a key may be missing. `RunConfig.of` reads the few settings the
checks and reports use, with the defaults a run of any age had, and says in one line which
value is malformed: the one place below harness that reads the record by its keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# every spelling of `[workload] acks` a config may hold, and what it means
ACKS = {"all": "all", "-1": "all", "1": "1", "0": "0", -1: "all", 1: "1", 0: "0"}


class RunConfigError(ValueError):
    """A malformed value in a stored config; the message names its key (config.X.Y)."""


@dataclass(frozen=True)
class RunConfig:
    topic: str | None = None
    partitions: int | None = None
    acks: str | None = None  # "all", "1" or "0"; None when the run did not say
    transformers: int = 0  # consume-transform-produce transformers (workload.kind = "txn")
    allow: tuple[str, ...] = ()  # anomalies the run expects (never a failed verdict)
    spark_master: str | None = None
    spark_min_ops: int | None = None
    ww_deps: bool = False
    system_kind: str = "embedded"  # or "kafka"
    kafka_version: str | None = None
    min_insync_replicas: int = 1
    elr_enabled: bool = True
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)  # as written, to show it

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> RunConfig:
        """The typed view of a stored config; RunConfigError for a malformed value."""
        topic, workload, checker, system = (_table(config, t) for t in
                                            ("topic", "workload", "checker", "system"))
        flat = _flat(system)
        return cls(
            topic=_optional(topic, "topic", "name", str) or None,
            partitions=_partitions(topic.get("partitions")),
            acks=_acks(workload.get("acks")),
            transformers=_count(workload, "workload", "transformers"),
            allow=_allow(checker.get("allow", [])),
            spark_master=_optional(checker, "checker", "spark_master", str) or None,
            spark_min_ops=_min_ops(checker.get("spark_min_ops")),
            ww_deps=bool(checker.get("ww_deps", False)),
            system_kind=str(system.get("kind", "embedded")),
            kafka_version=_optional(_table(config, "kafka"), "kafka", "version", str),
            min_insync_replicas=_count(flat, "system", "min.insync.replicas", default=1),
            elr_enabled=str(flat.get("eligible.leader.replicas.enable", True)).lower() != "false",
            raw=config,
        )

    @classmethod
    def shown(cls, config: Any) -> RunConfig:
        """For a report, which shows whatever it can: a malformed config reads as empty."""
        try:
            return cls.of(config if isinstance(config, Mapping) else {})
        except RunConfigError:
            return cls(raw=config if isinstance(config, Mapping) else {})

    def setting(self, table: str | None, key: str) -> Any:
        """The value as written of `key` in `table` (None: the top level), or None."""
        scope = self.raw.get(table) if table else self.raw
        return scope.get(key) if isinstance(scope, Mapping) else None


def _table(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    table = config.get(name, {})
    if not isinstance(table, Mapping):
        raise RunConfigError(f"config.{name} must be a table, got {table!r:.60}")
    return table


def _flat(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys written as nested tables (min.insync.replicas) back as one name."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _optional(table: Mapping[str, Any], name: str, key: str, kind: type) -> Any:
    value = table.get(key)
    if value is not None and not isinstance(value, kind):
        raise RunConfigError(f"config.{name}.{key} must be a {kind.__name__}, got {value!r:.60}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _partitions(value: Any) -> int | None:
    if value is not None and (not _is_int(value) or not 1 <= value <= 2**31):
        raise RunConfigError(f"config.topic.partitions must be a positive integer, "
                             f"got {value!r:.60}")
    return value


def _acks(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int) or value not in ACKS:
        raise RunConfigError(f'config.workload.acks must be "0", "1" or "all", got {value!r:.60}')
    return ACKS[value]


def _count(table: Mapping[str, Any], name: str, key: str, default: int = 0) -> int:
    value = table.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RunConfigError(f"config.{name}.{key} must be an integer, got {value!r:.60}") from None


def _allow(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(a, str) for a in value):
        raise RunConfigError("config.checker.allow must be a list of anomaly names")
    return tuple(value)


def _min_ops(value: Any) -> int | None:
    if value is not None and (not _is_int(value) or value < 0):
        raise RunConfigError(f"config.checker.spark_min_ops must be an integer >= 0, "
                             f"got {value!r:.60}")
    return value
