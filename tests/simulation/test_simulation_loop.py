"""The virtual-time event loop: asyncio's own primitives in simulated time, no real I/O."""

from __future__ import annotations

import asyncio
import time

import pytest

from simulation.loop import RealIOError, SimLoop, SimulationDeadlock, SimulationLivelock


def test_sleep_wait_for_and_call_later_run_in_virtual_time():
    loop = SimLoop()
    fired: list[tuple[str, float]] = []

    async def main():
        loop.call_later(7.5, lambda: fired.append(("later", loop.time())))
        await asyncio.sleep(5)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(3600), 2)
        assert loop.time() == 7.0
        await asyncio.sleep(1)
        return loop.time()

    wall = time.perf_counter()
    assert loop.run(main()) == 8.0
    assert fired == [("later", 7.5)]  # at exactly its time, not later
    assert time.perf_counter() - wall < 1.0


def test_timers_due_together_fire_in_the_order_they_were_scheduled():
    loop = SimLoop()
    order: list[int] = []

    async def main():
        for i in range(20):
            loop.call_at(1.0, order.append, i)
        loop.call_at(0.5, order.append, -1)
        await asyncio.sleep(2)

    loop.run(main())
    assert order == [-1, *range(20)]


def test_a_loop_with_nothing_left_to_do_raises_deadlock_instead_of_hanging():
    loop = SimLoop()

    async def waits_forever():
        await asyncio.sleep(1.5)
        await loop.create_future()  # nobody will ever set it

    with pytest.raises(SimulationDeadlock, match=r"virtual time 1\.500000 s.*waits_forever"):
        loop.run(waits_forever())


def test_a_callback_that_reschedules_itself_at_once_is_a_livelock():
    loop = SimLoop(max_spins=10_000)

    def again():
        loop.call_soon(again)

    async def main():
        again()
        await asyncio.sleep(1)

    with pytest.raises(SimulationLivelock):
        loop.run(main())


def test_real_io_is_refused_and_executors_run_inline():
    loop = SimLoop()

    async def main():
        with pytest.raises(RealIOError):
            await asyncio.open_connection("127.0.0.1", 9)
        with pytest.raises(RealIOError):
            await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        t = loop.time()
        assert await loop.run_in_executor(None, sum, [1, 2, 3]) == 6
        assert loop.time() == t  # inline, in no virtual time

    loop.run(main())
    strict = SimLoop(executor="refuse")

    async def refused():
        with pytest.raises(RealIOError):
            await strict.run_in_executor(None, sum, [1])

    strict.run(refused())


def test_unretrieved_task_exceptions_are_recorded():
    loop = SimLoop()

    async def boom():
        raise ValueError("lost")

    async def main():
        loop.create_task(boom())
        await asyncio.sleep(1)

    loop.run(main())
    import gc
    gc.collect()
    assert any("lost" in (e["exception"] or "") for e in loop.errors)


def test_cancelled_timers_never_fire_and_leave_the_heap():
    loop = SimLoop()
    fired: list[int] = []
    timers = [loop.call_at(10.0 + i, fired.append, i) for i in range(2_000)]
    for t in timers[:1_500]:
        t.cancel()
        t.cancel()  # twice: counted once
    assert all(t.cancelled() for t in timers[:1_500]) and not timers[-1].cancelled()
    assert timers[-1].when() == 2_009.0
    assert len(loop._heap) <= 1_000  # the cancelled dropped once they were over half of it
    loop.run_for(1_509.5)
    assert fired == []  # the cancelled never fire
    loop.run_for(0.5)
    assert fired == [1_500]  # the first live one, at 1_510
    loop.run_for(600)
    assert fired == list(range(1_500, 2_000))


def test_a_failing_callback_goes_to_the_exception_handler_in_its_context():
    import contextvars

    var = contextvars.ContextVar("var", default="outside")
    loop = SimLoop()
    seen: list[str] = []

    def fail() -> None:
        seen.append(var.get())
        raise ValueError("boom")

    ctx = contextvars.copy_context()
    ctx.run(var.set, "inside")
    handle = loop.call_soon(fail, context=ctx)
    assert handle.get_context() is ctx
    loop.call_soon(lambda: seen.append("after"))  # the loop goes on
    loop.run_for(1)
    assert seen == ["inside", "after"]
    assert [(e["message"], e["exception"]) for e in loop.errors] == [
        ("Exception in callback <SimHandle test_a_failing_callback_goes_to_the_exception_handler"
         "_in_its_context.<locals>.fail>", "ValueError('boom')")]


def test_asyncio_primitives_run_on_the_loop_of_its_own():
    """SimLoop is no BaseEventLoop: what asyncio's primitives ask of a loop is its own code."""
    loop = SimLoop()
    assert not isinstance(loop, asyncio.BaseEventLoop)
    got: list[object] = []

    async def producer(q: asyncio.Queue, done: asyncio.Event) -> None:
        for i in range(3):
            await asyncio.sleep(0.5)
            await q.put(i)
        done.set()

    async def main() -> float:
        assert asyncio.get_running_loop() is loop
        q: asyncio.Queue = asyncio.Queue()
        done = asyncio.Event()
        task = asyncio.create_task(producer(q, done), name="producer")
        assert task.get_name() == "producer" and task in asyncio.all_tasks()
        while not (done.is_set() and q.empty()):
            got.append(await q.get())
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.25):
                await asyncio.sleep(10)
        lock = asyncio.Lock()
        async with lock:
            got.append(asyncio.current_task().get_name())
        results = await asyncio.gather(asyncio.sleep(0.25, "a"), asyncio.sleep(0.5, "b"))
        got.append(tuple(results))
        return loop.time()

    assert loop.run(main()) == 1.5 + 1.25 + 0.5
    assert got[:3] == [0, 1, 2] and got[4] == ("a", "b") and got[3].startswith("Task-")
    assert not loop.is_running() and asyncio._get_running_loop() is None
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon(print)


def test_a_loop_refuses_to_run_inside_another_running_loop_and_runs_once_it_ended():
    outer, inner = SimLoop(), SimLoop()
    fut = inner.create_future()

    async def main() -> None:
        with pytest.raises(RuntimeError, match="another loop is running"):
            inner.run_until_complete(fut)
        assert asyncio.get_running_loop() is outer  # the refusal left the running loop as it was

    outer.run(main())
    inner.call_later(0.5, fut.set_result, "done")
    assert inner.run_until_complete(fut) == "done" and inner.time() == 0.5
    assert not inner.is_running()
    with pytest.raises(RuntimeError, match="no running event loop"):
        asyncio.get_running_loop()  # and none is left running in this thread
