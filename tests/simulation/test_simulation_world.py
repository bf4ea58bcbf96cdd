"""The simulated world end to end: the real protocol, client, workload and history writer in
virtual time. Determinism first, then what each fault does to acknowledged data."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.history import read_history
from support.scenarios import acknowledged_loss, partition_state, shrink_then, tour

import replication
from checkers.check import check_path
from replication import errors as E
from replication.client import Client, ClientError
from replication.config import NodeConfig
from replication.messages import ClusterMetadata
from simulation.run import run_simulation
from simulation.world import World
from workloads.history import HistoryWriter
from workloads.kafka import KafkaWorkload, WorkloadParams

ROOT = Path(replication.__file__).resolve().parent.parent
# harness/profiles/fast.toml's timeouts, as campaigns/validation.toml runs them
FAST = {"broker.session.timeout.ms": 2000, "broker.heartbeat.interval.ms": 200,
        "replica.lag.time.max.ms": 2000, "unclean.recovery.timeout.ms": 500}
SAFE = {**FAST, "min.insync.replicas": 2}


def params(seed: int, **kw) -> WorkloadParams:
    base = dict(topic="chaos", partitions=1, acks="all", rate=300.0, producers=16, consumers=2,
                request_timeout_s=3.0, seed=seed)
    return WorkloadParams(**{**base, **kw})


def run(tmp: Path, seed: int, *, time_limit: float = 6.0, system=None, faults=None, **kw):
    # keep_going: these tests look at what the history shows, so a weakness's first invariant
    # violation must not end the run (the invariants: tests/simulation/test_invariants_sim.py)
    kw.setdefault("keep_going", True)
    return run_simulation(tmp, seed=seed, params=params(seed), time_limit=time_limit,
                          system=SAFE if system is None else system, faults=faults,
                          final_read_timeout=30, **kw)


# ---- determinism ---------------------------------------------------------------------------------

def _files(result) -> tuple[bytes, bytes]:
    return result.history.read_bytes(), result.events.read_bytes()


def test_same_seed_same_bytes_even_under_every_kind_of_fault(tmp_path):
    a = run(tmp_path / "a", 5, time_limit=12.0, faults=tour("chaos", tmp_path / "a", step=1.0))
    b = run(tmp_path / "b", 5, time_limit=12.0, faults=tour("chaos", tmp_path / "b", step=1.0))
    assert _files(a) == _files(b)
    kinds = {o["f"] for o in read_history(a.history) if o["process"] == "nemesis"}
    assert {"start-partition", "start-kill", "start-torn-power-loss", "start-reset-link",
            "start-restart", "start-page-cache-loss", "start-clock-skew",
            "start-corrupt-segment"} <= kinds
    assert a.stats["send-ok"] > 2000


def test_same_seed_same_bytes_in_another_process_with_another_hash_seed(tmp_path):
    here = run(tmp_path / "here", 9, time_limit=5.0, faults=tour("chaos", tmp_path / "here",
                                                                 step=1.0))
    script = (
        "import sys; from pathlib import Path\n"
        "from tests.simulation.test_simulation_world import run\n"
        "from support.scenarios import tour\n"
        "run(Path(sys.argv[1]), 9, time_limit=5.0,\n"
        "    faults=tour('chaos', Path(sys.argv[1]), step=1.0))\n")
    for hash_seed in ("0", "4242"):
        there = tmp_path / f"there-{hash_seed}"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed,
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                               os.environ.get("PYTHONPATH", "")])}
        subprocess.run([sys.executable, "-c", script, str(there)], cwd=ROOT, env=env, check=True,
                       timeout=120)
        assert (there / "history.jsonl").read_bytes() == here.history.read_bytes()
        assert (there / "events.jsonl").read_bytes() == here.events.read_bytes()


@pytest.mark.skipif(not hasattr(gc, "freeze"), reason="CPython's gc.freeze")
def test_a_run_freezes_the_objects_older_than_it_and_thaws_them_after(tmp_path):
    """Its full collections walk the run's own objects only (simulation/run.py)."""
    frozen_while_running = []
    run(tmp_path, 1, time_limit=1.0,
        world_hook=lambda world: frozen_while_running.append(gc.get_freeze_count()))
    assert frozen_while_running[0] > 10_000 and gc.get_freeze_count() == 0


def test_a_named_stream_is_the_one_random_derives_from_the_seed_and_the_name():
    """World.rng seeds through hashlib (random's own SHA-512 is pure Python under PyPy), yet
    gives each stream random.Random(f"{seed}:{name}") gives: every seed's runs stay the same."""
    world = World(7, 4, NodeConfig())
    for name in ("net", "fsync:n2", "start", "fsync-draws:n3:2", "\u00e9"):
        assert world.rng(name).getrandbits(64) == random.Random(f"7:{name}").getrandbits(64)
    assert world.rng("net").random() != world.rng("start").random()


def test_different_seeds_give_different_runs(tmp_path):
    a = run(tmp_path / "a", 1, time_limit=3.0)
    b = run(tmp_path / "b", 2, time_limit=3.0)
    assert a.history.read_bytes() != b.history.read_bytes()
    assert a.events.read_bytes() != b.events.read_bytes()


def test_events_and_history_share_the_virtual_clock(tmp_path):
    r = run(tmp_path, 3, time_limit=3.0)
    ops = read_history(r.history)
    events = [json.loads(line) for line in r.events.read_text().splitlines()]
    assert [o["time"] for o in ops] == sorted(o["time"] for o in ops)
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    # the workload starts once the controller has created the topic
    created = next(e for e in events if e["kind"] == "partition-change")
    assert created["reason"] == "create" and created["node"] == "controller"
    assert created["time"] < ops[0]["time"] < r.virtual_s * 1e9
    became_leader = next(e for e in events if e["kind"] == "become-leader")
    assert {"ts", "node", "kind", "host", "time"} <= set(became_leader)
    assert became_leader["host"] == "n2" and became_leader["node"] == 1
    assert became_leader["ts"] == pytest.approx(1_767_225_600 + became_leader["time"] / 1e9)


# ---- no faults: nothing acknowledged is lost -------------------------------------------------------

def test_without_faults_every_acknowledged_record_is_read_back(tmp_path):
    r = run(tmp_path, 11, time_limit=8.0)
    loss = acknowledged_loss(r.history)
    assert r.stats["send-ok"] >= 2000 and r.stats["send-info"] == 0 and r.stats["send-fail"] == 0
    assert r.final_read == {0: True} and loss.final_complete
    assert loss.lost == []
    assert r.node_errors == [] and r.loop_errors == []
    # and the acknowledged offsets are the ones the final read holds them at
    ops = read_history(r.history)
    at = {o["value"]: o["offset"] for o in ops if o["f"] == "send" and o["type"] == "ok"}
    final = [o for o in ops if o["f"] == "final-poll" and o["type"] == "ok"][-1]["records"]
    assert all(at[v] == off for off, v in final if v in at)


# ---- power loss, flush, kill ------------------------------------------------------------------------

NO_ELR = {**FAST, "eligible.leader.replicas.enable": False}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_power_loss_of_the_last_isr_member_without_elr_loses_acknowledged_records(tmp_path, seed):
    """campaigns/validation.toml's no-elr weakness: the last ISR member loses power with its
    unflushed tail, stays in the ISR while down (pre-KIP-966) and is elected again on return;
    its followers truncate to its log. With flush.messages=1 there is no unflushed tail; a
    kill keeps the page cache. Neither loses anything, for the same seeds."""
    lossy = run(tmp_path / "lossy", seed, time_limit=8.0, system=NO_ELR,
                faults=shrink_then("power-loss", "chaos", tmp_path / "lossy"))
    lost = acknowledged_loss(lossy.history)
    assert len(lost.lost) > 100, lost.lost
    start = next(o for o in read_history(lossy.history) if o["f"] == "start-power-loss")
    (report,) = start["value"]["lost"].values()
    assert report["lost_records"] > 0 and report["logs"]["chaos-0"] > 0

    flushed = run(tmp_path / "flushed", seed, time_limit=8.0,
                  system={**NO_ELR, "flush.messages": 1},
                  faults=shrink_then("power-loss", "chaos", tmp_path / "flushed"))
    killed = run(tmp_path / "killed", seed, time_limit=8.0, system=NO_ELR,
                 faults=shrink_then("kill", "chaos", tmp_path / "killed"))
    for r in (flushed, killed):
        loss = acknowledged_loss(r.history)
        assert loss.final_complete and loss.lost == [] and len(loss.acked) > 1000


async def _client_with_topic(world: World, topic: str) -> Client:
    """A client of the world's cluster once its 3 brokers are registered and unfenced, after
    creating `topic` (1 partition, RF 3) and giving it 2 s to get a leader."""
    client = Client(world.bootstrap(), request_timeout_s=3, pool=world.pool())
    while True:
        await asyncio.sleep(0.2)
        try:
            md = await client.metadata(refresh=True)
        except ClientError:  # not listening yet
            continue
        if len(md.brokers) == 3 and not any(b.fenced for b in md.brokers.values()):
            break
    await client.create_topic(topic, 1, 3)
    await asyncio.sleep(2)
    return client


def _metadata_asks(client: Client) -> list[bool]:
    """From now on, the `refresh` of each metadata request the client makes, in order."""
    asked: list[bool] = []
    fetch_metadata = client.metadata

    async def spy(refresh: bool = False) -> ClusterMetadata:
        asked.append(refresh)
        return await fetch_metadata(refresh)

    client.metadata = spy
    return asked


def test_a_produce_to_a_leader_that_died_is_retried_on_the_new_one():
    """The first attempt of a batch goes to the leader the client's metadata names, without a
    task (Client._first_answer); when that leader is gone the connection is refused, which is
    a definite failure, and the retry (a task, _send_batch) refreshes the metadata and is
    acknowledged by the new leader."""
    world = World(seed=4, n_nodes=4, node_config=NodeConfig().with_overrides(FAST))
    world.start_all()

    async def main():
        client = await _client_with_topic(world, "t")
        first = await client.produce("t", 0, "0")
        old = first.node
        world.kill(world.brokers[old])
        await asyncio.sleep(5)  # the controller fences it and elects another leader
        asked = _metadata_asks(client)
        ack = await client.produce("t", 0, "1")
        assert ack.node != old and ack.offset == 1, ack
        assert asked and all(asked)  # only refreshes, after the refused first attempt
        await client.close()

    world.loop.run(main())


def test_a_poll_answers_through_its_callback_and_is_retried_on_a_new_leader():
    """Client.poll, fetch's callback form the workload's consumers use: a known leader
    answers through the connection's callback, without metadata asked; when that leader is
    gone the refused connection is retried (a task) on the new one after a refresh; an
    unknown partition is the ClientError fetch raises, handed to the callback."""
    world = World(seed=4, n_nodes=4, node_config=NodeConfig().with_overrides(FAST))
    world.start_all()

    def poll(client: Client, partition: int, offset: int) -> asyncio.Future:
        done = asyncio.get_running_loop().create_future()
        client.poll("t", partition, offset, 100, done.set_result, min_records=1, max_wait_ms=50)
        return done

    async def main():
        client = await _client_with_topic(world, "t")
        first = await client.produce("t", 0, "0")
        asked = _metadata_asks(client)
        reply = await poll(client, 0, 0)
        assert [v for _, v in reply.records] == ["0"] and asked == []
        world.kill(world.brokers[first.node])
        await asyncio.sleep(5)  # the controller fences it and elects another leader
        reply = await poll(client, 0, 0)
        assert reply.node != first.node and [v for _, v in reply.records] == ["0"], reply
        assert asked and all(asked)  # only refreshes, after the refused first attempt
        unknown = await poll(client, 7, 0)
        assert isinstance(unknown, ClientError) and unknown.error == E.UNKNOWN_TOPIC
        await client.close()

    world.loop.run(main())


def test_sends_within_the_linger_share_one_produce_request_and_keep_their_own_offsets():
    """Kafka's batching (linger.ms, batch.size): the sends to a partition within the
    client's linger go out as one ProduceRequest, at most `max_batch` values (a full batch
    goes at once, the rest waits for the linger); each send's callback gets its own
    acknowledgement, with its own offset, in the order sent, and the log holds them so."""
    world = World(seed=4, n_nodes=4, node_config=NodeConfig().with_overrides(FAST))
    world.start_all()

    async def main():
        client = await _client_with_topic(world, "t")
        await client.produce("t", 0, "first")  # the leader's connection is open from here
        conn = client.pool.get(client._leader_of(await client.partition_state("t", 0))[1])
        requests: list = []
        call = conn.call
        conn.call = lambda msg, timeout, on_done: (requests.append(msg), call(msg, timeout, on_done))
        client.max_batch = 4
        acks: list = []
        done = asyncio.get_running_loop().create_future()

        def sent(i: int):
            def record(outcome) -> None:
                acks.append((i, outcome))
                if len(acks) == 6:
                    done.set_result(None)
            return record
        for i in range(6):
            client.send("t", 0, f"v{i}", "all", sent(i))
        assert [m.values for m in requests] == [("v0", "v1", "v2", "v3")]  # full: at once
        await done
        assert [m.values for m in requests] == [("v0", "v1", "v2", "v3"), ("v4", "v5")]
        assert sorted(i for i, _ in acks) == list(range(6))
        by_send = dict(acks)
        assert [by_send[i].offset for i in range(6)] == [1, 2, 3, 4, 5, 6]
        assert len({(a.node, a.leader_epoch) for a in by_send.values()}) == 1
        reply = await client.fetch("t", 0, 0)
        assert [v for _, v in reply.records] == ["first", "v0", "v1", "v2", "v3", "v4", "v5"]
        await client.close()

    world.loop.run(main())


@pytest.mark.native
def test_a_seed_checked_by_histcheck_gets_the_reference_checkers_results(tmp_path, capfd):
    """A search checks each seed with check_path(backend="native"): histcheck, faster than the
    pandas reference. Both write the same results for a run that lost records."""
    lossy = run(tmp_path / "a", 1, time_limit=8.0, system=NO_ELR,
                faults=shrink_then("power-loss", "chaos", tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    capfd.readouterr()
    native = check_path(tmp_path / "a", backend="native")
    assert "(histcheck)" in capfd.readouterr().err  # it was histcheck that checked
    reference = check_path(tmp_path / "b", backend="reference")
    assert native["lost"]["count"] > 100 and native["anomalies"]["lost-write"]["count"] > 100
    assert native == reference
    assert len(acknowledged_loss(lossy.history).lost) == native["lost"]["count"]


def test_kill_keeps_the_page_cache_and_power_loss_does_not():
    world = World(seed=4, n_nodes=4, node_config=NodeConfig())
    world.start_all()

    async def main():
        client = await _client_with_topic(world, "t")
        for i in range(50):
            await client.produce("t", 0, str(i))
        await asyncio.sleep(1)
        await client.close()

    world.loop.run(main())
    logs = {n: world.disks[n].views[("t", 0)] for n in ("n2", "n3", "n4")}
    assert all(log.end_offset == 50 for log in logs.values())
    world.kill("n3")
    world.start("n3")
    world.run_for(2)
    assert logs["n3"].end_offset == 50  # SIGKILL: the page cache survived
    segment = "/data/t-0/00000000000000000000.log"
    report = world.power_loss("n4")
    assert report["lost_records"] == 50 and report["logs"] == {"t-0": 50}
    assert report["files"][segment]["lost_bytes"] > 50 * 25  # the records' bytes, unsynced
    assert logs["n4"].end_offset == 0  # nothing was ever fsynced
    world.start("n4")
    world.run_for(3)
    assert logs["n4"].end_offset == 50  # fetched back from the leader
    torn = world.power_loss("n2", torn=True, pick=7)
    assert torn["seed"] == 7 and 0 <= torn["lost_records"] <= 50
    assert logs["n2"].end_offset == 50 - torn["lost_records"]
    kept = torn["files"][segment]["kept_bytes"]
    assert 0 < kept < torn["files"][segment]["unsynced_bytes"]
    world.start("n2")
    world.run_for(2)
    (cut,) = [e for e in world.events() if e["kind"] == "log-recovery" and e["host"] == "n2"]
    # the real SegmentLog's recovery cut the torn record the kept bytes end in
    assert cut["reason"] == "torn-tail" and cut["log_end_offset"] == 50 - torn["lost_records"]
    assert 0 < cut["truncated_bytes"] < 50


def test_the_client_asks_for_metadata_only_when_it_holds_none_or_must_refresh():
    """Produce and fetch take the partition's leader from the metadata the client holds,
    without a coroutine call (client._known_state); a missing partition is UNKNOWN_TOPIC from
    that metadata too. Only a refresh, or a retriable error, asks the cluster again."""
    world = World(seed=4, n_nodes=4, node_config=NodeConfig())
    world.start_all()

    async def main():
        client = await _client_with_topic(world, "t")
        await client.metadata(refresh=True)
        asked = _metadata_asks(client)
        acks = [await client.produce("t", 0, str(i)) for i in range(20)]
        reply = await client.fetch("t", 0, 0)
        assert asked == []
        assert [a.offset for a in acks] == list(range(20))
        assert [o for o, _ in reply.records] == list(range(20))
        with pytest.raises(ClientError) as e:
            await client.fetch("t", 7, 0)
        assert e.value.error == E.UNKNOWN_TOPIC and asked == []
        assert (await client.partition_state("t", 0, refresh=True)).leader is not None
        assert asked == [True]
        await client.close()

    world.loop.run(main())


# ---- partitions ---------------------------------------------------------------------------------------

def test_a_partition_cuts_a_broker_off_and_healing_brings_it_back(tmp_path):
    async def faults(world: World, loop):
        await asyncio.sleep(1.0)
        world.partition({"n3": frozenset(set(world.nodes) - {"n3"}),
                         **{n: frozenset({"n3"}) for n in world.nodes if n != "n3"}})
        world.history.nemesis("start-partition", {"nodes": ["n3"]})
        await asyncio.sleep(4.0)
        world.heal_partition()
        world.history.nemesis("stop-partition", {"nodes": ["n3"]})

    r = run(tmp_path, 6, time_limit=9.0, faults=faults)
    events = [json.loads(line) for line in r.events.read_text().splitlines()]
    start = next(o for o in read_history(r.history) if o["f"] == "start-partition")["time"]
    stop = next(o for o in read_history(r.history) if o["f"] == "stop-partition")["time"]
    fenced = [e for e in events if e["kind"] == "broker-fenced" and e["broker"] == 2]
    assert fenced and start < fenced[0]["time"] < stop  # its heartbeats stopped arriving
    assert fenced[0]["reason"] == "session-timeout"
    back = [e for e in events if e["kind"] == "broker-unfenced" and e["broker"] == 2
            and e["time"] > stop]
    assert back  # after the heal its heartbeats get through again
    isr = [e["isr"] for e in events if e["kind"] == "partition-change" and e["time"] > stop]
    assert isr and isr[-1] == [1, 2, 3]
    assert acknowledged_loss(r.history).lost == []


def test_a_stopped_broker_restarts_clean_and_a_killed_one_does_not(tmp_path):
    async def faults(world: World, loop):
        await asyncio.sleep(1.0)
        await world.stop_clean("n3")
        assert not world.is_running("n3")
        world.start("n3")
        await asyncio.sleep(3.0)
        world.kill("n4")
        world.start("n4")

    r = run(tmp_path, 8, time_limit=7.0, faults=faults)
    events = [json.loads(line) for line in r.events.read_text().splitlines()]
    starts = [(e["host"], e["clean_shutdown"]) for e in events if e["kind"] == "broker-start"]
    assert ("n3", True) in starts and ("n4", True) not in starts
    stop = next(e for e in events if e["kind"] == "broker-stop")
    assert stop["host"] == "n3" and stop["clean"] is True
    assert acknowledged_loss(r.history).lost == []


# ---- other faults --------------------------------------------------------------------------------------

def test_a_page_cache_loss_halts_the_running_broker_like_kafkas_log_dir_failure(tmp_path):
    """Its files fail with EIO from then on (lazyfs fails every descriptor open across the
    loss), so at its next disk I/O the broker halts, as Kafka halts when its only log
    directory fails: the controller fences it and it leaves the ISR; nothing acknowledged is
    lost (MinISR 2 of 3)."""
    broken: list[int] = []

    async def faults(world: World, loop):
        await asyncio.sleep(2.0)
        state = await partition_state(world, "chaos")
        broken.append([r for r in state["replicas"] if r != state["leader"]][0])
        report = world.page_cache_loss(world.brokers[broken[0]])
        assert report["lost_records"] > 0
        world.history.nemesis("start-page-cache-loss", {"nodes": [world.brokers[broken[0]]]})

    r = run(tmp_path, 12, time_limit=6.0, faults=faults)
    assert r.node_errors and all("Input/output error" in e["error"] for e in r.node_errors)
    assert {e["where"] for e in r.node_errors} == {"storage"}  # halted, not limping on
    events = [json.loads(line) for line in r.events.read_text().splitlines()]
    start = next(o for o in read_history(r.history) if o["f"] == "start-page-cache-loss")["time"]
    later = [e for e in events if e["time"] > start]
    assert any(e["kind"] == "broker-fenced" and e["broker"] == broken[0] for e in later)
    assert any(e["kind"] == "partition-change" and broken[0] not in e["isr"] for e in later)
    assert acknowledged_loss(r.history).lost == []


def test_clients_move_on_from_a_leader_whose_page_cache_was_lost(tmp_path):
    """Had the leader lived on with a broken disk, closing each connection its requests came
    on (the request failing with EIO), its heartbeats stopped, it would have been fenced and
    replaced, but the clients, which refresh their metadata when a leader refuses them or
    names another, not when it drops a request, would have gone on sending to it: every later
    send failed (safe/reach seed 158 of campaigns/mutation.toml, before the halt). Halted, it
    refuses them, and they find the new leader."""
    hit: list[float] = []

    async def faults(world: World, loop):
        await asyncio.sleep(2.0)
        state = await partition_state(world, "chaos")
        world.page_cache_loss(world.brokers[state["leader"]])
        hit.append(loop.time())

    r = run(tmp_path, 12, time_limit=10.0, faults=faults)
    acked_after = [o for o in read_history(r.history)
                   if o["f"] == "send" and o["type"] == "ok" and o["time"] / 1e9 > 6.0]
    assert hit and len(acked_after) > 100
    assert all(r.final_read.values())
    assert acknowledged_loss(r.history).lost == []


def test_clients_leave_a_paused_leader_once_another_is_elected(tmp_path):
    """A paused leader answers nothing: requests to it time out, which says nothing of who
    leads now. Kafka's clients refresh their metadata on any lost connection, and so do ours,
    so they find the leader the controller elects once it fences the paused one (2 s
    session), long before the pause ends; clients that waited for a refusal or a NOT_LEADER
    would send to the paused broker until it resumed."""
    paused: list[float] = []

    async def faults(world: World, loop):
        await asyncio.sleep(2.0)
        state = await partition_state(world, "chaos")
        world.pause(world.brokers[state["leader"]])
        paused.append(loop.time())
        await asyncio.sleep(9.0)

    r = run(tmp_path, 14, time_limit=12.0, faults=faults)
    events = [json.loads(line) for line in r.events.read_text().splitlines()]
    t0 = paused[0] * 1e9
    elected = next(e["time"] for e in events if e["kind"] == "partition-change" and e["time"] > t0)
    acked = [o for o in read_history(r.history) if o["f"] == "send" and o["type"] == "ok"
             and elected + 3e9 < o["time"] < t0 + 8e9]
    assert elected < t0 + 4e9 and len(acked) > 100
    assert acknowledged_loss(r.history).lost == []


def test_a_forward_clock_jump_on_the_leader_looks_like_lagging_followers(tmp_path):
    async def faults(world: World, loop):
        await asyncio.sleep(2.0)
        state = await partition_state(world, "chaos")
        world.clock_jump(world.brokers[state["leader"]], 10_000)
        world.history.nemesis("start-clock-jump", {"leader": state["leader"]})

    r = run(tmp_path, 13, time_limit=5.0, faults=faults)
    jump = next(o for o in read_history(r.history) if o["f"] == "start-clock-jump")
    events = [json.loads(line) for line in r.events.read_text().splitlines()]
    shrinks = [e for e in events if e["kind"] == "partition-change" and e["reason"] == "alter-partition"
               and e["time"] >= jump["time"] and len(e["isr"]) == 1]
    assert shrinks  # 10 s passed on its clock without a follower catching up: lag > 2 s
    assert acknowledged_loss(r.history).lost == []


def test_a_broker_whose_clock_crawls_misses_its_heartbeats_until_it_is_set_right(tmp_path):
    """A clock drifting at 1/20 of the rate: the broker's 200 ms heartbeat interval on its
    own clock is 4 s of everyone else's, past the 2 s session, so the controller fences it;
    set right, it heartbeats again and is unfenced. (No fault kind drifts a clock: the
    world's verb is tested here directly.)"""
    slow: list[int] = []

    async def faults(world: World, loop):
        await asyncio.sleep(1.0)
        state = await partition_state(world, "chaos")
        slow.append([r for r in state["replicas"] if r != state["leader"]][0])
        world.clock_drift(world.brokers[slow[0]], 0.05)
        await asyncio.sleep(4.0)
        world.clock_reset(world.brokers[slow[0]])

    r = run(tmp_path, 16, time_limit=8.0, faults=faults)
    events = [json.loads(line) for line in r.events.read_text().splitlines()]
    mine = [e["kind"] for e in events if e.get("broker") == slow[0]
            and e["kind"] in ("broker-fenced", "broker-unfenced")]
    assert "broker-fenced" in mine and mine[-1] == "broker-unfenced", mine
    assert acknowledged_loss(r.history).lost == []


def test_messages_passed_as_objects_behave_as_the_wire_would(tmp_path):
    """No code depends on sharing objects between sender and receiver: the same run with every
    message copied through JSON (what the wire does) writes the same bytes."""
    from simulation.network import NetConfig
    a = run(tmp_path / "a", 14, time_limit=6.0, faults=tour("chaos", tmp_path / "a", step=1.0))
    b = run(tmp_path / "b", 14, time_limit=6.0, faults=tour("chaos", tmp_path / "b", step=1.0),
            net=NetConfig(copy_messages=True))
    assert _files(a) == _files(b)


def test_acks_0_goes_through_ensure_and_send_nowait(tmp_path):
    r = run_simulation(tmp_path, seed=15, params=params(15, acks="0"), time_limit=3.0,
                       system=SAFE, final_read_timeout=30)
    ops = read_history(r.history)
    sent = [o for o in ops if o["f"] == "send" and o["type"] == "ok"]
    assert len(sent) > 500 and all("offset" not in o for o in sent)  # fire and forget
    # Only what reached the leader before it knew it led is gone (refused, never answered).
    loss = acknowledged_loss(r.history)
    events = [json.loads(line) for line in r.events.read_text().splitlines()]
    led = next(e["time"] for e in events if e["kind"] == "become-leader")
    before = {o["value"] for o in sent if o["time"] < led + 5_000_000}
    assert loss.final_complete and set(loss.lost) <= before


def test_verbs_are_the_fault_kinds_world():
    """World's operations as coroutines cover every verb nemesis.kinds.base.World declares."""
    base = pytest.importorskip("nemesis.kinds.base")
    from simulation.world import Verbs
    declared = [n for n, v in vars(base.World).items() if callable(v) and not n.startswith("_")]
    assert declared
    for name in declared:
        assert asyncio.iscoroutinefunction(getattr(Verbs, name, None)), name


def _skewed_world():
    """A running 4-node world whose n2 clock-skew (3 s ahead) the nemesis applied through the
    kind's HostAction and never healed: the workload ended first."""
    from nemesis.kinds.clock import ClockStep
    from simulation.world import Verbs

    world = World(seed=1, n_nodes=4, node_config=NodeConfig.from_settings(FAST))
    world.start_all()
    world.run_for(1.0)
    verbs = Verbs(world)
    world.loop.run_until_complete(verbs.act_on_host("n2", "clock-skew", ClockStep(3000.0)))
    return world, verbs


def _skew_s(world: World, node: str) -> float:
    """How far the node's clock is from its undisturbed reading (base + virtual time)."""
    clock = world.clocks[node]
    return round(clock.at(world.loop.now) - (clock.base + world.loop.now), 6)


def test_the_final_heal_undoes_a_clock_skew_that_was_never_healed():
    world, verbs = _skewed_world()
    assert _skew_s(world, "n2") == 3.0 and world.host_actions.pending() == [("n2", "clock-skew")]
    world.heal_all()
    assert _skew_s(world, "n2") == 0.0
    assert world.host_actions.pending() == []  # nothing left in force for a later heal to undo
    world.run_for(2.0)
    assert _skew_s(world, "n2") == 0.0 and all(world.is_running(n) for n in world.nodes)


def test_a_final_heal_that_skips_the_undo_leaves_the_skew_in_force(monkeypatch):
    # the twin: the check above sees a heal that leaves the kind's action undone
    monkeypatch.setattr(World, "undo_host_actions", lambda self: None)
    world, _ = _skewed_world()
    world.heal_all()
    assert world.host_actions.pending() == [("n2", "clock-skew")]


def test_the_nemesis_heal_over_verbs_undoes_host_actions_as_on_real_hosts():
    """Nemesis.heal_all calls heal_network: HostsWorld's undoes every host action still in
    force, and so does the simulated world's."""
    world, verbs = _skewed_world()
    world.loop.run_until_complete(verbs.heal_network())
    assert _skew_s(world, "n2") == 0.0 and world.host_actions.pending() == []


def test_fsync_latency_delays_acks_only_under_a_flush_policy(tmp_path):
    """The storage port: with flush.messages=1 an acks=all record is acknowledged once the
    leader and a follower have fsynced it, so a 20 ms disk shows; without a flush policy
    nothing waits for the disk."""
    from simulation.disk import DiskConfig
    from simulation.network import Latency

    def median_ack_ms(system, disk) -> float:
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}"
        run_simulation(out, seed=1, params=params(1), time_limit=4.0, system=system, disk=disk,
                       final_read_timeout=30)
        invoked, took = {}, []
        for o in read_history(out / "history.jsonl"):
            if o["f"] == "send" and o["type"] == "invoke":
                invoked[o["value"]] = o["time"]
            elif o["f"] == "send" and o["type"] == "ok":
                took.append((o["time"] - invoked[o["value"]]) / 1e6)
        return sorted(took)[len(took) // 2]

    slow = DiskConfig(fsync=Latency(median_ms=20.0, sigma=0.1, tail_probability=0.0))
    assert median_ack_ms(SAFE, slow) < 10
    assert median_ack_ms({**SAFE, "flush.messages": 1}, DiskConfig(fsync=None)) < 10
    assert median_ack_ms({**SAFE, "flush.messages": 1}, slow) > 40


def test_a_cancelled_workload_records_nothing_more_and_its_sends_in_flight_end_as_run_ended(tmp_path):
    """The producers are callbacks on the loop, not tasks (workloads/kafka.py _Producer): when
    the workload's run is cancelled mid-send, the answers still arriving must not complete
    anything, and the history's close completes what was in flight as info/run-ended."""
    world = World(seed=3, n_nodes=4, node_config=NodeConfig().with_overrides(SAFE))
    world.start_all()
    history = HistoryWriter(tmp_path / "history.jsonl", clock=world.loop.time_ns,
                            background_fsync=False)
    workload = KafkaWorkload(params(3, consumers=0), world.bootstrap(), history,
                             pool_factory=world.pool)

    async def main() -> int:
        client = await _client_with_topic(world, "chaos")
        await client.close()
        run = asyncio.get_running_loop().create_task(workload.run(10.0))
        await asyncio.sleep(1.0)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        written = history.count
        await asyncio.sleep(1.0)  # answers to the sends in flight arrive now
        assert history.count == written, "a cancelled producer went on recording"
        return written

    world.loop.run(main())
    history.close()
    ops = list(read_history(tmp_path / "history.jsonl"))
    ended = [o for o in ops if o.get("error") == "run-ended"]
    assert workload.stats["send-ok"] > 100 and ended, (workload.stats, len(ended))
    assert len(ended) <= 16  # at most one in flight per producer
    invokes = [o for o in ops if o["type"] == "invoke"]
    assert len(invokes) == len(ops) - len(invokes)  # each invoke completed exactly once
