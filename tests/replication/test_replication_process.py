"""The system under test as real processes on loopback: acknowledged records survive leader
SIGKILL, controlled shutdown and a controller restart."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import pytest
from support.history import read_history
from support.local_cluster import LocalCluster

from replication.client import Client, ClientError, ProduceError
from workloads.history import HistoryWriter
from workloads.kafka import KafkaWorkload, WorkloadParams

TOPIC = "t"


def _describe(cluster: LocalCluster) -> dict:
    out = cluster.run_cli("topics", "--bootstrap", cluster.controller_address, "--describe").stdout
    rows = {}
    for line in out.splitlines():
        fields = dict(zip(line.split()[0::2], line.split()[1::2], strict=False))
        rows[int(fields["Partition:"])] = fields
    return rows


def _wait_isr(cluster: LocalCluster, size: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _describe(cluster)
        if all(len(r["Isr:"].split(",")) == size for r in rows.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"ISR did not reach {size}: {_describe(cluster)}")


async def _produce(client: Client, values: range, acks: str, outcome: dict) -> None:
    async def one(v: int) -> None:
        try:
            ack = await client.produce(TOPIC, 0, str(v), acks)
            outcome["ok"][v] = ack.offset
        except ProduceError as e:
            outcome["fail" if e.definite else "info"].add(v)
    await asyncio.gather(*(one(v) for v in values))


async def _read_all(client: Client) -> list[tuple[int, int]]:
    records: list[tuple[int, int]] = []
    while True:
        reply = await client.fetch(TOPIC, 0, len(records), refresh=True)
        if not reply.records:
            return records
        records += [(o, int(v)) for o, v in reply.records]


def _check(outcome: dict, records: list[tuple[int, int]]) -> None:
    assert [o for o, _ in records] == list(range(len(records))), "offsets must be contiguous"
    by_value: dict[int, list[int]] = {}
    for o, v in records:
        by_value.setdefault(v, []).append(o)
    lost = [v for v in outcome["ok"] if v not in by_value]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    moved = [v for v, o in outcome["ok"].items() if by_value[v] != [o]]
    assert not moved, f"acknowledged records not at their offset once: {moved[:5]}"
    assert not any(len(offs) > 1 for offs in by_value.values()), "duplicates"
    aborted = [v for v in outcome["fail"] if v in by_value]
    assert not aborted, f"definitely failed sends were read: {aborted[:5]}"


def _run_scenario(cluster: LocalCluster, fault) -> dict:
    async def scenario() -> dict:
        client = Client(cluster.address(2), request_timeout_s=8)
        outcome: dict = {"ok": {}, "fail": set(), "info": set()}
        try:
            await _produce(client, range(0, 2000), "all", outcome)

            async def waves() -> None:
                for start in range(2000, 5000, 100):
                    await _produce(client, range(start, start + 100), "all", outcome)
            # The fault lands while the later waves are in flight.
            await asyncio.gather(waves(), asyncio.get_running_loop().run_in_executor(None, fault))
            return outcome
        finally:
            await client.close()
    return asyncio.run(scenario())


def _final_read(cluster: LocalCluster) -> list[tuple[int, int]]:
    async def read() -> list[tuple[int, int]]:
        client = Client(cluster.controller_address)
        try:
            return await _read_all(client)
        finally:
            await client.close()
    return asyncio.run(read())


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, brokers=3)
    c.start()
    c.run_cli("topics", "--bootstrap", c.controller_address, "--create", "--topic", TOPIC,
              "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
    _wait_isr(c, 3)
    yield c
    c.stop()


def _events(cluster: LocalCluster) -> list[dict]:
    out = []
    for path in cluster.root.glob("*/events.jsonl"):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return sorted(out, key=lambda e: e["ts"])


def test_sigkill_leader_mid_stream_loses_no_acknowledged_record(cluster):
    leader = int(_describe(cluster)[0]["Leader:"])

    def fault():
        cluster.kill(leader, signal.SIGKILL)
    outcome = _run_scenario(cluster, fault)
    assert len(outcome["ok"]) >= 4000, f"too few acknowledgements: {len(outcome['ok'])}"
    cluster.start_broker(leader)
    _wait_isr(cluster, 3)
    _check(outcome, _final_read(cluster))
    registrations = [e for e in _events(cluster) if e["kind"] == "broker-registered" and e["broker"] == leader]
    assert registrations[-1]["clean"] is False, "a SIGKILLed broker must register as unclean"
    assert int(_describe(cluster)[0]["Leader:"]) != leader or len(registrations) > 1


def test_clean_shutdown_registers_clean_and_loses_nothing(cluster):
    leader = int(_describe(cluster)[0]["Leader:"])

    def fault():
        cluster.kill(leader, signal.SIGTERM)
    outcome = _run_scenario(cluster, fault)
    assert len(outcome["ok"]) >= 4000
    assert (cluster.root / str(leader) / "data" / "clean_shutdown").exists()
    cluster.start_broker(leader)
    _wait_isr(cluster, 3)
    _check(outcome, _final_read(cluster))
    events = _events(cluster)
    registrations = [e for e in events if e["kind"] == "broker-registered" and e["broker"] == leader]
    assert registrations[-1]["clean"] is True
    assert any(e["kind"] == "broker-fenced" and e["reason"] == "controlled-shutdown" for e in events)


def test_the_produce_and_consume_commands_print_offset_and_value(cluster):
    leader = int(_describe(cluster)[0]["Leader:"])
    produced = cluster.run_cli("produce", "--bootstrap", cluster.address(leader), "--topic", TOPIC,
                               "--count", "3", "--start", "10").stdout.splitlines()
    assert sorted(produced) == ["0 10", "1 11", "2 12"]  # one batch, in the order sent
    consumed = cluster.run_cli("consume", "--bootstrap", cluster.address(leader), "--topic", TOPIC).stdout
    assert sorted(consumed.splitlines()) == sorted(produced)
    unacked = cluster.run_cli("produce", "--bootstrap", cluster.address(leader), "--topic", TOPIC,
                              "--acks", "0", "--count", "1").stdout
    assert unacked == "- 0\n"  # acks=0: nothing acknowledged, no offset


def test_a_consumers_long_poll_is_held_by_the_leader_until_records_are_committed(cluster):
    """Over real TCP: a poll past the HWM with max_wait_ms is answered when a produce commits,
    not at once; a poll nobody produces for is answered empty after about its wait."""
    async def scenario() -> tuple:
        client = Client(cluster.address(2), request_timeout_s=8)
        loop = asyncio.get_running_loop()
        try:
            await client.produce(TOPIC, 0, "1")
            started = loop.time()
            poll = loop.create_task(client.fetch(TOPIC, 0, 1, min_records=1, max_wait_ms=5000))
            await asyncio.sleep(0.5)
            held = not poll.done()
            await client.produce(TOPIC, 0, "2")
            reply = await poll
            answered = loop.time() - started
            quiet = loop.time()
            empty = await client.fetch(TOPIC, 0, 2, min_records=1, max_wait_ms=300)
            return held, reply, answered, empty, loop.time() - quiet
        finally:
            await client.close()
    held, reply, answered, empty, waited = asyncio.run(scenario())
    assert held, "the long poll was answered before anything was committed past its offset"
    assert [v for _o, v in reply.records] == ["2"] and answered < 4
    assert empty.records == () and 0.25 <= waited < 3


def test_the_workloads_consumers_poll_over_real_tcp(cluster, tmp_path):
    """The workload's consumers poll through Client.poll, fetch's callback form, whose
    first attempt settles from a real connection's call (a task per request there): over
    real TCP, 2 s of the workload read back what its producers had acknowledged."""
    history = HistoryWriter(tmp_path / "history.jsonl")
    params = WorkloadParams(topic=TOPIC, partitions=1, rate=200, producers=4, consumers=2, seed=1)
    workload = KafkaWorkload(params, [cluster.address(2)], history)
    asyncio.run(workload.run(2.0))
    history.close()
    ops = read_history(tmp_path / "history.jsonl")
    polls = [op for op in ops if op["f"] == "poll" and op["type"] == "ok"]
    acked = {op["value"] for op in ops if op["f"] == "send" and op["type"] == "ok"}
    read = {v for op in polls for _o, v in op["records"]}
    assert workload.stats["poll-ok"] == len(polls) > 10 and len(acked) > 100
    assert read and read <= {op["value"] for op in ops if op["f"] == "send"}
    assert len(read & acked) > len(acked) // 2, "the consumers read back little of what was acknowledged"


def test_a_closed_client_sends_nothing_more(cluster):
    """A run cancelled by Ctrl-C or SIGTERM closes its client while a batch may still wait for
    its linger. That batch fails definitely and is never written: before, its timer sent it
    after the close, over a new connection, from a task nobody awaited, which the interpreter
    then destroyed pending (a traceback in a terminated run's output). Sending after the close
    is refused."""
    async def scenario() -> tuple[list, list[tuple[int, int]], Client]:
        client = Client(cluster.address(2), linger_ms=200)
        await client.produce(TOPIC, 0, "1")
        outcomes: list = []
        client.send(TOPIC, 0, "2", "all", outcomes.append)
        await client.close()
        await asyncio.sleep(0.6)  # three lingers: the batch's timer would have fired
        reader = Client(cluster.address(1))
        try:
            records = await _read_all(reader)
        finally:
            await reader.close()
        return outcomes, records, client

    outcomes, records, client = asyncio.run(scenario())
    assert [v for _o, v in records] == [1], records
    assert len(outcomes) == 1 and isinstance(outcomes[0], ProduceError), outcomes
    assert outcomes[0].definite and "closed" in str(outcomes[0])
    with pytest.raises(ClientError, match="closed"):
        client.send(TOPIC, 0, "3", "all", outcomes.append)


def test_controller_restart_keeps_metadata_and_records(cluster):
    before = _describe(cluster)

    def fault():
        cluster.kill("controller", signal.SIGKILL)
        cluster.start_controller()
        cluster.wait_ready()
    outcome = _run_scenario(cluster, fault)
    assert len(outcome["ok"]) >= 4000
    after = _describe(cluster)
    assert after[0]["Replicas:"] == before[0]["Replicas:"]
    _check(outcome, _final_read(cluster))


def test_flush_messages_1_acknowledges_through_the_storage_thread_and_bad_frames_get_answers(tmp_path):
    """flush.messages=1 on real files: every acknowledgement waits for its fsync, which runs
    on the broker's storage thread; a malformed frame gets an INVALID_REQUEST answer and the
    broker goes on serving."""
    c = LocalCluster(tmp_path, brokers=3, config={"flush.messages": "1"})
    c.start()
    try:
        c.run_cli("topics", "--bootstrap", c.controller_address, "--create", "--topic", TOPIC,
                  "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
        _wait_isr(c, 3)
        leader = int(_describe(c)[0]["Leader:"])

        async def scenario() -> tuple[dict, list, list[dict]]:
            client = Client(c.address(leader), request_timeout_s=8)
            outcome: dict = {"ok": {}, "fail": set(), "info": set()}
            try:
                await _produce(client, range(0, 300), "all", outcome)
                await _produce(client, range(300, 400), "1", outcome)
                for _ in range(50):  # acks=1 records are read once the followers have them
                    records = await _read_all(client)
                    if len(records) >= 400:
                        break
                    await asyncio.sleep(0.2)
            finally:
                await client.close()
            host, port = c.address(leader).rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            answers = []
            for body in (b"\x00garbage", json.dumps({"type": "produce", "id": 3}).encode(),
                         json.dumps({"type": "metadata", "id": 4}).encode()):
                writer.write(len(body).to_bytes(4, "big") + body)
                length = int.from_bytes(await reader.readexactly(4), "big")
                answers.append(json.loads(await reader.readexactly(length)))
            writer.close()
            return outcome, records, answers

        outcome, records, answers = asyncio.run(scenario())
        assert len(outcome["ok"]) == 400, outcome
        _check(outcome, records)
        assert answers[0]["error"] == "INVALID_REQUEST" and "not JSON" in answers[0]["message"]
        assert answers[1]["error"] == "INVALID_REQUEST" and answers[1]["id"] == 3
        assert "metadata" in answers[2] and answers[2]["id"] == 4
    finally:
        c.stop()
