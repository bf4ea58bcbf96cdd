"""Hold every packet of an NFQUEUE for a while, then let it through: link latency in user space.

The kernels we run on (Firecracker guests among them) are often built without sch_netem, but
netfilter's NFQUEUE is nearly always there. An iptables rule sends a host's incoming TCP
segments to queue N; this daemon, bound to N over a raw netfilter netlink socket, releases
each after `--delay-ms` (plus normal `--jitter-ms`), in arrival order, so TCP sees added
latency but no reordering. The queue is configured fail-open: when it is full, or this process
is gone (the rule uses --queue-bypass), packets pass undelayed instead of being dropped.

    python -m nemesis.linkdelay --queue 7 --delay-ms 200 --jitter-ms 50 --seed 1

Protocol: linux/netfilter/nfnetlink_queue.h. Only packet ids are read (copy mode META), and
verdicts are batched: one NFQNL_MSG_VERDICT_BATCH accepts every id up to the given one.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NF_ACCEPT = 1
QUEUE_MAXLEN = 65536
_NLMSGHDR = struct.Struct("=IHHII")
_NFGENMSG = struct.Struct("!BBH")


def _attr(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def message(msg: int, queue: int, attrs: bytes, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    """One nfnetlink queue message (nlmsghdr + nfgenmsg + attributes)."""
    body = _NFGENMSG.pack(socket.AF_UNSPEC, 0, queue) + attrs
    kind = (NFNL_SUBSYS_QUEUE << 8) | msg
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, flags, seq, 0) + body


def config_messages(queue: int) -> list[bytes]:
    """Bind the queue, copy metadata only, a long queue, fail open when it is full."""
    flags = struct.pack("!I", NFQA_CFG_F_FAIL_OPEN)
    return [
        message(NFQNL_MSG_CONFIG, queue,
                _attr(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, 0)), 1,
                NLM_F_REQUEST | NLM_F_ACK),
        message(NFQNL_MSG_CONFIG, queue,
                _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
                + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))
                + _attr(NFQA_CFG_FLAGS, flags) + _attr(NFQA_CFG_MASK, flags), 2,
                NLM_F_REQUEST | NLM_F_ACK),
    ]  # fmt: skip


def verdict_batch(queue: int, up_to_id: int, seq: int) -> bytes:
    return message(NFQNL_MSG_VERDICT_BATCH, queue,
                   _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, up_to_id)), seq)  # fmt: skip


def parse(data: bytes) -> tuple[list[int], list[int]]:
    """(packet ids, netlink error codes) in a datagram of netlink messages."""
    ids, errors = [], []
    pos = 0
    while pos + _NLMSGHDR.size <= len(data):
        length, kind, _, _, _ = _NLMSGHDR.unpack_from(data, pos)
        if length < _NLMSGHDR.size:
            break
        end = pos + length
        if kind == NLMSG_ERROR:
            errors.append(-struct.unpack_from("=i", data, pos + _NLMSGHDR.size)[0])
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            a = pos + _NLMSGHDR.size + _NFGENMSG.size
            while a + 4 <= end:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, a + 4)[0])
                a += (alen + 3) & ~3
        pos += (length + 3) & ~3
    return ids, errors


class Delayer:
    """Release times for arriving packets: delay + normal jitter, never before an earlier one."""

    def __init__(self, delay_s: float, jitter_s: float, rng: random.Random) -> None:
        self.delay_s, self.jitter_s, self.rng = delay_s, jitter_s, rng
        self.last = 0.0

    def release_at(self, now: float) -> float:
        d = self.rng.gauss(self.delay_s, self.jitter_s) if self.jitter_s > 0 else self.delay_s
        self.last = max(self.last, now + max(0.0, d))
        return self.last


def serve(queue: int, delayer: Delayer) -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 0))
    for msg in config_messages(queue):
        sock.send(msg)
        _, errors = parse(sock.recv(65536))
        if any(errors):
            raise OSError(errors[0], f"binding NFQUEUE {queue}: {os.strerror(errors[0])}")
    print(f"holding queue {queue} for {delayer.delay_s * 1000:g} ms", flush=True)
    held: collections.deque[tuple[float, int]] = collections.deque()
    seq = 3
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        if select.select([sock], [], [], timeout)[0]:
            try:
                ids, _ = parse(sock.recv(1 << 20))
            except OSError:  # ENOBUFS: the kernel let those packets pass (fail-open)
                ids = []
            now = time.monotonic()
            held.extend((delayer.release_at(now), i) for i in ids)
        now, due = time.monotonic(), None
        while held and held[0][0] <= now:
            due = held.popleft()[1]
        if due is not None:
            seq += 1
            sock.send(verdict_batch(queue, due, seq))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, required=True)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(args.queue, Delayer(args.delay_ms / 1000, args.jitter_ms / 1000, random.Random(args.seed)))


if __name__ == "__main__":
    main()
