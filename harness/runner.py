"""One test run: hosts up, cluster up, workload and nemesis together, heal, final read,
collect, tear down, check, report (DESIGN.md "Runner")."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from harness import store
from harness.cluster import Cluster
from harness.hosts import cleanup
from harness.hosts.provider import make_provider
from nemesis import link
from nemesis.faults import LOSSY, Nemesis, heal_network
from nemesis.schedule import ScheduleRecord, params_from_config, replay_plan
from replication.client import Client, ClientError
from workloads.history import HistoryWriter
from workloads.kafka import KafkaWorkload, WorkloadParams

log = logging.getLogger("harness.runner")
CLUSTER_ROOT = Path("/tmp/kch")
NEEDS_LAZYFS = (*LOSSY, "page-cache-loss")


def _say(msg: str) -> None:
    print(f"[harness] {msg}", file=sys.stderr, flush=True)


def run_from_cli(args) -> int:
    if args.cleanup_only:
        cleaned = cleanup.cleanup_stale()
        _say(f"cleaned up {len(cleaned)} leftover cluster(s)")
        return 0
    run_dir = run_test(args.resolved_config, store.default_results_dir(), argv=sys.argv)
    print(run_dir / "report.html")
    results = run_dir / "results.json"
    if not results.exists():
        return 2
    from checkers.check import exit_code
    return exit_code(json.loads(results.read_text()))


def run_test(config: dict[str, Any], results_root: Path, argv: list[str] | None = None,
             replay_from: Path | None = None, check: bool = True,
             plan: list[dict] | None = None) -> Path:
    """Run one test and return its folder (history, schedule, events, nodes/, results)."""
    cleaned = cleanup.cleanup_stale()
    if cleaned:
        _say(f"cleaned up {len(cleaned)} leftover cluster(s) from an earlier run")
    run_dir = store.new_run(results_root, config, argv or [])
    _say(f"run folder {run_dir}")
    provider = make_provider(config, CLUSTER_ROOT / run_dir.name)
    history = HistoryWriter(run_dir / "history.jsonl")
    try:
        hosts = provider.up()
        lazyfs = any(f in NEEDS_LAZYFS for f in config["nemesis"]["faults"])
        cluster = Cluster(hosts, config["system"], python=provider.python, lazyfs=lazyfs)
        try:
            asyncio.run(_run(config, cluster, history, run_dir, replay_from, plan))
        finally:
            _collect(cluster, run_dir)
            _teardown(cluster)
    finally:
        history.close()
        provider.down()
    if check:
        _check_and_report(run_dir, config)
    return run_dir


async def _run(config: dict, cluster: Cluster, history: HistoryWriter, run_dir: Path,
               replay_from: Path | None, plan: list[dict] | None) -> None:
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, heal_network, cluster.hosts)
    if cluster.lazyfs:
        await loop.run_in_executor(None, lambda: [cluster.mount_lazyfs(h) for h in cluster.hosts])
    await loop.run_in_executor(None, cluster.start, cluster.controller_host)
    for host in cluster.broker_hosts.values():
        await loop.run_in_executor(None, cluster.start, host)
    topic = config["topic"]
    await _create_topic(cluster, topic)
    await _wait_healthy(cluster, topic["name"], topic["partitions"], 60)
    wl = config["workload"]
    params = WorkloadParams(topic=topic["name"], partitions=topic["partitions"], acks=str(wl["acks"]),
                            rate=float(wl["rate"]), producers=wl["producers"], consumers=wl["consumers"],
                            request_timeout_s=wl["request_timeout_ms"] / 1000, seed=config["seed"])
    workload = KafkaWorkload(params, cluster.bootstrap(), history)
    if replay_from is not None:
        from nemesis.schedule import load_schedule
        entries = replay_plan(load_schedule(replay_from / "schedule.json"))
        schedule = ScheduleRecord(run_dir / "schedule.json", params_from_config(config), entries)
    elif plan is not None:
        # A scripted scenario (tests, docs): fixed faults instead of the seed's random ones.
        schedule = ScheduleRecord(run_dir / "schedule.json", params_from_config(config), plan)
    else:
        schedule = ScheduleRecord(run_dir / "schedule.json", params_from_config(config))
    started = time.monotonic()
    nemesis = Nemesis(cluster, history, schedule, topic["name"], lambda: time.monotonic() - started,
                      link.settings(config["nemesis"]))
    _say(f"workload for {config['time_limit']} s with faults {', '.join(config['nemesis']['faults']) or 'none'}")
    nemesis_task = loop.create_task(nemesis.run())
    progress = loop.create_task(_progress(workload, nemesis, config["time_limit"]))
    try:
        await workload.run(config["time_limit"])
    finally:
        nemesis_task.cancel()
        progress.cancel()
        await asyncio.gather(nemesis_task, progress, return_exceptions=True)
        schedule.finish("time limit reached")
    _say("healing every fault and restarting stopped nodes")
    await loop.run_in_executor(None, nemesis.heal_all)
    history.nemesis("stop-all", {"healed": True})
    healthy = await _wait_healthy(cluster, topic["name"], topic["partitions"], wl["final_read_timeout"])
    if not healthy:
        _say("cluster did not fully recover (some partition has no full ISR); reading anyway")
    _say("final read")
    done = await workload.final_read(wl["final_read_timeout"])
    missing = [p for p, ok in done.items() if not ok]
    if missing:
        _say(f"final read incomplete for partitions {missing}: {workload.final_errors}")
    _say(f"workload stats: {workload.stats}")


async def _progress(workload: KafkaWorkload, nemesis: Nemesis, limit: float) -> None:
    """A progress bar on a terminal; a line every 5 s in logs (CI, campaigns under cron)."""
    tty = sys.stderr.isatty()
    width = shutil.get_terminal_size((100, 20)).columns or 100  # a pty may report 0 columns
    bar = tqdm(total=int(limit), unit="s", file=sys.stderr, disable=not tty, leave=False, ncols=width,
               bar_format="{l_bar}{bar}| {n:.0f}/{total} s {postfix}")
    started = time.monotonic()
    last, last_t = 0, started
    try:
        while True:
            await asyncio.sleep(1 if tty else 5)
            now = time.monotonic()
            done = workload.stats["send-ok"]
            rate = (done - last) / max(now - last_t, 1e-9)
            last, last_t = done, now
            active = [f.kind for f in nemesis.schedule.faults if f.started_s is not None and f.ended_s is None]
            status = (f"{rate:6.0f} acked/s  ok={done} fail={workload.stats['send-fail']} "
                      f"info={workload.stats['send-info']}  faults: {', '.join(active) or '-'}")
            if tty:
                bar.n = min(int(now - started), int(limit))
                bar.set_postfix_str(status)
            else:
                _say(f"{now - started:5.0f}/{limit:.0f} s  {status}")
    finally:
        bar.close()


async def _create_topic(cluster: Cluster, topic: dict) -> None:
    client = Client(cluster.bootstrap(), request_timeout_s=5)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                md = await client.metadata(refresh=True)
                if len(md["brokers"]) >= len(cluster.broker_hosts) and not any(
                        b["fenced"] for b in md["brokers"].values()):
                    break
            except ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("brokers did not register with the controller within 60 s")
            await asyncio.sleep(0.2)
        await client.create_topic(topic["name"], topic["partitions"], topic["replication_factor"])
    finally:
        await client.close()


async def _wait_healthy(cluster: Cluster, topic: str, partitions: int, timeout: float) -> bool:
    """Every partition has a leader and its full replica set in the ISR."""
    client = Client(cluster.bootstrap(), request_timeout_s=2)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                md = await client.metadata(refresh=True)
                states = [p for p in md["partitions"] if p["topic"] == topic]
                if len(states) == partitions and all(
                        p["leader"] is not None and set(p["isr"]) == set(p["replicas"]) for p in states):
                    return True
            except ClientError:
                pass
            await asyncio.sleep(0.3)
        return False
    finally:
        await client.close()


def _collect(cluster: Cluster, run_dir: Path) -> None:
    """Node logs, events and data files into nodes/<host>/; events merged onto the history clock."""
    test = store.read_test_json(run_dir)
    started_at = test["started_at"]
    merged: list[dict] = []
    for host in cluster.hosts:
        dest = run_dir / "nodes" / host.name
        dest.mkdir(parents=True, exist_ok=True)
        for remote_dir, local in ((host.log_dir, dest), (host.data_dir, dest / "data")):
            try:
                host.remote.fetch_dir(remote_dir, local)
            except Exception as e:  # keep collecting the rest: a partial folder is still checkable
                _say(f"could not fetch {remote_dir} from {host.name}: {e}")
        events = host.work_dir / "events.jsonl"
        try:
            host.remote.get(events, dest / "events.jsonl")
        except Exception:
            continue
        for line in (dest / "events.jsonl").read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            e["host"] = host.name
            e["time"] = int((e["ts"] - started_at) * 1e9)
            merged.append(e)
    merged.sort(key=lambda e: e["ts"])
    with open(run_dir / "events.jsonl", "w") as f:
        for e in merged:
            f.write(json.dumps(e) + "\n")


def _teardown(cluster: Cluster) -> None:
    for host in cluster.hosts:
        try:
            host.remote.stop_all(timeout=10)
        except Exception as e:
            _say(f"stopping nodes on {host.name}: {e}")
        if cluster.lazyfs:
            cluster.umount_lazyfs(host)


def _check_and_report(run_dir: Path, config: dict) -> None:
    try:
        from checkers.check import check_path
    except ImportError as e:
        _say(f"checker unavailable: {e}")
        return
    try:
        results = check_path(run_dir, spark_master=config.get("checker", {}).get("spark_master"))
        _say(f"checker verdict: valid={results['valid']}")
    except Exception as e:
        _say(f"checker failed: {e}")
    try:
        from harness.report import report_path
        report_path(run_dir)
    except Exception as e:
        _say(f"report failed: {e}")


