"""One test run on real hosts, as nested phases, each with its own guaranteed teardown:

    hosts     provider up                          -> provider down
    cluster   heal leftovers, lazyfs, nodes, topic -> collect logs/events/data, stop nodes
    exercise  nemesis + workload, heal, final read
    verdict   check, report (when the test asks for it: harness.verdict, as simulated runs)

Everything is timed by the run's one clock (harness.test.RunClock)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm import tqdm

from checkers.exitcodes import run_interruptible
from control import cleanup
from control.cluster import Cluster
from control.host import Host
from control.parallel import on_hosts
from control.provider import Provider, make_provider
from harness import store
from harness.system import System, system_of
from harness.test import RunClock, Test
from harness.verdict import verdict_step
from nemesis.faults import Nemesis
from nemesis.hosts_world import HostsWorld, heal_network
from nemesis.kinds import needs_lazyfs
from nemesis.lazyfs.mount import prune_registry
from nemesis.schedule import ScheduleRecord
from runformat import Event, Tally, node_events
from workloads import sequence
from workloads.history import HistoryWriter
from workloads.kafka import WorkloadParams
from workloads.sequence import Workload

# The history's lines are written out in pieces of this size, or this often, whichever comes
# first (HistoryWriter): a write() per line took a tenth of the workload's loop at 20,000/s.
HISTORY_BUFFER = 256 * 1024
HISTORY_FLUSH_S = 0.05


def say(msg: str) -> None:
    print(f"[harness] {msg}", file=sys.stderr, flush=True)


def clean_leftovers() -> tuple[list[int], list[str]]:
    """What crashed or interrupted runs left: their netns clusters (slots cleaned), and the
    lossy filesystem's registry entries of daemons that are gone (paths removed)."""
    cleaned = cleanup.cleanup_stale()
    try:
        pruned = prune_registry()
    except OSError as e:  # an unsafe or unreadable registry: said, never fatal here
        say(f"lazyfs registry not pruned: {e}")
        pruned = []
    return cleaned, pruned


def run_test(test: Test) -> Path:
    """Run one test and return its folder (history, schedule, events, nodes/, results)."""
    cleaned, _ = clean_leftovers()
    if cleaned:
        say(f"cleaned up {len(cleaned)} leftover cluster(s) from an earlier run")
    system = system_of(test)  # a missing Kafka install is one clear error before any host
    clock = RunClock()
    run_dir = store.new_run(test.results_root, test.config, list(test.argv), clock.wall_start,
                            latest=False)
    say(f"run folder {run_dir}")
    with HistoryWriter(run_dir / "history.jsonl", start_ns=clock.mono_start_ns,
                       buffer_bytes=HISTORY_BUFFER, flush_interval=HISTORY_FLUSH_S) as history:
        with hosts_phase(test, run_dir) as (hosts, provider, toxiproxy):
            # Only a run that got its hosts becomes results/latest: one that failed before
            # (no free slot, a bad inventory) must not hide the last real run.
            store.update_latest(test.results_root, run_dir)
            with cluster_phase(test, hosts, provider, run_dir, clock, toxiproxy,
                               system) as cluster:
                run_interruptible(exercise(test, cluster, history, run_dir, clock, system))
    if test.check:
        verdict_step(run_dir, spark_master=test.config.checker.spark_master)
    return run_dir


@contextmanager
def hosts_phase(test: Test, run_dir: Path) -> Iterator[tuple[list[Host], Provider, str | None]]:
    """The hosts, their provider, and their toxiproxy-server when the run uses Toxiproxy."""
    # A fresh private cluster directory (mkdtemp, named after the run): unique even for runs
    # started in the same second with the same seed, removed when the provider goes down.
    s = test.config
    provider = make_provider(s.hosts.provider, s.nodes, s.hosts.inventory, name=run_dir.name)
    # before any host is touched: a missing toxiproxy-server is one clear error
    toxiproxy = provider.toxiproxy_server() if test.config.hosts.toxiproxy else None
    try:
        yield provider.up(), provider, toxiproxy
    finally:
        provider.down()


@contextmanager
def cluster_phase(test: Test, hosts: list[Host], provider: Provider, run_dir: Path,
                  clock: RunClock, toxiproxy: str | None = None,
                  system: System | None = None) -> Iterator[Cluster]:
    """Nodes up on healed hosts (each behind its Toxiproxy with `toxiproxy`); whatever happens
    next, their logs, events and data are collected and they are stopped."""
    settings = test.config
    system = system or system_of(test)
    cluster = Cluster(hosts, settings.node_settings, python=provider.python, code=provider.code,
                      lazyfs=needs_lazyfs(settings.nemesis.faults), toxiproxy=toxiproxy,
                      kafka=system.nodes(hosts, run_dir.name, provider))
    for note in cluster.kafka.notes if cluster.kafka else ():
        say(f"Kafka {settings.kafka.version}: {note}")
    try:
        if cluster.toxiproxy:  # before the heal, which removes toxics a crashed run left
            on_hosts(cluster.hosts, lambda h: cluster.start_toxiproxy(h, settings.seed))
        heal_network(cluster)
        if cluster.lazyfs:
            for h in cluster.hosts:
                cluster.mount_lazyfs(h)
        cluster.start(cluster.controller_host)
        for host in cluster.broker_hosts.values():
            cluster.start(host)
        yield cluster
    finally:
        collect(cluster, run_dir, clock, system)
        stop_nodes(cluster)


class HostsEnvironment:
    """The run sequence's environment on real hosts: the system under test's cluster."""

    def __init__(self, cluster: Cluster, system: System, schedule: ScheduleRecord,
                 topic: str) -> None:
        self.cluster = cluster
        self.system = system
        self.schedule = schedule
        self.topic = topic

    async def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        await self.system.create_topic(self.cluster.bootstrap(), len(self.cluster.broker_hosts),
                                       topic, partitions, replication_factor)

    async def wait_healthy(self, topic: str, partitions: int, timeout_s: float) -> bool:
        return await self.system.wait_healthy(self.cluster.bootstrap(), topic, partitions,
                                              timeout_s)

    def workload(self, params: WorkloadParams, history: HistoryWriter) -> Workload:
        return self.system.workload(params, self.cluster.bootstrap(), history)

    def alongside(self, workload: Workload, time_limit: float) -> list[Coroutine[Any, Any, Any]]:
        return [self.system.observe(self.cluster.bootstrap(), self.topic),
                show_progress(workload, self.schedule, time_limit)]

    def say(self, msg: str) -> None:
        say(msg)


async def exercise(test: Test, cluster: Cluster, history: HistoryWriter, run_dir: Path,
                   clock: RunClock, system: System | None = None) -> None:
    """workloads.sequence on the hosts, with the nemesis playing the test's schedule."""
    s = test.config
    system = system or system_of(test)
    schedule = ScheduleRecord(run_dir / "schedule.json", test.schedule_params,
                              test.plan.entries_for(test.schedule_params))
    env = HostsEnvironment(cluster, system, schedule, s.topic.name)
    topology = system.topology([h.name for h in cluster.hosts], cluster.bootstrap(),
                               s.topic.name)
    nemesis = Nemesis(HostsWorld(cluster), topology, history, schedule, clock.workload_seconds,
                      s.nemesis.settings)

    def start() -> Any:
        clock.mark_workload_start()
        faults = ", ".join(s.nemesis.faults) or "none"
        say(f"workload for {s.time_limit:g} s with faults {faults} ({test.plan.source} plan)")
        return nemesis.run()

    await sequence.exercise(
        env, s.workload_params, history, replication_factor=s.topic.replication_factor,
        time_limit=s.time_limit, final_read_timeout=s.workload.final_read_timeout,
        faults=sequence.Faults(start=start, heal=nemesis.heal_all,
                               stopped=lambda: schedule.finish("time limit reached")))


async def show_progress(workload: Workload, schedule: ScheduleRecord, limit: float) -> None:
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
            active = [f.kind for f in schedule.faults if f.started_s is not None and f.ended_s is None]
            status = (f"{rate:6.0f} acked/s  ok={done} fail={workload.stats['send-fail']} "
                      f"info={workload.stats['send-info']}  faults: {', '.join(active) or '-'}")
            if tty:
                bar.n = min(int(now - started), int(limit))
                bar.set_postfix_str(status)
            else:
                say(f"{now - started:5.0f}/{limit:.0f} s  {status}")
    finally:
        bar.close()


def collect(cluster: Cluster, run_dir: Path, clock: RunClock,
            system: System | None = None) -> None:
    """Node logs, events and data files into nodes/<host>/; events merged onto the run clock,
    with those the system adds (Kafka's, learnt from outside: harness.kafka_events)."""
    merged: list[dict] = []
    for host in cluster.hosts:
        dest = run_dir / "nodes" / host.name
        dest.mkdir(parents=True, exist_ok=True)
        _fetch_node_files(cluster, host, dest)
        merged += [{**e, "host": host.name, "time": clock.from_wall(e["ts"])}
                   for e in _node_events(cluster, host, dest)]
    for e in system.node_events(run_dir / "nodes", cluster.hosts) if system else []:
        merged.append({**e, "time": clock.from_wall(e["ts"])})
    merged.sort(key=lambda e: e["ts"])
    with open(run_dir / "events.jsonl", "w") as f:
        for e in merged:
            f.write(json.dumps(e) + "\n")


def _fetch_node_files(cluster: Cluster, host: Host, dest: Path) -> None:
    """The node's log folder, data folder and (Kafka) config files; what cannot be fetched is
    said and skipped: a partial folder is still checkable."""
    for remote_dir, local in ((host.log_dir, dest), (host.data_dir, dest / "data")):
        try:
            host.remote.fetch_dir(remote_dir, local)
        except Exception as e:
            say(f"could not fetch {remote_dir} from {host.name}: {e}")
    for path in cluster.kafka.config_paths(host) if cluster.kafka else ():
        try:
            host.remote.get(path, dest / path.name)
        except Exception as e:
            say(f"could not fetch {path} from {host.name}: {e}")


def _node_events(cluster: Cluster, host: Host, dest: Path) -> list[Event]:
    """The embedded node's own events.jsonl (Kafka's nodes write none); a line it could not
    finish (a node killed mid-write) or a malformed one is skipped and said."""
    if cluster.kafka:
        return []
    try:
        host.remote.get(host.work_dir / "events.jsonl", dest / "events.jsonl")
    except Exception:
        return []
    tally = Tally(f"nodes/{host.name}/events.jsonl")
    events = list(node_events(dest / "events.jsonl", tally))
    for note in tally.notes():
        say(note)
    return events


def stop_nodes(cluster: Cluster) -> None:
    """The brokers all at once while the controller still runs -- a broker's SIGTERM hands its
    leadership over through the controller, and without one waits out its 10 s for that --
    then the controller. (One host after another, controller first, took 30 s of every run.)"""
    brokers = [h for h in cluster.hosts if h is not cluster.controller_host]
    on_hosts(brokers, lambda host: _stop_host(cluster, host))
    _stop_host(cluster, cluster.controller_host)


def _stop_host(cluster: Cluster, host: Host) -> None:
    try:
        host.remote.stop_all(timeout=10)
    except Exception as e:
        say(f"stopping nodes on {host.name}: {e}")
    if cluster.lazyfs:
        cluster.umount_lazyfs(host)
