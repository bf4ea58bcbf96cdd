"""A broker as a sans-IO state machine: its controller session and its partition replicas.

The runtime feeds it requests (`handle`), answers to its own requests (`on_response`,
`on_send_failed`) and clock ticks (`tick`), and carries out the outputs. Logs come from an
injected factory so the same code runs over segment files or in memory."""

from __future__ import annotations

from collections.abc import Callable

from replication import errors as E
from replication.config import NodeConfig
from replication.log import Log
from replication.metadata import PartitionState
from replication.outputs import Event, Output, Reply, Send
from replication.partition import Replica


class Broker:
    def __init__(self, broker_id: int, address: str, config: NodeConfig,
                 open_log: Callable[[str, int], Log], clean_epoch: int | None,
                 hwm_checkpoint: dict[str, int] | None = None) -> None:
        self.broker_id = broker_id
        self.address = address
        self.config = config
        self.open_log = open_log
        # unclean.shutdown.detection=false: claim a clean shutdown whatever happened.
        self.clean_epoch = clean_epoch if config.unclean_shutdown_detection else (clean_epoch or 0)
        self.hwm_checkpoint = hwm_checkpoint or {}
        self.broker_epoch: int | None = None
        self.registering = False
        self.heartbeat_in_flight = False
        self.next_heartbeat = 0
        self.fenced = True
        self.metadata: dict = {"version": -1, "brokers": {}, "topics": {}, "partitions": []}
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.pending_log_info: list[dict] = []
        self.want_shutdown = False
        self.shutdown_ok = False
        self.controller_address: str | None = None  # told to clients that want the controller

    # ---- controller session ------------------------------------------------------------------

    def start(self, now: int) -> list[Output]:
        self.registering = True
        return [Send("controller", {"type": "register", "broker": self.broker_id,
                                    "address": self.address, "clean_epoch": self.clean_epoch})]

    def begin_shutdown(self) -> None:
        self.want_shutdown = True
        self.next_heartbeat = 0

    def _heartbeat(self, now: int) -> list[Output]:
        if self.broker_epoch is None or self.heartbeat_in_flight or now < self.next_heartbeat:
            return []
        self.heartbeat_in_flight = True
        self.next_heartbeat = now + self.config.broker_heartbeat_interval_ms
        msg = {"type": "heartbeat", "broker": self.broker_id, "broker_epoch": self.broker_epoch,
               "want_shutdown": self.want_shutdown, "metadata_version": self.metadata["version"]}
        if self.pending_log_info:
            msg["log_info"], self.pending_log_info = self.pending_log_info, []
        return [Send("controller", msg)]

    def on_response(self, dest: str | int, request: dict, response: dict, now: int) -> list[Output]:
        kind = request["type"]
        if kind == "register":
            self.registering = False
            if "error" in response:
                return []
            self.broker_epoch = response["broker_epoch"]
            self.next_heartbeat = 0
            return self._heartbeat(now)
        if kind == "heartbeat":
            return self._on_heartbeat(response, now)
        if kind == "alter-partition":
            replica = self.replicas.get((request["topic"], request["partition"]))
            return replica.on_alter_response(response, now) if replica else []
        if kind == "fetch":
            replica = self.replicas.get((request["topic"], request["partition"]))
            if replica is None:
                return []
            return replica.on_fetch_response(request, response, now) + replica.next_fetch(now)
        return []

    def on_send_failed(self, dest: str | int, request: dict, now: int) -> list[Output]:
        kind = request["type"]
        if kind == "register":
            self.registering = False
        elif kind == "heartbeat":
            self.heartbeat_in_flight = False
            self.pending_log_info = request.get("log_info", []) + self.pending_log_info
        elif kind == "alter-partition":
            replica = self.replicas.get((request["topic"], request["partition"]))
            if replica:
                replica.on_alter_failed()
        elif kind == "fetch":
            replica = self.replicas.get((request["topic"], request["partition"]))
            if replica:
                replica.on_fetch_failed(now)
        return []

    def _on_heartbeat(self, response: dict, now: int) -> list[Output]:
        self.heartbeat_in_flight = False
        if response.get("error") in (E.STALE_BROKER_EPOCH, E.UNKNOWN_BROKER):
            # The controller lost or replaced our registration: register again. This process
            # kept its data, so it is a clean registration.
            self.broker_epoch = None
            self.clean_epoch = self.clean_epoch if self.clean_epoch is not None else 0
            return self.start(now)
        if "error" in response:
            return []
        self.fenced = response.get("fenced", True)
        out: list[Output] = []
        if "metadata" in response:
            out += self.apply_metadata(response["metadata"], now)
        for ask in response.get("log_info_requests", []):
            replica = self.replicas.get((ask["topic"], ask["partition"]))
            if replica is not None:
                self.pending_log_info.append(replica.log_info())
        if self.pending_log_info:
            self.next_heartbeat = 0
        if self.want_shutdown and response.get("shutdown_ok"):
            self.shutdown_ok = True
        return out

    # ---- metadata --------------------------------------------------------------------------------

    def topic_config(self, topic: str) -> NodeConfig:
        return self.config.with_overrides(self.metadata.get("topics", {}).get(topic, {}))

    def apply_metadata(self, metadata: dict, now: int) -> list[Output]:
        self.metadata = metadata
        out: list[Output] = []
        for d in metadata["partitions"]:
            state = PartitionState.from_dict(d)
            if self.broker_id not in state.replicas:
                continue
            replica = self.replicas.get(state.key)
            if replica is None:
                log = self.open_log(state.topic, state.partition)
                hwm = self.hwm_checkpoint.get(f"{state.topic}-{state.partition}", 0)
                replica = self.replicas[state.key] = Replica(self.broker_id, state.topic,
                                                             state.partition, log, hwm)
            replica.broker_epoch = self.broker_epoch
            out += replica.on_metadata(state, self.topic_config(state.topic), now)
            out += replica.next_fetch(now)
        return out

    def broker_address(self, broker_id: int) -> str | None:
        info = self.metadata["brokers"].get(str(broker_id))
        return info["address"] if info else None

    # ---- requests ----------------------------------------------------------------------------------

    def handle(self, token: object, msg: dict, now: int) -> list[Output]:
        kind = msg.get("type")
        if kind == "metadata":
            return [Reply(token, {"metadata": self.metadata, "broker": self.broker_id,
                                  "controller": self.controller_address})]
        if kind not in ("produce", "fetch"):
            return [Reply(token, {"error": E.INVALID_REQUEST, "message": f"unknown request {kind!r}"})]
        replica = self.replicas.get((msg.get("topic"), msg.get("partition")))
        if replica is None:
            return [Reply(token, {"error": E.UNKNOWN_TOPIC})]
        if kind == "produce":
            values = [v.encode() if isinstance(v, str) else bytes(v) for v in msg["values"]]
            return replica.produce(token, values, str(msg.get("acks", "all")), now)
        return replica.fetch(token, msg, now)

    def tick(self, now: int) -> list[Output]:
        out: list[Output] = []
        if self.broker_id is not None and self.broker_epoch is None and not self.registering:
            out += self.start(now)
        out += self._heartbeat(now)
        for replica in self.replicas.values():
            out += replica.tick(now)
            out += replica.next_fetch(now)
        return out

    def hwm_snapshot(self) -> dict[str, int]:
        return {f"{r.topic}-{r.partition}": r.hwm for r in self.replicas.values()}

    def close_logs(self, clean: bool) -> None:
        for replica in self.replicas.values():
            replica.log.close(clean)


def started_event(clean_epoch: int | None) -> Event:
    return Event("broker-start", {"clean_shutdown": clean_epoch is not None, "broker_epoch": clean_epoch})
