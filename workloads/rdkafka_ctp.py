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
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

import confluent_kafka as ck

from workloads import kafka_admin
from workloads.history import Pending
from workloads.rdkafka import _error_name
from workloads.rdkafka_txn import COMMITTED, RdKafkaTxnWorkload

BATCH = 20  # records a transaction transforms at most (one consume)
ABORT_EVERY, ABORT_AT = 10, 3  # a transformer's transactions n with n % 10 == 3 are aborted
CTP_GROUP = "harness-ctp-group"
Batch = dict[int, list[list[int]]]  # input partition -> its records [offset, value], in order


def output_topic(topic: str) -> str:
    return f"{topic}-out"


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

    @property
    def keys(self) -> int:
        return 2 * self.p.partitions  # the test topic's, then the output topic's

    def topic_partition(self, key: int, offset: int = ck.OFFSET_INVALID) -> ck.TopicPartition:
        if key < self.p.partitions:
            return super().topic_partition(key, offset)
        return ck.TopicPartition(output_topic(self.p.topic), key - self.p.partitions, offset)

    def threads_needed(self) -> int:
        return super().threads_needed() + self.transformers

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
        generation = 0
        while loop.time() < stop:
            member = await self._join(client, index, generation)
            generation += 1
            if member is None:
                await asyncio.sleep(0.5)
                continue
            try:
                await self._transform_until(member, client, stop)
            finally:
                await self._blocking(member.close)

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
                                "client.id": f"transformer-{index}-{generation}"})
        member = _Member(consumer, producer)
        consumer.subscribe([self.p.topic], on_assign=member.rebalanced,
                           on_revoke=member.rebalanced, on_lost=member.rebalanced)
        return member

    async def _transform_until(self, member: _Member, client: int, stop: float) -> None:
        """Transactions until `stop`, or until one ends `info` or the producer or consumer
        fails for good (the member is then done)."""
        loop = asyncio.get_running_loop()
        while loop.time() < stop and not member.broken:
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
