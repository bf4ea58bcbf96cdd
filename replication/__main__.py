"""`python -m replication ...`: the command line of the system under test (README.md,
"Running tests yourself", shows a session; docs/replication.md describes the system)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from replication.config import ConfigError, NodeConfig, parse_config_args


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m replication", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("controller", help="run the controller")
    c.add_argument("--listen", required=True, metavar="HOST:PORT")
    c.add_argument("--data", required=True, type=Path, metavar="DIR")
    c.add_argument("--config", action="append", default=[], metavar="K=V")

    b = sub.add_parser("broker", help="run a broker")
    b.add_argument("--id", required=True, type=int)
    b.add_argument("--listen", required=True, metavar="HOST:PORT")
    b.add_argument("--controller", required=True, metavar="HOST:PORT")
    b.add_argument("--data", required=True, type=Path, metavar="DIR")
    # Behind a proxy (the harness's Toxiproxy) a broker listens on one address and is reached
    # at another: --advertise is what it registers; --route sends its own outgoing connections
    # to ADDRESS through VIA (a local proxy), so the proxy sees both ways of every link.
    b.add_argument("--advertise", metavar="HOST:PORT",
                   help="the address peers and clients reach this broker at (default: --listen)")
    b.add_argument("--route", action="append", default=[], metavar="ADDRESS=VIA",
                   help="connect to ADDRESS (a peer's HOST:PORT) through VIA instead")
    b.add_argument("--config", action="append", default=[], metavar="K=V")

    t = sub.add_parser("topics", help="create or describe topics")
    t.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    mode = t.add_mutually_exclusive_group(required=True)
    mode.add_argument("--create", action="store_true")
    mode.add_argument("--describe", action="store_true")
    t.add_argument("--topic")
    t.add_argument("--partitions", type=int, default=1)
    t.add_argument("--replication-factor", type=int, default=1)
    t.add_argument("--config", action="append", default=[], metavar="K=V")

    pr = sub.add_parser("produce", help="send integers, print `offset value` per acknowledgement")
    pr.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--partition", type=int, default=0)
    pr.add_argument("--acks", choices=["0", "1", "all"], default="all")
    pr.add_argument("--count", type=int, required=True)
    pr.add_argument("--start", type=int, default=0)

    co = sub.add_parser("consume", help="print `offset value` up to the high watermark")
    co.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    co.add_argument("--topic", required=True)
    co.add_argument("--partition", type=int, default=0)
    co.add_argument("--from", dest="offset", type=int, default=0)
    return p


def _node_config(pairs: list[str]) -> NodeConfig:
    return NodeConfig().with_overrides(parse_config_args(pairs))


def _routes(items: list[str]) -> dict[str, str]:
    """`--route A=B` items -> {A: B}; each side must be HOST:PORT."""
    routes = {}
    for item in items:
        address, sep, via = item.partition("=")
        if not sep or ":" not in address or ":" not in via:
            raise ConfigError(f"--route {item!r}: expected ADDRESS=VIA, both HOST:PORT")
        routes[address] = via
    return routes


def _list(xs) -> str:
    return ",".join(str(x) for x in xs)


async def _topics(args) -> int:
    from replication.client import Client
    client = Client(args.bootstrap)
    try:
        if args.create:
            if not args.topic:
                raise ConfigError("--create needs --topic")
            await client.create_topic(args.topic, args.partitions, args.replication_factor,
                                      parse_config_args(args.config))
            print(f"Created topic {args.topic}.")
            return 0
        md = await client.metadata(refresh=True)
        for p in md.partitions:
            if args.topic and p.topic != args.topic:
                continue
            leader = "none" if p.leader is None else p.leader
            print(f"Topic: {p.topic}\tPartition: {p.partition}\tLeader: {leader}\t"
                  f"Replicas: {_list(p.replicas)}\tIsr: {_list(p.isr)}\t"
                  f"Elr: {_list(p.elr)}\tLastKnownElr: {_list(p.last_known_elr)}")
        return 0
    finally:
        await client.close()


async def _produce(args) -> int:
    from replication.client import Client, ProduceError
    client = Client(args.bootstrap)
    failures = 0

    async def one(value: int) -> None:
        nonlocal failures
        try:
            ack = await client.produce(args.topic, args.partition, str(value), args.acks)
        except ProduceError as e:
            failures += 1
            print(f"error {value} {e.error}", file=sys.stderr)
            return
        print(f"{'-' if ack.offset is None else ack.offset} {value}")

    try:
        await asyncio.gather(*(one(v) for v in range(args.start, args.start + args.count)))
    finally:
        await client.close()
    return 1 if failures else 0


async def _consume(args) -> int:
    from replication.client import Client
    client = Client(args.bootstrap)
    offset = args.offset
    try:
        while True:
            reply = await client.fetch(args.topic, args.partition, offset)
            for o, v in reply.records:
                print(f"{o} {v}")
            if not reply.records:
                return 0
            offset = reply.records[-1][0] + 1
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "controller":
            from replication.runtime import controller_runtime
            runtime = controller_runtime(args.listen, args.data, _node_config(args.config))
            asyncio.run(runtime.run())
            return 0
        if args.command == "broker":
            if args.id < 1:
                raise ConfigError("--id must be a positive integer")
            from replication.runtime import broker_runtime
            runtime = broker_runtime(args.id, args.listen, args.controller, args.data,
                                    _node_config(args.config), advertise=args.advertise,
                                    routes=_routes(args.route))
            asyncio.run(runtime.run())
            return 0
        handler = {"topics": _topics, "produce": _produce, "consume": _consume}[args.command]
        return asyncio.run(handler(args))
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # client commands: one clear line, not a traceback
        from replication.client import ClientError
        if isinstance(e, ClientError):
            print(f"error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
