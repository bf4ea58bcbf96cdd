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


# ---- the workers: a config crosses a process boundary as TestConfig.record() ---------------------

# The modules that hand a config to another process (a search's worker processes and Spark
# tasks, the PyPy child, a mutation child) or keep one across candidates (shrink, campaigns).
WORKERS = ("harness/simulate.py", "harness/sim_worker.py", "harness/sim_run.py",
           "harness/shrink.py", "harness/campaign.py", "harness/pypy.py", "harness/mutate",
           "harness/commands/simulate.py", "harness/commands/mutate.py")
DICT_CONFIG = re.compile(r"\b(config|cfg|configs)\s*:\s*(dict|Mapping)\b")
# the one dict helper left: simulated() for the editors of a file's config before it is typed
DICT_HELPERS = {"harness/sim_run.py": "def as_simulated("}


def dict_configs() -> list[str]:
    hits = []
    for name in WORKERS:
        paths = sorted((ROOT / name).rglob("*.py")) if (ROOT / name).is_dir() else [ROOT / name]
        for path in paths:
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if DICT_CONFIG.search(line) and DICT_HELPERS.get(rel, "\0") not in line:
                    hits.append(f"{rel}:{n}: {line.strip()}")
    return hits


def test_the_workers_take_the_typed_config_and_send_its_record():
    assert not dict_configs(), ("a worker takes a config as a dict: take a TestConfig, and "
                                "cross a process boundary with record() / TestConfig.load")


def test_the_dict_config_pattern_sees_a_dict_config():
    # the twin of the contract above: the pattern it relies on sees the old signatures
    assert DICT_CONFIG.search("def search(config: Mapping[str, Any], seeds: Iterable[int]):")
    assert DICT_CONFIG.search("    config: dict[str, Any]")
    assert not DICT_CONFIG.search("def search(config: TestConfig, seeds: Iterable[int]):")
    assert all((ROOT / name).exists() for name in WORKERS)


def test_a_record_loads_back_to_the_same_config_for_every_validation_cell():
    from dataclasses import replace

    from harness.campaign_spec import load_spec
    from harness.config import ConfigError, TestConfig, typed
    from harness.sim_run import simulated

    _, cells = load_spec(ROOT / "campaigns" / "validation.toml")
    for cell in cells:
        config = simulated(typed(cell.resolved))
        assert TestConfig.load(config.record()) == config, cell.id
    # not an identity: a changed record is another config, a broken one is refused by name
    assert TestConfig.load(replace(config, seed=config.seed + 1).record()) != config
    with pytest.raises(ConfigError, match="nodes"):
        TestConfig.load({**config.record(), "nodes": "many"})
