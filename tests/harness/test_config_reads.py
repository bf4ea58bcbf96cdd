"""A contract: a configuration is read by its string keys only in the module that parses it.

Everything else reads a typed view: harness.config.typed (a TestConfig, section by section)
before and during a run, runformat.run_config.RunConfig of a stored run's test.json in the
checkers and reports. A new `config["workload"]` or `cfg.get("checker")` elsewhere fails here,
with its place; the fix is a field on the typed view. Pure and fast: it reads source text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runformat.run_config import RunConfig, RunConfigError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "control", "nemesis", "workloads", "checkers", "simulation", "replication",
            "runformat")
# the string-key read of a config, as the closing notes of issue 31 count them
READ = re.compile(r"""\b(config|cfg)(\[|\.get\()\s*["'][a-z_.]+["']""")
PARSERS = {
    "harness/config.py": "parses and validates a test's configuration, and builds TestConfig",
    "harness/campaign_spec.py": "parses a campaign file, whose [[config]] entries it reads",
    "runformat/run_config.py": "parses the config a stored run's test.json holds",
    "workloads/rdkafka.py": "librdkafka's own settings (`enable.idempotence`), not ours",
}


def reads() -> dict[str, list[str]]:
    """{file: [line of each string-key read]} over the production packages."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            hits = [f"{n}: {line.strip()}" for n, line in enumerate(lines, 1) if READ.search(line)]
            if hits:
                found[path.relative_to(ROOT).as_posix()] = hits
    return found


def test_only_the_parsers_read_a_config_by_its_keys():
    outside = {f: hits for f, hits in reads().items() if f not in PARSERS}
    assert not outside, ("string-key config reads outside the parsers (read a typed view: "
                         f"harness.config.typed or runformat.run_config.RunConfig): {outside}")


def test_the_pattern_still_sees_the_parsers_reads():
    # a pattern that matched nothing would pass the contract above with any code
    found = reads()
    assert len(found.get("harness/config.py", [])) >= 5
    assert any("enable.idempotence" in hit for hit in found.get("workloads/rdkafka.py", []))
    assert all((ROOT / p).is_file() for p in PARSERS)


# ---- runformat.run_config: stored runs of any age ----------------------------------------------


def test_an_old_test_json_config_reads_with_the_defaults_of_its_day():
    # a run folder's config before [checker] spark_min_ops, ww_deps, workload.transformers,
    # [kafka] and system.kind existed, with `min.insync.replicas` nested as TOML reads it
    old = {"name": "default", "seed": 3, "topic": {"name": "chaos", "partitions": 3},
           "workload": {"acks": -1, "rate": 200.0}, "checker": {"allow": ["stale-read"]},
           "system": {"min": {"insync": {"replicas": 2}},
                      "eligible.leader.replicas.enable": "false"}}
    c = RunConfig.of(old)
    assert (c.topic, c.partitions, c.acks, c.allow) == ("chaos", 3, "all", ("stale-read",))
    assert (c.transformers, c.spark_min_ops, c.ww_deps, c.spark_master) == (0, None, False, None)
    assert (c.system_kind, c.kafka_version) == ("embedded", None)
    assert (c.min_insync_replicas, c.elr_enabled) == (2, False)
    assert c.setting("workload", "rate") == 200.0 and c.setting(None, "seed") == 3
    assert c.setting("hosts", "provider") is None


def test_an_empty_config_is_what_a_run_without_test_json_assumes():
    assert RunConfig.of({}) == RunConfig()
    assert RunConfig().acks is None and RunConfig().elr_enabled


# (tests/harness/test_hardening.py holds the checker's one-line errors for the others)
@pytest.mark.parametrize("config, key", [
    ({"workload": {"acks": True}}, "config.workload.acks"),
    ({"checker": {"spark_min_ops": -1}}, "config.checker.spark_min_ops"),
    ({"workload": {"transformers": "two"}}, "config.workload.transformers"),
    ({"kafka": {"version": 4}}, "config.kafka.version"),
])
def test_a_malformed_value_is_named(config, key):
    with pytest.raises(RunConfigError, match=re.escape(key)):
        RunConfig.of(config)
    assert RunConfig.shown(config).raw == config  # a report still shows it as written
