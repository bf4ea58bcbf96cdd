"""The Kafka workload against Apache Kafka, through confluent-kafka (librdkafka), the client
most Kafka users run (docs/kafka.md).

It writes the same history as the embedded workload (workloads.kafka): producers of unique
integers, consumers that poll partition by partition with an occasional re-seek, and the final
read, so every checker reads it unchanged. librdkafka is callback- and thread-based: delivery
reports arrive on a poller thread and are handed to the event loop, and every blocking consumer
call runs on this workload's own threads; the history is written from the loop alone.

Outcomes are classed by what they prove. A delivery report without error is `ok` with the
record's offset. An error is `fail` (definitely not written) only when no attempt can have
reached a broker's log: the client never had the partition, its queue was full, or, with
retries off, the one attempt was refused outright. Everything else (timeouts, lost
connections, any error after internal retries) is `info`: it may have been written."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import confluent_kafka as ck

from workloads.history import HistoryWriter, ProcessPool
from workloads.kafka import LINGER_MS, Pacer, WorkloadParams

_E = ck.KafkaError
# Local errors: the record never left the client.
NEVER_SENT = {_E._UNKNOWN_PARTITION, _E._UNKNOWN_TOPIC, _E._QUEUE_FULL}
# A broker refused the request before appending (only definite for a single attempt).
REFUSED = {_E.NOT_ENOUGH_REPLICAS, _E.NOT_LEADER_FOR_PARTITION, _E.UNKNOWN_TOPIC_OR_PART,
           _E.LEADER_NOT_AVAILABLE, _E.FENCED_LEADER_EPOCH, _E.INVALID_REQUIRED_ACKS,
           _E.MSG_SIZE_TOO_LARGE, _E.UNKNOWN_LEADER_EPOCH}
_REPORT_GRACE_S = 5.0  # past message.timeout.ms, a missing delivery report is an `info`


def send_outcome(code: int, single_attempt: bool) -> str:
    """`fail` when the record cannot have been written, else `info`."""
    if code in NEVER_SENT or (single_attempt and code in REFUSED):
        return "fail"
    return "info"


def _error_name(err: ck.KafkaError) -> str:
    return err.name() or str(err.code())


class RdKafkaWorkload:
    """WorkloadParams' workload on librdkafka: `run`, `final_read`, `stats`, `final_errors`,
    as workloads.kafka.KafkaWorkload has them."""

    reports_hwm = True  # a poll's end is the high watermark (not so when read-committed)

    def poll_fields(self, isolation: str | None) -> dict[str, Any]:
        """Fields a poll carries besides its own: none here (a transactional workload's
        polls are transactions of one part, with their consumer's isolation level)."""
        return {}

    def final_fields(self, partition: int) -> dict[str, Any]:
        """Fields a final read carries besides its own: none here."""
        return {}

    @property
    def keys(self) -> int:
        """The history's partitions, 0 .. keys-1: here the test topic's (a workload that
        writes a second topic numbers its partitions after these)."""
        return self.p.partitions

    def topic_partition(self, key: int, offset: int = ck.OFFSET_INVALID) -> ck.TopicPartition:
        """The topic and partition behind the history's partition `key`."""
        return ck.TopicPartition(self.p.topic, key, offset)

    def __init__(self, params: WorkloadParams, bootstrap: list[str], history: HistoryWriter, *,
                 idempotence: bool = True) -> None:
        self.p = params
        self.bootstrap = ",".join(bootstrap)
        self.history = history
        # librdkafka's idempotent producer needs acks=all; with acks 0 or 1 it is off
        self.idempotence = idempotence and params.acks == "all"
        self.pool = ProcessPool()
        self.values = itertools.count(1)
        self.stats = {"send-ok": 0, "send-fail": 0, "send-info": 0, "poll-ok": 0}
        self.final_errors: dict[int, str] = {}
        self._threads = ThreadPoolExecutor(max_workers=max(2, params.consumers + params.partitions),
                                           thread_name_prefix="rdkafka")
        self._rng = random.Random(params.seed)
        self._delivery: _Delivery | None = None  # made by connect()

    # ---- configuration ---------------------------------------------------------------------

    @property
    def _timeout_ms(self) -> int:
        return max(100, int(self.p.request_timeout_s * 1000))

    def producer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "acks": self.p.acks,
            "enable.idempotence": self.idempotence, "linger.ms": LINGER_MS,
            "message.timeout.ms": self._timeout_ms, "request.timeout.ms": self._timeout_ms,
            "retry.backoff.ms": 50, "reconnect.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000, "log_level": 0,
            # a connection to every broker as soon as metadata names it, so a new leader is
            # reachable at once (and connect() leaves the leader's connection ready)
            "enable.sparse.connections": False,
        }
        if not self.idempotence:
            conf["retries"] = 0  # one attempt: a broker's refusal is then definite
        return conf

    def consumer_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "group.id": "harness-workload",
                "enable.auto.commit": False, "enable.partition.eof": True,
                "fetch.wait.max.ms": 100, "socket.timeout.ms": self._timeout_ms,
                "session.timeout.ms": 6000, "reconnect.backoff.max.ms": 1000,
                "topic.metadata.refresh.interval.ms": 1000, "log_level": 0}

    def _blocking(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    # ---- the workload ----------------------------------------------------------------------

    async def connect(self) -> None:
        """The producer made, its metadata fetched and its producer id assigned before the
        workload's clock starts: librdkafka takes about a second to get there, which a
        schedule whose first fault comes 1 s in (a minimal reproduction) would otherwise
        spend not sending at all."""
        self._delivery = _Delivery(self.producer_config())
        try:
            await self._blocking(self._delivery.producer.list_topics, self.p.topic, 10.0)
        except ck.KafkaException:
            pass  # the sends will say what is wrong, in the history
        await self._blocking(self._delivery.ready.wait, 10.0)

    async def run(self, duration_s: float) -> None:
        loop = asyncio.get_running_loop()
        if self._delivery is None:
            await self.connect()
        stop = loop.time() + duration_s
        try:
            tasks = [self._producer(i, stop) for i in range(self.p.producers)]
            tasks += [self._consumer(i, stop) for i in range(self.p.consumers)]
            await asyncio.gather(*tasks)
        finally:
            await loop.run_in_executor(None, self._delivery.close)

    def _renew(self, failed: _Delivery) -> None:
        """A fatal error (an idempotent producer's broken sequence, say) ends a librdkafka
        producer for good: its clients go on with a new one, as a restarted application
        would; what the old one still had in flight stays unknown (`info`)."""
        if self._delivery is failed:
            self._delivery = _Delivery(self.producer_config())
            self.stats["producers-renewed"] = self.stats.get("producers-renewed", 0) + 1
            threading.Thread(target=failed.close, daemon=True).start()

    async def _producer(self, index: int, stop: float) -> None:
        loop = asyncio.get_running_loop()
        process = self.pool.new()
        pace = Pacer(self.p, index, loop.time())
        while loop.time() < stop:
            delay = pace.delay(loop.time())
            if delay > 0:
                await asyncio.sleep(delay)
            pace.advance(loop.time())
            value = next(self.values)
            partition = value % self.p.partitions
            op = self.history.invoke(process, "send", partition=partition, value=value)
            outcome, fields = await self._send(self._delivery, partition, value)
            if outcome == "ok":
                op.ok(**fields)
            elif outcome == "fail":
                op.fail(fields["error"])
            else:
                op.info(fields["error"])
                process = self.pool.retire(process)
            self.stats[f"send-{outcome}"] += 1

    async def _send(self, delivery: _Delivery, partition: int,
                    value: int) -> tuple[str, dict[str, Any]]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[tuple[ck.KafkaError | None, int | None]] = loop.create_future()

        def delivered(err: ck.KafkaError | None, msg: ck.Message) -> None:  # poller thread
            loop.call_soon_threadsafe(_settle, answer, (err, known_offset(msg.offset())))

        try:
            delivery.producer.produce(self.p.topic, str(value).encode(), partition=partition,
                                      on_delivery=delivered)
        except BufferError:
            return "fail", {"error": "QUEUE_FULL"}
        except ck.KafkaException as e:
            err = e.args[0]
            if err.fatal():  # refused locally before sending: nothing was written
                self._renew(delivery)
                return "fail", {"error": _error_name(err)}
            return send_outcome(err.code(), not self.idempotence), {"error": _error_name(err)}
        try:
            err, offset = await asyncio.wait_for(
                answer, self._timeout_ms / 1000 + _REPORT_GRACE_S)
        except TimeoutError:
            return "info", {"error": "NO_DELIVERY_REPORT"}
        if err is not None:
            if err.fatal():
                self._renew(delivery)
            return send_outcome(err.code(), not self.idempotence), {"error": _error_name(err)}
        return "ok", ({"offset": offset} if offset is not None else {})

    async def _consumer(self, index: int, stop: float, isolation: str | None = None) -> None:
        """Polls partition by partition; `isolation` overrides the consumers' isolation.level."""
        loop = asyncio.get_running_loop()
        conf = self.consumer_config()
        if isolation is not None:
            conf["isolation.level"] = isolation
        consumer = ck.Consumer(conf)
        process = self.pool.new()
        offsets = [0] * self.keys
        partition = index % self.keys
        try:
            while loop.time() < stop:
                partition = (partition + 1) % self.keys
                if self._rng.random() < 0.05:
                    # Re-seek: read an earlier stretch again, as a restarted consumer would.
                    offsets[partition] = self._rng.randrange(offsets[partition] + 1)
                offset = offsets[partition]
                op = self.history.invoke(process, "poll", partition=partition, offset=offset,
                                         **self.poll_fields(isolation))
                records, hwm, epoch, error = await self._blocking(
                    self._poll, consumer, partition, offset)
                if error is not None:
                    op.fail(error)
                    await asyncio.sleep(0.05)
                    continue
                fields: dict[str, Any] = {"records": records}
                if hwm is not None and self.reports_hwm:
                    fields["hwm"] = hwm
                if epoch is not None:
                    fields["epoch"] = epoch
                op.ok(**fields)
                self.stats["poll-ok"] += 1
                if records:
                    offsets[partition] = records[-1][0] + 1
                else:
                    await asyncio.sleep(0.02)
        finally:
            await self._blocking(consumer.close)

    def _poll(self, consumer: ck.Consumer, partition: int,
              offset: int) -> tuple[list[list[int]], int | None, int | None, str | None]:
        """One poll from `offset`: (records, hwm, leader epoch, error). Assigned afresh, so
        nothing fetched before the poll began is returned, and the high watermark is the one
        the end-of-partition event of this very fetch reported (none without one). It waits
        for the first message or event, then takes only what has already arrived."""
        tp = self.topic_partition(partition, offset)
        consumer.assign([tp])
        first = consumer.poll(min(1.0, self._timeout_ms / 1000))
        if first is None:
            return [], None, None, "NO_RECORDS"
        records: list[list[int]] = []
        epoch = None
        for msg in [first, *consumer.consume(499, timeout=0)]:
            err = msg.error()
            if err is not None:
                if err.code() == _E._PARTITION_EOF:
                    return records, msg.offset(), epoch, None
                if records:
                    break
                return [], None, None, _error_name(err)
            if msg.partition() == tp.partition and msg.topic() == tp.topic:
                records.append([msg.offset(), int(msg.value())])
                epoch = msg.leader_epoch()
        return records, None, epoch, None

    # ---- the final read --------------------------------------------------------------------

    async def final_read(self, timeout_s: float) -> dict[int, bool]:
        """Every partition from offset 0 until two reads agree and reach the high watermark
        the leader reports; one `final-poll` op per read. Which partitions completed."""
        results = await asyncio.gather(*(self._final_partition(p, timeout_s)
                                         for p in range(self.keys)))
        self._threads.shutdown(wait=False)
        return dict(zip(range(self.keys), results, strict=True))

    async def _final_partition(self, partition: int, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        consumer = ck.Consumer(self.consumer_config())
        previous: list[list[int]] | None = None
        last_error = "TIMEOUT"
        try:
            while loop.time() < deadline:
                op = self.history.invoke(self.pool.new(), "final-poll", partition=partition,
                                         offset=0)
                records, hwm, error = await self._blocking(
                    self._read_all, consumer, partition, deadline - loop.time())
                if error is not None:
                    op.fail(error)
                    last_error = error
                    await asyncio.sleep(0.5)
                    continue
                stable = previous == records
                op.ok(records=records, hwm=hwm, complete=stable, **self.final_fields(partition))
                if stable:
                    return True
                previous = records
                await asyncio.sleep(0.3)
        finally:
            await self._blocking(consumer.close)
        self.final_errors[partition] = last_error
        return False

    def _read_all(self, consumer: ck.Consumer, partition: int,
                  budget_s: float) -> tuple[list[list[int]], int, str | None]:
        """Records [0, hwm) of a partition, hwm asked of its leader first."""
        tp = self.topic_partition(partition)
        try:
            low, hwm = consumer.get_watermark_offsets(tp, timeout=min(5.0, max(budget_s, 0.5)),
                                                      cached=False)
        except ck.KafkaException as e:
            return [], 0, _error_name(e.args[0])
        consumer.assign([self.topic_partition(partition, 0)])
        # a log that no longer starts at 0 cannot be read whole: a retention we do not set
        whole = None if low == 0 else f"LOG_START_{low}"
        records: list[list[int]] = []
        while hwm > 0 and (not records or records[-1][0] + 1 < hwm):
            batch = consumer.consume(5000, timeout=1.0)
            if not batch:
                return records, hwm, "NO_PROGRESS"
            for msg in batch:
                err = msg.error()
                if err is not None and err.code() == _E._PARTITION_EOF:
                    return records, hwm, whole
                if err is not None:
                    return records, hwm, _error_name(err)
                if msg.offset() < hwm:
                    records.append([msg.offset(), int(msg.value())])
        return records, hwm, whole


def known_offset(offset: int | None) -> int | None:
    """A delivery report's offset, or None when it has none: confluent-kafka gives None (not a
    negative number) for a message delivered without an offset. Seen on Kafka 4.2.1 on a VM,
    after a leader change, for a send acknowledged with acks=all and idempotence."""
    return offset if offset is not None and offset >= 0 else None


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


class _Delivery:
    """A producer and the thread that serves its delivery reports (and its statistics)."""

    def __init__(self, config: dict[str, Any]) -> None:
        # Ready once an idempotent producer holds its producer id (librdkafka's statistics say
        # so as "eos"/"idemp_state"): until then its first send waits for it, about a second.
        self.ready = threading.Event()
        if not config.get("enable.idempotence"):
            self.ready.set()
        self.producer = ck.Producer({**config, "statistics.interval.ms": 100,
                                     "stats_cb": self._statistics})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="rdkafka-delivery",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.05)

    def _statistics(self, text: str) -> None:  # poller thread
        if not self.ready.is_set() and '"idemp_state":"Assigned"' in text.replace(" ", ""):
            self.ready.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(1.0)
