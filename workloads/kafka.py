"""The Kafka workload: producers of unique integers, polling consumers, the final read.

Every client operation is an invoke and exactly one completion in the history. Producers and
consumers are "processes" in Jepsen's sense: one operation at a time; one that saw an `info`
(unknown outcome) continues under a fresh process number."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replication.client import Client, ClientError, ProduceError
from replication.messages import ConsumerFetchReply, ProduceReply
from replication.net import Pool
from workloads.history import EncodedList, HistoryWriter, ProcessPool

INDETERMINATE_READ = {"NETWORK_ERROR", "REQUEST_TIMED_OUT"}
# How long a send waits for others to share its produce request: librdkafka's default and, since
# Kafka 4.0, the Java producer's (KIP-1030). The producers' send slots are 3.3 ms apart at the
# validation campaign's 300/s, so 5 ms batches two sends a request where 1 ms batched none; a
# simulated run then has 40 % fewer messages (docs/simulation.md, "Speed").
LINGER_MS = 5
# A consumer's poll is a long poll (Kafka's fetch.min.bytes and fetch.max.wait.ms, in records):
# the leader answers once a full fetch (POLL_MAX_RECORDS) is committed past the offset, or after
# POLL_MAX_WAIT_MS (checked at its 20 ms ticks) with what there is. Consumers used to poll again
# at once after records and 20 ms after an empty answer: a third of their polls came back empty,
# most others with a record or two, and the polls took a quarter of a simulated run's time. A
# 50 ms wait was cheaper still, but its fewer polls saw fewer stale reads (docs/simulation.md).
POLL_MAX_RECORDS = 500
POLL_MAX_WAIT_MS = 20
RESEEK = 0.05  # a poll's chance to re-read an earlier stretch first, as a restarted consumer would
_MAX_KEPT = 2_000_000  # offsets per partition whose poll JSON is kept (_poll_records)


@dataclass
class WorkloadParams:
    topic: str
    partitions: int
    acks: str = "all"
    rate: float = 500.0  # sends/s across all producers
    producers: int = 4
    consumers: int = 2
    request_timeout_s: float = 3.0
    seed: int = 0


class Pacer:
    """One producer's send slots: `producers / rate` apart, the producers staggered by index,
    catching up on at most 1 s of slots missed (a slow send, a fault). Plain arithmetic, not
    a coroutine: the simulator runs it once per send."""

    def __init__(self, params: WorkloadParams, index: int, now: float) -> None:
        self.interval = params.producers / params.rate if params.rate > 0 else 0.0
        self.next_at = now + self.interval * index / max(1, params.producers)

    def delay(self, now: float) -> float:
        """How long to wait for the next slot (<= 0: it is due)."""
        return self.next_at - now

    def advance(self, now: float) -> None:
        """The slot was taken at `now`: the next one."""
        self.next_at = max(self.next_at + self.interval, now - 1.0)


class _Ints(dict):
    """value text -> int(text), parsed on first use; a bounded cache."""

    def __missing__(self, text: str) -> int:
        if len(self) >= 100_000:
            self.clear()
        n = self[text] = int(text)
        return n


class _ClientProcess:
    """What a producer's and a consumer's callbacks share: `finished`, done when the process
    stops, and `_guarded`, which runs a step unless the run is over (`finished` cancelled)
    and ends the process with a step's exception (a bug), raised by `finished`."""

    def __init__(self, workload: KafkaWorkload, client: Client, stop: float) -> None:
        self.w = workload
        self.client = client
        self.stop = stop
        self.loop = asyncio.get_running_loop()
        self.process = workload.pool.new()
        self.finished: asyncio.Future[None] = self.loop.create_future()
        self.op: Any = None

    def _guarded(self, step: Callable[..., None], *args: Any) -> None:
        if self.finished.done():  # cancelled: the run is over
            return
        try:
            step(*args)
        except Exception as e:
            self.finished.set_exception(e)


class _Producer(_ClientProcess):
    """One producer process until `stop`: wait for its send slot, send one value, record the
    outcome, and again. Callbacks on the event loop (Client.send) rather than a coroutine: a
    simulated run makes thousands of sends, and a coroutine paid a future and a task wake-up
    for each wait. `finished` is done when the producer stops; cancelling it (the run is
    cancelled) stops it, and a send still in flight is then left pending, as a cancelled
    coroutine left it (the history's close completes it). An exception in the callbacks (a
    bug) ends the producer and is raised by `finished`."""

    def __init__(self, workload: KafkaWorkload, client: Client, index: int, stop: float) -> None:
        super().__init__(workload, client, stop)
        self.pace = Pacer(workload.p, index, self.loop.time())
        self._guarded(self._next)

    def _next(self) -> None:
        now = self.loop.time()
        if now >= self.stop:
            self.finished.set_result(None)
            return
        delay = self.pace.delay(now)
        if delay > 0:
            self.loop.call_later(delay, self._guarded, self._send)
        else:
            self._send()

    def _send(self) -> None:
        w = self.w
        self.pace.advance(self.loop.time())
        value = next(w.values)
        partition = value % w.p.partitions
        self.op = w.history.invoke(self.process, "send", partition=partition, value=value)
        self.client.send(w.p.topic, partition, str(value), w.p.acks,
                         lambda outcome: self._guarded(self._sent, outcome))

    def _sent(self, outcome: ProduceReply | ProduceError) -> None:
        w = self.w
        if isinstance(outcome, ProduceError):
            if outcome.definite:
                self.op.fail(outcome.error)
                w.stats["send-fail"] += 1
            else:
                self.op.info(outcome.error)
                w.stats["send-info"] += 1
                self.process = w.pool.retire(self.process)
        else:
            fields = {"node": outcome.node, "epoch": outcome.leader_epoch}
            if outcome.offset is not None:
                fields["offset"] = outcome.offset
            self.op.ok(**fields)
            w.stats["send-ok"] += 1
        self._next()


class _Consumer(_ClientProcess):
    """One consumer process until `stop`: poll a partition from its offset (now and then from
    an earlier one), record what it read, and again at once; after a definite failure, 50 ms
    later. Callbacks on the event loop (Client.poll), as `_Producer` is and for the same
    reason; `finished` as there."""

    def __init__(self, workload: KafkaWorkload, client: Client, index: int, stop: float) -> None:
        super().__init__(workload, client, stop)
        self.offsets = [0] * workload.p.partitions
        self.partition = index % workload.p.partitions
        self._guarded(self._next)

    def _next(self) -> None:
        if self.loop.time() >= self.stop:
            self.finished.set_result(None)
            return
        w = self.w
        partition = self.partition = (self.partition + 1) % w.p.partitions
        offsets = self.offsets
        if w.rng.random() < RESEEK:
            offsets[partition] = w.rng.randrange(offsets[partition] + 1)
        offset = offsets[partition]
        self.op = w.history.invoke(self.process, "poll", partition=partition, offset=offset)
        self.client.poll(w.p.topic, partition, offset, POLL_MAX_RECORDS,
                         lambda outcome: self._guarded(self._polled, outcome),
                         min_records=POLL_MAX_RECORDS, max_wait_ms=POLL_MAX_WAIT_MS)

    def _polled(self, outcome: ConsumerFetchReply | BaseException) -> None:
        w = self.w
        if isinstance(outcome, ClientError):
            if outcome.error in INDETERMINATE_READ:
                self.op.info(outcome.error)
                self.process = w.pool.retire(self.process)
            else:
                self.op.fail(outcome.error)
                self.loop.call_later(0.05, self._guarded, self._next)
                return
        elif isinstance(outcome, BaseException):
            raise outcome  # not the client's: a bug, to be seen as one
        else:
            partition = self.partition
            records = w._poll_records(partition, outcome.records)
            self.op.ok(records=records, hwm=outcome.hwm, node=outcome.node, epoch=outcome.leader_epoch)
            w.stats["poll-ok"] += 1
            if records:
                self.offsets[partition] = records[-1][0] + 1
        self._next()


class KafkaWorkload:
    def __init__(self, params: WorkloadParams, bootstrap: list[str], history: HistoryWriter, *,
                 pool_factory: Callable[[], Pool] | None = None, linger_ms: float = LINGER_MS) -> None:
        self.p = params
        self.linger_ms = linger_ms  # the simulator passes its own (simulation/run.py)
        self.bootstrap = bootstrap
        self.history = history
        # Connections for each client; a simulator passes one over its simulated network.
        self.pool_factory = pool_factory
        self.pool = ProcessPool()
        self.values = itertools.count(1)
        self.rng = random.Random(params.seed)
        self.stats = {"send-ok": 0, "send-fail": 0, "send-info": 0, "poll-ok": 0}
        self.final_errors: dict[int, str] = {}
        self._ints = _Ints()  # value text -> int(text), see _parse
        self._seen: dict[int, list[tuple[int, str]]] = {}  # see _poll_records
        self._kept: dict[int, list[list[int]]] = {}
        self._texts: dict[int, list[str]] = {}

    def _client(self) -> Client:
        pool = None if self.pool_factory is None else self.pool_factory()
        return Client(self.bootstrap, request_timeout_s=self.p.request_timeout_s, linger_ms=self.linger_ms,
                      pool=pool)

    async def connect(self) -> None:
        """Nothing to prepare: the client fetches metadata on its first send, in a few ms."""

    async def run(self, duration_s: float) -> None:
        client = self._client()
        stop = asyncio.get_running_loop().time() + duration_s
        try:
            tasks: list = [_Producer(self, client, i, stop).finished for i in range(self.p.producers)]
            tasks += [_Consumer(self, client, i, stop).finished for i in range(self.p.consumers)]
            await asyncio.gather(*tasks)
        finally:
            await client.close()

    def _parse(self, pairs: tuple[tuple[int, str], ...]) -> list[list[int]]:
        """[[offset, int(value)]] of a poll's records. Consumers read most records many
        times (re-seeks): each value text is parsed once and looked up after that."""
        ints = self._ints
        return [[o, ints[v]] for o, v in pairs]

    def _poll_records(self, partition: int, pairs: tuple[tuple[int, str], ...]) -> list[list[int]]:
        """`_parse(pairs)`, with its JSON text for the history writer (EncodedList).
        Consumers read most records many times (re-seeks), so each partition keeps, by
        offset, the (offset, value) pair last read there, its [offset, int(value)] record
        and that record's JSON text; a poll whose pairs all equal the kept ones is made of
        those (the records are shared between polls: nothing changes them once written). A
        pair that differs (a truncated and rewritten offset) is learnt again."""
        n = len(pairs)
        if not n:
            return []
        first = pairs[0][0]
        if first.__class__ is not int or first < 0:
            return self._parse(pairs)
        end = first + n
        seen = self._seen.setdefault(partition, [])  # offset -> the (offset, value) read there
        kept = self._kept.setdefault(partition, [])  # offset -> [offset, int(value)]
        texts = self._texts.setdefault(partition, [])  # offset -> that record's JSON text
        if end > len(seen) or tuple(seen[first:end]) != pairs:
            if first > len(seen) or end > _MAX_KEPT:
                return self._parse(pairs)
            for i, (o, _) in enumerate(pairs):
                if o.__class__ is not int or o != first + i:
                    return self._parse(pairs)
            ints = self._ints
            for pair in pairs:
                o, v = pair
                if o < len(seen):
                    if seen[o] == pair:
                        continue
                    record = [o, ints[v]]
                    seen[o], kept[o], texts[o] = pair, record, f"[{o}, {record[1]}]"
                else:
                    record = [o, ints[v]]
                    seen.append(pair)
                    kept.append(record)
                    texts.append(f"[{o}, {record[1]}]")
        return EncodedList(kept[first:end], "[" + ", ".join(texts[first:end]) + "]")

    async def final_read(self, timeout_s: float) -> dict[int, bool]:
        """Read every partition from 0 until two consecutive reads agree and the HWM has reached
        the log end; one `final-poll` op per partition. Returns which partitions completed."""
        client = self._client()
        done: dict[int, bool] = {}
        try:
            results = await asyncio.gather(*(self._final_partition(client, p, timeout_s)
                                             for p in range(self.p.partitions)))
            done = dict(zip(range(self.p.partitions), results, strict=True))
        finally:
            await client.close()
        return done

    async def _read_partition(self, client: Client, partition: int) -> tuple[list[list[int]], ConsumerFetchReply]:
        records: list[list[int]] = []
        while True:
            reply = await client.fetch(self.p.topic, partition, len(records), max_records=5000,
                                       refresh=not records)
            if not reply.records:
                return records, reply
            if reply.records[0][0] != len(records):
                raise ClientError("INCONSISTENT_READ", "leader changed during the final read")
            records += [[o, int(v)] for o, v in reply.records]

    async def _final_partition(self, client: Client, partition: int, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        previous = None
        last_error = "TIMEOUT"
        while loop.time() < deadline:
            process = self.pool.new()
            op = self.history.invoke(process, "final-poll", partition=partition, offset=0)
            try:
                records, reply = await self._read_partition(client, partition)
            except ClientError as e:
                op.fail(e.error)
                last_error = e.error
                await asyncio.sleep(0.5)
                continue
            stable = previous == records and reply.hwm == reply.log_end_offset
            op.ok(records=records, hwm=reply.hwm, node=reply.node, epoch=reply.leader_epoch,
                  complete=stable)
            if stable:
                return True
            previous = records
            await asyncio.sleep(0.3)
        self.final_errors[partition] = last_error
        return False
