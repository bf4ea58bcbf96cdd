"""Getting a cluster ready for a workload and back to health after faults; real hosts and the
simulator use the same code (a simulator passes its own connection pools)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from replication.client import Client, ClientError
from replication.net import Pool


async def create_topic(bootstrap: list[str], brokers: int, topic: str, partitions: int,
                       replication_factor: int, *, pool_factory: Callable[[], Pool] = Pool,
                       timeout: float = 60) -> None:
    """Once `brokers` brokers have registered unfenced, create the topic."""
    client = Client(bootstrap, request_timeout_s=5, pool=pool_factory())
    loop = asyncio.get_running_loop()
    try:
        deadline = loop.time() + timeout
        while True:
            try:
                md = await client.metadata(refresh=True)
                if len(md.brokers) >= brokers and not any(b.fenced for b in md.brokers.values()):
                    break
            except ClientError:
                pass
            if loop.time() > deadline:
                raise RuntimeError(f"brokers did not register with the controller within {timeout:g} s")
            await asyncio.sleep(0.2)
        await client.create_topic(topic, partitions, replication_factor)
    finally:
        await client.close()


def full_isr(states: list[dict], partitions: int) -> bool:
    """Whether a topic's partition states (each with leader, isr, replicas) are all there,
    each with a leader and its whole replica set in the ISR."""
    return len(states) == partitions and all(
        p["leader"] is not None and set(p["isr"]) == set(p["replicas"]) for p in states)


async def wait_healthy(bootstrap: list[str], topic: str, partitions: int, timeout: float, *,
                       pool_factory: Callable[[], Pool] = Pool) -> bool:
    """Wait until every partition has a leader and its full replica set in the ISR."""
    client = Client(bootstrap, request_timeout_s=2, pool=pool_factory())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while loop.time() < deadline:
            try:
                md = await client.metadata(refresh=True)
                if full_isr([p.to_dict() for p in md.partitions if p.topic == topic], partitions):
                    return True
            except ClientError:
                pass
            await asyncio.sleep(0.3)
        return False
    finally:
        await client.close()
