"""Consume-transform-produce on Apache Kafka: exactly-once delivery through a consumer group
(docs/kafka.md, "Consume-transform-produce"), beside the transactional workload's clients.

`workload.transformers` members of one group subscribe to the test topic (read-committed,
cooperative rebalancing, no auto-commit). Each takes what one consume returns (up to BATCH
records) and, in one transaction of its own transactional producer, sends to the output
topic (`<topic>-out`, as many partitions) one record per input partition it read, made of
those records (named in the record's `sources` header), and commits the group's offsets past
them (`send_offsets_to_transaction` with the consumer's group metadata, so that a member the
group has moved on from is fenced, KIP-447). One transaction in ten of each transformer is
aborted on purpose after its records were delivered: its fourth, 14th, 24th, ..., so that
even a short run aborts some (a run's transformers commit a few a second). After any abort
the member goes back to where its group's offsets are (a seek to the first record of the
batch in each partition) and transforms the batch again, as an exactly-once application
must.

In the history a transformer's transaction is one `txn`, Jepsen's :txn of [:poll] and
[:send] micro-ops: a poll part per input partition (with `group`, `isolation` and its
records, kept on an abort too) and a send part per output record, whose `sources` are the
input records ([partition, offset, value]) it was made of (checkers/txn/exactly_once.py
judges them). The output topic's partition q is the history's partition P + q (P the test
topic's partitions), so every per-partition check, the per-partition consumers and the final
read cover it. The outcome is the commit's: `ok`, `fail` after an abort, `info` when unknown;
a member whose transaction ended `info` is closed, and a new one (the same transactional.id,
which fences the old producer, and a new group member) takes its place.

When the run's time is up the transformers stop with the other clients; after the faults are
healed, and before the final read, they run again until the group's committed offsets have
no committed input past them (or for `workload.final_read_timeout`): faults stall them for
seconds at a time (the transaction log below `min.insync.replicas`; librdkafka waiting for a
group coordinator that went away: docs/kafka.md, "Why transformers stall"), and without
this catch-up the inputs they had not reached would go unjudged. `HARNESS_CTP_DEBUG` (librdkafka debug contexts, e.g. `cgrp,eos`) logs their
clients' consumer-group and transaction machinery to the harness's standard error.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

import confluent_kafka as ck

from workloads import kafka_admin
from workloads.history import Pending
from workloads.rdkafka import _error_name
from workloads.rdkafka_txn import COMMITTED, UNCOMMITTED, RdKafkaTxnWorkload

BATCH = 20  # records a transaction transforms at most (one consume)
ABORT_EVERY, ABORT_AT = 10, 3  # a transformer's transactions n with n % 10 == 3 are aborted
CTP_GROUP = "harness-ctp-group"
# librdkafka debug contexts (e.g. "cgrp,eos") for the transformers' consumers and producers,
# logged to the harness's standard error: how a stalled transformer is looked into
DEBUG_ENV = "HARNESS_CTP_DEBUG"
Batch = dict[int, list[list[int]]]  # input partition -> its records [offset, value], in order


def output_topic(topic: str) -> str:
    return f"{topic}-out"


def _debug_config() -> dict[str, Any]:
    contexts = os.environ.get(DEBUG_ENV)
    return {"debug": contexts, "log_level": 7} if contexts else {}


class _Member:
    """One transformer's group consumer and transactional producer, and the processes its
    parts use (one per history partition: a part per partition and transaction)."""

    def __init__(self, consumer: ck.Consumer, producer: ck.Producer) -> None:
        self.consumer = consumer
        self.producer = producer
        self.processes: dict[int, int] = {}
        self.moved: set[int] = set()  # input partitions gained or lost since the last consume
        self.broken = False  # its producer failed for good: the member must be replaced

    def rebalanced(self, _consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
        self.moved.update(tp.partition for tp in partitions)  # on the consuming thread

    def close(self) -> None:
        """Leave the group. The producer is only dropped: no transaction of it is left to
        flush, and one that failed for good (fenced, say) raises on any call."""
        try:
            self.consumer.close()
        except ck.KafkaException:
            pass  # the group's coordinator expires the member instead


class TransformingTxnWorkload(RdKafkaTxnWorkload):
    """The transactional workload and, beside it, consume-transform-produce transformers."""

    def __init__(self, *args: Any, transformers: int, **kwargs: Any) -> None:
        self.transformers = transformers  # before the thread pool is sized
        super().__init__(*args, **kwargs)
        self.stats.update({"transform-ok": 0, "transform-fail": 0, "transform-info": 0,
                           "transform-rebalances": 0})
        self._transactions: dict[int, int] = defaultdict(int)  # transformer client -> count
        self._generations: dict[int, int] = defaultdict(int)  # transformer -> members made
        self._caught_up = asyncio.Event()  # set when the catch-up ends: every member stops

    @property
    def keys(self) -> int:
        return 2 * self.p.partitions  # the test topic's, then the output topic's

    def topic_partition(self, key: int, offset: int = ck.OFFSET_INVALID) -> ck.TopicPartition:
        if key < self.p.partitions:
            return super().topic_partition(key, offset)
        return ck.TopicPartition(output_topic(self.p.topic), key - self.p.partitions, offset)

    def threads_needed(self) -> int:
        return super().threads_needed() + self.transformers

    def transactional_config(self, client: int, generation: int) -> dict[str, Any]:
        conf = super().transactional_config(client, generation)
        return {**conf, **_debug_config()} if client >= self.p.producers else conf

    async def connect(self) -> None:
        """The output topic, made like the test topic: as many partitions, as many replicas."""
        bootstrap = self.bootstrap.split(",")
        out = output_topic(self.p.topic)
        replicas = len((await kafka_admin.describe_partitions(bootstrap, self.p.topic))[0]
                       ["replicas"])
        await kafka_admin.create_topic(bootstrap, 1, out, self.p.partitions, replicas)
        if not await kafka_admin.wait_healthy(bootstrap, out, self.p.partitions, 60):
            raise kafka_admin.KafkaAdminError(f"topic {out!r} got no full ISR within 60 s")

    def clients(self, stop: float) -> list[Coroutine[Any, Any, None]]:
        return [*super().clients(stop),
                *(self._transformer(i, stop) for i in range(self.transformers))]

    # ---- a transformer ---------------------------------------------------------------------

    async def _transformer(self, index: int, stop: float) -> None:
        loop = asyncio.get_running_loop()
        client = self.p.producers + index  # its transactional.id, apart from the producers'
        while loop.time() < stop and not self._caught_up.is_set():
            member = await self._join(client, index, self._generations[index])
            self._generations[index] += 1
            if member is None:
                await asyncio.sleep(0.5)
                continue
            try:
                await self._transform_until(member, client, stop)
            finally:
                await self._blocking(member.close)

    # ---- catching up before the final read -------------------------------------------------

    async def final_read(self, timeout_s: float) -> dict[int, bool]:
        """The transformers catch up with the input first (below), then the final read."""
        await self._catch_up(timeout_s)
        return await super().final_read(timeout_s)

    async def _catch_up(self, timeout_s: float) -> None:
        """With the producers stopped and the faults healed, the transformers run again until
        the group's committed offsets have no committed input past them, or for `timeout_s`:
        so the exactly-once check judges every input, not only those the group reached while
        faults held it back (docs/kafka.md, "Why transformers stall"). How long it took, and
        whether it got there, are in the stats."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        stop = started + timeout_s
        transformers = [loop.create_task(self._transformer(i, stop))
                        for i in range(self.transformers)]
        try:
            while loop.time() < stop and not await self._blocking(self._group_at_end):
                await asyncio.sleep(1.0)
        finally:
            self.stats["transform-caught-up"] = loop.time() < stop
            self._caught_up.set()
            await asyncio.gather(*transformers)
        self.stats["transform-catch-up-s"] = round(loop.time() - started, 1)

    def _group_at_end(self) -> bool:
        """Whether no committed input lies at or past the group's committed offsets: no
        transaction is open on an input partition (its last stable offset is its high
        watermark) and a read-committed read from those offsets returns nothing."""
        check = ck.Consumer({**self.consumer_config(), "group.id": CTP_GROUP,
                             "enable.partition.eof": False})
        uncommitted = ck.Consumer({**self.consumer_config(), "isolation.level": UNCOMMITTED})
        try:
            inputs = [self.topic_partition(p) for p in range(self.p.partitions)]
            for tp in inputs:
                if (check.get_watermark_offsets(tp, timeout=5, cached=False)[1]
                        < uncommitted.get_watermark_offsets(tp, timeout=5, cached=False)[1]):
                    return False  # a transaction is open: what it holds back may commit
            committed = check.committed(inputs, timeout=5)
            check.assign([ck.TopicPartition(tp.topic, tp.partition, max(tp.offset, 0))
                          for tp in committed])
            return not any(m.error() is None for m in check.consume(BATCH, 2.0))
        except ck.KafkaException:
            return False  # asked again in a second
        finally:
            check.close()
            uncommitted.close()

    async def _join(self, client: int, index: int, generation: int) -> _Member | None:
        """A producer holding its transactional id (fencing any earlier one) and a consumer
        joining the group, or None when the producer could not get its id."""
        producer = await self._producer_for(client, generation)
        if producer is None:
            return None
        consumer = ck.Consumer({**self.consumer_config(), "group.id": CTP_GROUP,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                "enable.partition.eof": False,
                                "partition.assignment.strategy": "cooperative-sticky",
                                "client.id": f"transformer-{index}-{generation}",
                                **_debug_config()})
        member = _Member(consumer, producer)
        consumer.subscribe([self.p.topic], on_assign=member.rebalanced,
                           on_revoke=member.rebalanced, on_lost=member.rebalanced)
        return member

    async def _transform_until(self, member: _Member, client: int, stop: float) -> None:
        """Transactions until `stop`, or until one ends `info` or the producer or consumer
        fails for good (the member is then done)."""
        loop = asyncio.get_running_loop()
        while loop.time() < stop and not member.broken and not self._caught_up.is_set():
            try:
                messages = await self._blocking(member.consumer.consume, BATCH, 0.5)
            except ck.KafkaException:
                return  # the consumer failed for good
            if member.moved:  # no comparison of a partition's reads across a move
                for p in member.moved:
                    member.processes.pop(p, None)
                member.moved.clear()
                self.stats["transform-rebalances"] += 1
            batch: Batch = defaultdict(list)
            for msg in messages:
                if msg.error() is None:
                    batch[msg.partition()].append([msg.offset(), int(msg.value())])
            if batch and await self._transform(member, client, dict(batch)) == "info":
                return

    async def _transform(self, member: _Member, client: int, batch: Batch) -> str:
        """One transaction: the batch's polls and an output record per input partition."""
        tid = next(self.txn_ids)
        abort = self._transactions[client] % ABORT_EVERY == ABORT_AT
        self._transactions[client] += 1
        outputs = {p: next(self.values) for p in sorted(batch)}
        polls = [(p, self._part(member, p, "poll", tid, mop, client, isolation=COMMITTED,
                                group=CTP_GROUP))
                 for mop, p in enumerate(outputs)]
        sends = [(p, self._part(member, self.p.partitions + p, "send", tid, len(polls) + mop,
                                client, value=v, sources=[[p, o, x] for o, x in batch[p]]))
                 for mop, (p, v) in enumerate(outputs.items())]
        outcome, detail = await self._blocking(self._transact_batch, member, batch, outputs,
                                               abort)
        for p, op in polls:
            self._complete(op, outcome, detail, records=batch[p])
        for p, op in sends:
            offset = detail.get(p) if outcome == "ok" else None
            self._complete(op, outcome, detail, **({} if offset is None else {"offset": offset}))
        self.stats[f"transform-{outcome}"] += 1
        return outcome

    def _part(self, member: _Member, key: int, f: str, tid: int, mop: int, client: int,
              **fields: Any) -> Pending:
        process = member.processes.setdefault(key, self.pool.new())
        return self.history.invoke(process, f, partition=key, txn=tid, mop=mop, client=client,
                                   **fields)

    @staticmethod
    def _complete(op: Pending, outcome: str, detail: dict[Any, Any], **fields: Any) -> None:
        if outcome == "ok":
            op.ok(**fields)
        elif outcome == "fail":
            op.fail(detail["error"], **fields)
        else:
            op.info(detail["error"], **fields)

    def _transact_batch(self, member: _Member, batch: Batch, outputs: dict[int, int],
                        abort: bool) -> tuple[str, dict[Any, Any]]:
        """The transaction, on this workload's thread: ("ok", {output partition: offset}),
        ("fail", {"error": ...}) once the member went back to the batch, or ("info", ...)."""
        outcome = self._try_batch(member, batch, outputs, abort)
        if outcome[0] == "fail":
            self._rewind(member.consumer, batch)
        return outcome

    def _try_batch(self, member: _Member, batch: Batch, outputs: dict[int, int],
                   abort: bool) -> tuple[str, dict[Any, Any]]:
        producer = member.producer
        try:
            producer.begin_transaction()
        except ck.KafkaException as e:
            member.broken = e.args[0].fatal()
            return "fail", {"error": _error_name(e.args[0])}  # nothing was sent

        def send(delivered: Callable[..., None], timeout: float) -> None:
            for p, value in outputs.items():
                sources = json.dumps([[p, o, v] for o, v in batch[p]]).encode()
                producer.produce(output_topic(self.p.topic), str(value).encode(), partition=p,
                                 headers=[("sources", sources)], on_delivery=delivered)
            consumed = [ck.TopicPartition(self.p.topic, p, records[-1][0] + 1)
                        for p, records in batch.items()]
            producer.send_offsets_to_transaction(
                consumed, member.consumer.consumer_group_metadata(), timeout)
        return self._finish(producer, send, abort)

    def _rewind(self, consumer: ck.Consumer, batch: Batch) -> None:
        """Back to the group's committed offsets: the first record of the batch in each
        partition (an aborted transaction committed none past it). A partition no longer
        assigned is skipped: its next owner starts from the committed offset."""
        for p, records in batch.items():
            try:
                consumer.seek(ck.TopicPartition(self.p.topic, p, records[0][0]))
            except ck.KafkaException:
                pass
