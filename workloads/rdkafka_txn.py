"""Transactions on Apache Kafka through confluent-kafka: Jepsen's `:txn` workload in our
history format (docs/formats.md, "Transactions in history.jsonl"; docs/kafka.md).

- Transactional producers (`transactional.id` each, init / begin / commit / abort): each
  transaction sends one value to each of 1 to 3 distinct partitions, and one in ten is
  aborted on purpose. Each send is a part of the transaction (`txn`, `mop`, `client`),
  invoked when it is produced and completed once the transaction's outcome is known: `ok`
  with its offset when the commit succeeded, `fail` when the transaction was aborted (on
  purpose, or because the commit asked for it), `info` when the outcome is unknown (a commit
  that timed out, a fenced or fatally failed producer: the client then starts a new producer
  with the same `transactional.id`, which fences the old one, as a restarted application
  would).
- Read-committed consumers: the per-partition consumers of workloads.rdkafka, each poll a
  transaction of one part, which report no high watermark (a read-committed fetch ends at
  the last stable offset, which an open transaction holds back), and members of one consumer
  group that `subscribe` to the topic: each poll is one transaction with a part per
  partition it returned records of. A rebalance gives the member new process numbers, so its
  reads are not compared across it (Jepsen resets a consumer's place in a key its
  assignment dropped).
- The final read is workloads.rdkafka's, read-committed.

A client's sends to one partition use one process, so each transaction sends at most once to
a partition: a process has one operation in flight (docs/architecture.md, "History").
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections import defaultdict
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import confluent_kafka as ck

from workloads.kafka import Pacer
from workloads.rdkafka import RdKafkaWorkload, _error_name, known_offset

ABORT_SHARE = 0.1  # transactions aborted on purpose
MAX_PARTS = 3
_TXN_TIMEOUT_MS = 10_000
COMMITTED, UNCOMMITTED = "read_committed", "read_uncommitted"  # isolation.level, in polls
GROUP = "harness-txn-group"
TXN_LOG = "__transaction_state"  # Kafka's transaction log: its leaders are the coordinators
OFFSETS_LOG = "__consumer_offsets"  # its leaders are the consumer groups' coordinators


def transactional_id(seed: int, client: int) -> str:
    return f"harness-{seed}-{client}"


def coordinator_partition(coordinated_id: str, log_partitions: int) -> int:
    """The log partition whose leader coordinates `coordinated_id` (a transactional id in the
    transaction log, a group id in the consumer offsets log), as Kafka's partitionFor computes
    both: the abs of Java's String.hashCode, modulo the log's partition count
    (FindCoordinator answers with that partition's leader)."""
    data = coordinated_id.encode("utf-16-be")  # Java hashes a String's UTF-16 code units
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % log_partitions


class RdKafkaTxnWorkload(RdKafkaWorkload):
    """Transactional producers and read-committed consumers (per partition, and a group)."""

    reports_hwm = False

    def __init__(self, *args: Any, uncommitted: int = 0, **kwargs: Any) -> None:
        kwargs["idempotence"] = True  # transactions need it (and acks=all)
        super().__init__(*args, **kwargs)
        self.uncommitted = uncommitted  # read-uncommitted consumers, beside the others
        self.log_end: dict[int, int] = {}  # partition -> its high watermark, at the final read
        # a thread per client: a commit, like a group member's consume, blocks its thread
        self._threads.shutdown(wait=False)
        self._threads = ThreadPoolExecutor(max_workers=self.threads_needed(),
                                           thread_name_prefix="rdkafka-txn")
        self.txn_ids = itertools.count()
        self.stats.update({"txn-ok": 0, "txn-fail": 0, "txn-info": 0, "txn-aborted": 0,
                           "group-polls": 0, "rebalances": 0})

    def threads_needed(self) -> int:
        """A thread per client that blocks (a commit, a group member's consume) and per
        partition the final read reads at once."""
        return self.p.producers + self.p.consumers + self.uncommitted + self.keys + 2

    def final_fields(self, partition: int) -> dict[str, Any]:
        end = self.log_end.get(partition)
        return {} if end is None else {"log_end": end}

    def poll_fields(self, isolation: str | None) -> dict[str, Any]:
        return {"txn": next(self.txn_ids), "mop": 0, "isolation": isolation or COMMITTED}

    def consumer_config(self) -> dict[str, Any]:
        return {**super().consumer_config(), "isolation.level": COMMITTED}

    def transactional_config(self, client: int, generation: int) -> dict[str, Any]:
        conf = {k: v for k, v in self.producer_config().items() if k != "retries"}
        return {**conf, "enable.idempotence": True, "acks": "all",
                "transactional.id": transactional_id(self.p.seed, client),
                "transaction.timeout.ms": _TXN_TIMEOUT_MS,
                "client.id": f"txn-{client}-{generation}"}

    async def connect(self) -> None:
        """Nothing to warm: each client's producer gets its producer id in `run`."""

    async def run(self, duration_s: float) -> None:
        stop = asyncio.get_running_loop().time() + duration_s
        await asyncio.gather(*self.clients(stop))

    def clients(self, stop: float) -> list[Coroutine[Any, Any, None]]:
        """Every client of the run, each until `stop` (on the event loop's clock)."""
        tasks = [self._txn_client(i, stop) for i in range(self.p.producers)]
        tasks += [self._consumer(i, stop) for i in range((self.p.consumers + 1) // 2)]
        tasks += [self._group_member(i, stop) for i in range(self.p.consumers // 2)]
        tasks += [self._consumer(self.p.consumers + i, stop, UNCOMMITTED)
                  for i in range(self.uncommitted)]
        return tasks

    # ---- transactional producers -----------------------------------------------------------

    async def _producer_for(self, client: int, generation: int) -> ck.Producer | None:
        producer = ck.Producer(self.transactional_config(client, generation))
        try:
            await self._blocking(producer.init_transactions, self._timeout_ms / 1000 + 5)
        except ck.KafkaException:
            return None
        return producer

    async def _txn_client(self, client: int, stop: float) -> None:
        loop = asyncio.get_running_loop()
        pace = Pacer(self.p, client, loop.time())
        processes: dict[int, int] = {}
        generation = 0
        producer = None
        while loop.time() < stop:
            if producer is None:
                producer = await self._producer_for(client, generation)
                generation += 1
                if producer is None:
                    await asyncio.sleep(0.5)
                    continue
            delay = pace.delay(loop.time())
            if delay > 0:
                await asyncio.sleep(delay)
            pace.advance(loop.time())
            outcome = await self._transaction(producer, client, processes)
            if outcome == "info":
                producer = None  # the next one, same transactional.id, fences this one

    async def _transaction(self, producer: ck.Producer, client: int,
                           processes: dict[int, int]) -> str:
        tid = next(self.txn_ids)
        parts = self._rng.sample(range(self.p.partitions),
                                 self._rng.randint(1, min(MAX_PARTS, self.p.partitions)))
        abort = self._rng.random() < ABORT_SHARE
        values = [next(self.values) for _ in parts]
        for p in parts:
            processes.setdefault(p, self.pool.new())
        ops = [self.history.invoke(processes[p], "send", partition=p, value=v, txn=tid, mop=i,
                                   client=client)
               for i, (p, v) in enumerate(zip(parts, values, strict=True))]
        outcome, detail = await self._blocking(self._transact, producer, parts, values, abort)
        for op, p in zip(ops, parts, strict=True):
            if outcome == "ok":
                offset = detail.get(p)
                op.ok(**({"offset": offset} if offset is not None else {}))
            elif outcome == "fail":
                op.fail(detail["error"])
            else:
                op.info(detail["error"])
                processes[p] = self.pool.retire(processes[p])
        self.stats[f"txn-{outcome}"] += 1
        self.stats[f"send-{outcome}"] += len(parts)  # what a run's progress line counts
        self.stats["txn-aborted"] += abort
        return outcome

    def _transact(self, producer: ck.Producer, parts: list[int], values: list[int],
                  abort: bool) -> tuple[str, dict[Any, Any]]:
        """One transaction, on this workload's thread: ("ok", {partition: offset}),
        ("fail", {"error": ...}) or ("info", {"error": ...})."""
        try:
            producer.begin_transaction()
        except ck.KafkaException as e:
            return "fail", {"error": _error_name(e.args[0])}  # nothing was sent

        def send(delivered: Callable[..., None], _timeout: float) -> None:
            for p, v in zip(parts, values, strict=True):
                producer.produce(self.p.topic, str(v).encode(), partition=p,
                                 on_delivery=delivered)
        return self._finish(producer, send, abort)

    def _finish(self, producer: ck.Producer, send: Callable[[Callable[..., None], float], None],
                abort: bool) -> tuple[str, dict[Any, Any]]:
        """The rest of a begun transaction: `send(delivered, timeout)` its records, then the
        planned abort or the commit: ("ok", {partition: offset}), ("fail", ...) or ("info", ...)."""
        offsets: dict[Any, Any] = {}
        timeout = self._timeout_ms / 1000 + 5

        def delivered(err: ck.KafkaError | None, msg: ck.Message) -> None:
            if err is None and (offset := known_offset(msg.offset())) is not None:
                offsets[msg.partition()] = offset

        try:
            send(delivered, timeout)
            if abort:
                # delivered first, so the aborted records are in the log (an abort purges
                # what is still queued): read-committed consumers must skip them, and
                # read-uncommitted ones may read them
                producer.flush(timeout)
                producer.abort_transaction(timeout)
                return "fail", {"error": "aborted-on-purpose"}
            producer.commit_transaction(timeout)
            return "ok", offsets
        except BufferError:
            return self._abort(producer, "QUEUE_FULL")
        except ck.KafkaException as e:
            err = e.args[0]
            if err.txn_requires_abort():
                return self._abort(producer, _error_name(err))
            return "info", {"error": _error_name(err)}

    def _abort(self, producer: ck.Producer, why: str) -> tuple[str, dict[str, str]]:
        try:
            producer.abort_transaction(self._timeout_ms / 1000 + 5)
        except ck.KafkaException as e:
            return "info", {"error": f"{why}, then abort: {_error_name(e.args[0])}"}
        return "fail", {"error": why}

    # ---- the final read ----------------------------------------------------------------------

    def _read_all(self, consumer: ck.Consumer, partition: int,
                  budget_s: float) -> tuple[list[list[int]], int, str | None]:
        """The partition read whole once no transaction is open on it: a read-committed read
        ends at the last stable offset (what a read-committed consumer's watermark query
        returns), which an open transaction holds below the high watermark until it commits,
        is aborted, or times out (a producer left after an `info` never ends its own). Read
        before that, committed records past it would be left unconfirmed. Until then the
        attempt fails (OPEN_TRANSACTION) and the final read tries again.

        The `hwm` it reports is the end of the data: the offset after the last record it
        returned, once it read to the end with no transaction open. What lies past that
        record are control records (commit and abort markers) and aborted records, which a
        read-committed read never returns, so the checker, which takes a final read as
        whole when its last record is just below `hwm`, would otherwise never take one
        whole; the high watermark itself is `log_end`."""
        tp = self.topic_partition(partition)
        timeout = min(5.0, max(budget_s, 0.5))
        uncommitted = ck.Consumer({**self.consumer_config(), "isolation.level": UNCOMMITTED})
        try:
            _, stable = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
            _, hwm = uncommitted.get_watermark_offsets(tp, timeout=timeout, cached=False)
        except ck.KafkaException as e:
            return [], 0, _error_name(e.args[0])
        finally:
            uncommitted.close()
        if stable < hwm:
            return [], stable, f"OPEN_TRANSACTION: last stable offset {stable} < hwm {hwm}"
        records, _, error = super()._read_all(consumer, partition, budget_s)
        self.log_end[partition] = hwm
        return records, (records[-1][0] + 1 if records else 0), error

    # ---- a consumer group ------------------------------------------------------------------

    async def _group_member(self, index: int, stop: float) -> None:
        """A member of one group that subscribes to the topic. Rebalances are cooperative
        (KIP-429): a partition the member keeps is read on from where it was, under the same
        process, so its polls are judged like any consumer's; a partition it gains starts a
        new process, at the group's committed offset (auto-commit, and a commit of what was
        returned as a partition is revoked)."""
        loop = asyncio.get_running_loop()
        consumer = ck.Consumer({**self.consumer_config(), "group.id": GROUP,
                                "enable.auto.commit": True, "auto.offset.reset": "earliest",
                                "enable.partition.eof": False,
                                "partition.assignment.strategy": "cooperative-sticky",
                                "client.id": f"group-member-{index}"})
        moved: set[int] = set()

        def rebalanced(_consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
            moved.update(tp.partition for tp in partitions)  # on this workload's thread

        consumer.subscribe([self.p.topic], on_assign=rebalanced, on_revoke=rebalanced,
                           on_lost=rebalanced)
        processes: dict[int, int] = {}
        try:
            while loop.time() < stop:
                messages = await self._blocking(consumer.consume, 200, 0.5)
                if moved:
                    for p in moved:  # gained or lost: no comparison across the move
                        processes.pop(p, None)
                    moved.clear()
                    self.stats["rebalances"] += 1
                self._write_group_poll(messages, processes)
        finally:
            await self._blocking(consumer.close)

    def _write_group_poll(self, messages: list[ck.Message], processes: dict[int, int]) -> None:
        by_partition: dict[int, list[list[int]]] = defaultdict(list)
        for msg in messages:
            if msg.error() is None:
                by_partition[msg.partition()].append([msg.offset(), int(msg.value())])
        if not by_partition:
            return
        tid = next(self.txn_ids)
        for mop, (p, records) in enumerate(sorted(by_partition.items())):
            if p not in processes:
                processes[p] = self.pool.new()
            op = self.history.invoke(processes[p], "poll", partition=p, txn=tid, mop=mop,
                                     isolation=COMMITTED, group=GROUP)
            op.ok(records=records)
        self.stats["group-polls"] += 1
