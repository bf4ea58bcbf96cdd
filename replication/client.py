"""An asyncio client: metadata, topic creation, a batching and pipelining producer, fetch.

Produce outcomes are three-valued, as a history needs them: an acknowledgement with its offset,
a definite failure (`ProduceError.definite`: the records were certainly not written), or an
unknown outcome (timeouts, lost connections, errors after the leader appended).

It speaks the typed messages of `replication.messages` and answers with them too: the cluster
metadata (`ClusterMetadata`, `PartitionState`), one `ProduceReply` per acknowledged value, the
`ConsumerFetchReply` of a fetch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from replication import errors as E
from replication.messages import (
    ClusterMetadata,
    ConsumerFetchReply,
    ConsumerFetchRequest,
    CreateTopicRequest,
    ErrorReply,
    MalformedMessage,
    Message,
    MetadataReply,
    MetadataRequest,
    ProduceReply,
    ProduceRequest,
    Request,
)
from replication.metadata import PartitionState
from replication.net import ConnectFailed, ConnectionLost, Pool, settler


class ClientError(Exception):
    def __init__(self, error: str, message: str = "") -> None:
        super().__init__(f"{error}: {message}" if message else error)
        self.error = error


class ProduceError(ClientError):
    def __init__(self, error: str, definite: bool, message: str = "") -> None:
        super().__init__(error, message)
        self.definite = definite


# What a send's callback gets: the acknowledgement, or the ProduceError that says it failed.
Sent = Callable[["ProduceReply | ProduceError"], None]


@dataclass
class _Batch:
    values: list[str] = field(default_factory=list)
    callbacks: list[Sent] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class Client:
    def __init__(self, bootstrap: str | list[str], *, request_timeout_s: float = 5.0,
                 linger_ms: float = 2.0, max_batch: int = 500, retry_backoff_s: float = 0.1,
                 pool: Pool | None = None) -> None:
        self.bootstrap = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        self.request_timeout_s = request_timeout_s
        self.linger_s = linger_ms / 1000
        self.max_batch = max_batch
        self.retry_backoff_s = retry_backoff_s
        # Connections to the nodes; a simulator passes a pool over its simulated network.
        self.pool = Pool() if pool is None else pool
        self._metadata: ClusterMetadata | None = None
        # A connection to a broker was lost since the metadata was fetched: fetch it again before
        # the next request, as Kafka's clients refresh theirs on any disconnection (the broker
        # may be dead, paused or no longer the leader, and only a refusal says so otherwise).
        self._stale = False
        self._controller: str | None = None
        self._batches: dict[tuple[str, int, str], _Batch] = {}
        self._closed = False

    async def close(self) -> None:
        """Close the connections; after this the client sends nothing. A batch still waiting
        for its linger fails definitely (it was never sent), and an attempt that fails from
        here on is not retried: otherwise a timer or a retry would open a new connection, in
        a task nobody awaits, after its owner had gone (a run cancelled by Ctrl-C or SIGTERM
        then ended with that task destroyed pending, a traceback on a clean teardown)."""
        self._closed = True
        batches, self._batches = self._batches, {}
        for batch in batches.values():
            if batch.timer is not None:
                batch.timer.cancel()
            _fail(batch, ProduceError(E.NETWORK_ERROR, True, "the client closed before sending it"))
        await self.pool.close()

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise ClientError(E.NETWORK_ERROR, "the client is closed")

    # ---- metadata ------------------------------------------------------------------------------

    async def metadata(self, refresh: bool = False) -> ClusterMetadata:
        if self._metadata is not None and not refresh and not self._stale:
            return self._metadata
        last: Exception | None = None
        candidates = list(self.bootstrap)
        if self._metadata:
            candidates += [b.address for b in self._metadata.brokers.values()]
        for address in dict.fromkeys(candidates):
            try:
                request = MetadataRequest()
                reply = await self.pool.get(address).request(request, self.request_timeout_s)
            except (ConnectionLost, MalformedMessage) as e:
                last = e
                continue
            if isinstance(reply, MetadataReply):
                # A broker names the controller it was given; the controller answers itself.
                self._controller = reply.controller if reply.broker is not None else address
                if self._metadata is None or reply.metadata.version >= self._metadata.version:
                    self._metadata = reply.metadata
                self._stale = False
                return self._metadata
        raise ClientError(E.NETWORK_ERROR, f"no bootstrap server answered: {last}")

    async def partition_state(self, topic: str, partition: int, refresh: bool = False) -> PartitionState:
        state = self._known_state(topic, partition, refresh)
        if state is None:
            state = _find_partition(await self.metadata(refresh), topic, partition)
        return state

    def _known_state(self, topic: str, partition: int, refresh: bool) -> PartitionState | None:
        """`partition_state` from the metadata already held, without a coroutine; None when it
        must be fetched (none held, or refresh). Each produce and fetch asks for it, and a
        coroutine call that never suspends still costs a frame (most of all under PyPy)."""
        if refresh or self._stale or self._metadata is None:
            return None
        return _find_partition(self._metadata, topic, partition)

    async def leader_address(self, topic: str, partition: int, refresh: bool = False) -> tuple[int, str]:
        return self._leader_of(await self.partition_state(topic, partition, refresh))

    def _heard(self, answer: object) -> object:
        """A request's answer, passed through; a lost connection marks the metadata stale."""
        if isinstance(answer, (ConnectionLost, MalformedMessage)):
            self._stale = True
        return answer

    def _leader_of(self, state: PartitionState) -> tuple[int, str]:
        leader = state.leader
        if leader is None:
            raise ClientError(E.NOT_LEADER, f"{state.topic}-{state.partition} has no leader")
        assert self._metadata is not None  # the state came from it
        return leader, self._metadata.brokers[leader].address

    async def controller_request(self, msg: Request) -> Message:
        await self.metadata(refresh=True)
        if self._controller is None:
            raise ClientError(E.INVALID_REQUEST, "the bootstrap server did not name the controller")
        try:
            return await self.pool.get(self._controller).request(msg, self.request_timeout_s)
        except (ConnectionLost, MalformedMessage) as e:
            raise ClientError(E.NETWORK_ERROR, str(e)) from e

    async def create_topic(self, topic: str, partitions: int, replication_factor: int,
                           config: dict[str, str] | None = None) -> None:
        reply = await self.controller_request(CreateTopicRequest(
            topic, partitions, replication_factor, {str(k): str(v) for k, v in (config or {}).items()}))
        if isinstance(reply, ErrorReply):
            raise ClientError(reply.error, reply.message or "")

    # ---- produce ---------------------------------------------------------------------------------

    async def produce(self, topic: str, partition: int, value: str, acks: str = "all") -> ProduceReply:
        """Acknowledged: the value's offset (None with acks=0), the leader's epoch and id;
        raises ProduceError otherwise."""
        fut = asyncio.get_running_loop().create_future()
        self.send(topic, partition, value, acks, settler(fut))
        return await fut

    def send(self, topic: str, partition: int, value: str, acks: str, sent: Sent) -> None:
        """`produce` without a coroutine: `sent(the ProduceReply or the ProduceError)` is called
        once, later, from the event loop (never if the loop shuts down first; a definite
        failure if the client closes before sending it). A simulated producer sends thousands
        a run, and a future and a task wake-up per send cost more than the callback."""
        self._refuse_if_closed()
        key = (topic, partition, str(acks))
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = _Batch()
            batch.timer = asyncio.get_running_loop().call_later(self.linger_s, self._flush, key)
        batch.values.append(str(value))
        batch.callbacks.append(sent)
        if len(batch.values) >= self.max_batch:
            self._flush(key)

    def _flush(self, key: tuple[str, int, str]) -> None:
        batch = self._batches.pop(key, None)
        if batch is None:
            return
        if batch.timer is not None:
            batch.timer.cancel()
        loop = asyncio.get_running_loop()
        topic, partition, acks = key
        msg = ProduceRequest(topic, partition, tuple(batch.values), acks)
        deadline = loop.time() + self.request_timeout_s
        try:
            state = self._known_state(topic, partition, False)
            address = None if state is None else self._leader_of(state)[1]
        except ClientError:  # no leader, no such partition: _send_batch's retries handle it
            address = None
        if acks == "0" or address is None:
            loop.create_task(self._send_batch(batch, msg, deadline))
            return
        # The usual case, a known leader, sends without a task of its own and settles the batch
        # from the answer's callback (Connection.call); only a retry takes a task (_send_batch).
        # A task per batch was the largest single cost of a simulated produce under PyPy. (A
        # real connection's call runs its request coroutine in a task, as before.)
        self.pool.get(address).call(msg, self.request_timeout_s,
                                    lambda answer: self._first_answer(batch, msg, deadline, answer))

    def _first_answer(self, batch: _Batch, msg: ProduceRequest, deadline: float,
                      answer: object) -> None:
        """The answer to a batch's first attempt, or the connection error it met."""
        try:
            outcome = _produce_outcome(self._heard(answer))
        except ProduceError as e:
            _fail(batch, e)
            return
        if isinstance(outcome, ProduceReply):
            _acknowledge(batch, outcome)
        elif self._closed:
            _fail(batch, ProduceError(outcome, True, "not retried: the client closed"))
        else:
            asyncio.get_running_loop().create_task(self._send_batch(batch, msg, deadline, outcome))

    async def _send_batch(self, batch: _Batch, msg: ProduceRequest, deadline: float,
                          failed: str | None = None) -> None:
        try:
            reply = await self._produce_with_retries(msg, deadline, failed)
        except ProduceError as e:
            _fail(batch, e)
            return
        _acknowledge(batch, reply)

    async def _produce_with_retries(self, msg: ProduceRequest, deadline: float,
                                    failed: str | None = None) -> ProduceReply:
        """The acknowledgement of `msg`, retrying definite failures until `deadline`; `failed`
        is the error of an attempt already made, which definitely failed."""
        loop = asyncio.get_running_loop()
        topic, partition, acks = msg.topic, msg.partition, msg.acks
        error = failed
        refresh = False
        while True:
            if error is not None:
                # Definitely not written: safe to retry without risking a duplicate.
                if loop.time() + self.retry_backoff_s >= deadline:
                    raise ProduceError(error, definite=True)
                await asyncio.sleep(self.retry_backoff_s)
                refresh = True
            if self._closed:  # this attempt is not made: nothing sent, nothing written
                raise ProduceError(error or E.NETWORK_ERROR, True, "not sent: the client closed")
            try:
                state = self._known_state(topic, partition, refresh)
                if state is None:
                    state = await self.partition_state(topic, partition, refresh)
                leader, address = self._leader_of(state)
            except ClientError as e:
                error = e.error
                continue
            conn = self.pool.get(address)
            if acks == "0":
                try:
                    await conn._ensure(self.request_timeout_s)
                except (TimeoutError, OSError) as e:
                    raise ProduceError(E.NETWORK_ERROR, True, str(e)) from e
                conn.send_nowait(msg)
                return ProduceReply(None, None, leader)
            try:
                result = await conn.request(msg, max(0.05, deadline - loop.time()))
            except (ConnectFailed, ConnectionLost, MalformedMessage) as e:
                result = e
            outcome = _produce_outcome(self._heard(result))
            if isinstance(outcome, ProduceReply):
                return outcome
            error = outcome

    # ---- fetch -----------------------------------------------------------------------------------

    async def fetch(self, topic: str, partition: int, offset: int, max_records: int = 1000,
                    refresh: bool = False, min_records: int = 1,
                    max_wait_ms: int = 0) -> ConsumerFetchReply:
        """Records below the HWM from `offset`, as (offset, value) pairs, with the HWM, the log
        end, the leader and its epoch. Retries errors that a metadata refresh can cure (moved
        leader, fenced epoch, lagging new leader) until the request timeout. `max_wait_ms` > 0
        makes it a long poll: the leader holds it until `min_records` are committed past
        `offset` or the wait is over (ConsumerFetchRequest)."""
        deadline = asyncio.get_running_loop().time() + self.request_timeout_s
        return await self._fetch_until(
            deadline, _Fetch(topic, partition, offset, max_records, min_records, max_wait_ms), refresh)

    def poll(self, topic: str, partition: int, offset: int, max_records: int,
             polled: Polled, *, min_records: int = 1, max_wait_ms: int = 0) -> None:
        """`fetch` without a coroutine: `polled(the ConsumerFetchReply, or the ClientError or
        other exception fetch would raise)` is called once, later, from the event loop (never
        if the loop shuts down first). The usual case, a known leader that answers with
        records, sends without a task and settles from the answer's callback; a retry (an
        error a refresh may cure, no metadata yet) goes on as `fetch` does, in a task. A
        simulated consumer polls thousands of times a run, as producers send."""
        self._refuse_if_closed()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_s
        want = _Fetch(topic, partition, offset, max_records, min_records, max_wait_ms)
        try:
            state = self._known_state(topic, partition, False)
            address = None if state is None else self._leader_of(state)[1]
        except ClientError:  # no leader: _fetch_until's retries say so
            state = address = None
        if state is None or address is None:
            self._poll_in_task(polled, deadline, want, None)
            return

        def answered(answer: object) -> None:
            try:
                reply = _fetch_outcome(self._heard(answer))
            except Exception as e:  # handed to the caller, as fetch would raise it
                polled(e)
                return
            if isinstance(reply, ConsumerFetchReply):
                polled(reply)
            elif self._closed:
                polled(_fetch_error(reply))
            else:
                self._poll_in_task(polled, deadline, want, reply)

        self.pool.get(address).call(want.request(state.leader_epoch),
                                    max(0.05, deadline - loop.time()), answered)

    def _poll_in_task(self, polled: Polled, deadline: float, want: _Fetch,
                      failed: ErrorReply | None) -> None:
        def finished(task: asyncio.Task) -> None:
            if not task.cancelled():
                error = task.exception()
                polled(task.result() if error is None else error)
        task = asyncio.get_running_loop().create_task(self._fetch_until(deadline, want, False, failed))
        task.add_done_callback(finished)

    async def _fetch_until(self, deadline: float, want: _Fetch, refresh: bool,
                           failed: ErrorReply | None = None) -> ConsumerFetchReply:
        """`want` fetched, retrying what a refresh may cure until `deadline`; `failed` is the
        retriable error of an attempt already made."""
        loop = asyncio.get_running_loop()
        reply = failed
        while True:
            if reply is not None:
                if loop.time() + self.retry_backoff_s >= deadline:
                    raise _fetch_error(reply)
                await asyncio.sleep(self.retry_backoff_s)
                refresh = True
            self._refuse_if_closed()
            state = self._known_state(want.topic, want.partition, refresh)
            if state is None:
                state = await self.partition_state(want.topic, want.partition, refresh)
            _, address = self._leader_of(state)
            try:
                answer = await self.pool.get(address).request(
                    want.request(state.leader_epoch), max(0.05, deadline - loop.time()))
            except (ConnectionLost, MalformedMessage) as e:  # ConnectFailed too
                answer = e
            outcome = _fetch_outcome(self._heard(answer))
            if isinstance(outcome, ConsumerFetchReply):
                return outcome
            reply = outcome


# What a poll's callback gets: the reply, or the ClientError (or a bug's exception) of fetch.
Polled = Callable[["ConsumerFetchReply | BaseException"], None]


@dataclass(frozen=True)
class _Fetch:
    """What a consumer's fetch asks for, whoever the leader is."""

    topic: str
    partition: int
    offset: int
    max_records: int
    min_records: int
    max_wait_ms: int

    def request(self, leader_epoch: int | None) -> ConsumerFetchRequest:
        return ConsumerFetchRequest(self.topic, self.partition, self.offset, self.max_records,
                                    leader_epoch, self.min_records, self.max_wait_ms)


def _fetch_outcome(answer: object) -> ConsumerFetchReply | ErrorReply:
    """What one fetch attempt's answer, or the connection error it met, says: the reply, or an
    ErrorReply a metadata refresh may cure (a refused connection counts as a moved leader).
    Raises the ClientError fetch raises for anything else."""
    if isinstance(answer, ConnectFailed):
        return ErrorReply(E.NOT_LEADER)
    if isinstance(answer, (ConnectionLost, MalformedMessage)):
        raise ClientError(E.NETWORK_ERROR, str(answer)) from answer
    if isinstance(answer, BaseException):
        raise answer  # not the connection's: a bug, to be seen as one
    if isinstance(answer, ConsumerFetchReply):
        return answer
    assert isinstance(answer, ErrorReply), answer
    if answer.error not in E.RETRIABLE_FETCH:
        raise _fetch_error(answer)
    return answer


def _fetch_error(reply: ErrorReply) -> ClientError:
    return ClientError(reply.error, "" if reply.hwm is None else str(reply.hwm))


def _produce_outcome(result: object) -> ProduceReply | str:
    """What one produce attempt's answer, or the connection error it raised, says: the
    acknowledgement, or the error of a definite failure, which may be retried.
    ProduceError(definite=False) when the records may or may not have been written."""
    if isinstance(result, ConnectFailed):
        return E.NOT_LEADER  # never sent: the leader moved or died
    if isinstance(result, (ConnectionLost, MalformedMessage)):
        raise ProduceError(E.NETWORK_ERROR, definite=False, message=str(result)) from result
    if isinstance(result, BaseException):
        raise result  # not the connection's: a bug, to be seen as one
    if isinstance(result, ProduceReply):
        return result
    assert isinstance(result, ErrorReply), result
    if not result.definite:
        raise ProduceError(result.error, definite=False)
    return result.error


def _acknowledge(batch: _Batch, reply: ProduceReply) -> None:
    """Each value of the batch gets its own acknowledgement: its offset is the first's plus
    its place in the batch."""
    first = reply.offset
    for i, sent in enumerate(batch.callbacks):
        sent(ProduceReply(None if first is None else first + i, reply.leader_epoch, reply.node))


def _fail(batch: _Batch, e: ProduceError) -> None:
    for sent in batch.callbacks:
        sent(ProduceError(e.error, e.definite, str(e)))


def _find_partition(metadata: ClusterMetadata, topic: str, partition: int) -> PartitionState:
    for p in metadata.partitions:
        if p.topic == topic and p.partition == partition:
            return p
    raise ClientError(E.UNKNOWN_TOPIC, f"{topic}-{partition}")
