"""Fault kinds declare their effects, phrases and settings; the history records the effects and
the checkers and reports read them there. `clock-skew` is the kind added this way."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import pytest

from harness.config import ConfigError, load_config, typed
from harness.report.story import _fault_text
from harness.sim_run import as_simulated, simulate_into
from harness.simulate import check_determinism
from harness.test import Test
from nemesis.hosts_world import RealHost
from nemesis.kinds import all_kinds, all_settings, lookup, with_effect
from nemesis.kinds.clock import ClockStep
from runformat import effects as fx
from runformat.effects import RECORDED_BEFORE, effects_of


def test_every_kind_declares_known_effects_and_the_frozen_table_agrees():
    for kind in all_kinds():
        assert kind.effects and kind.effects <= set(fx.EFFECTS), kind.name
        if kind.name in RECORDED_BEFORE:  # histories from before effects were recorded
            assert RECORDED_BEFORE[kind.name] == kind.effects, kind.name
    assert with_effect(fx.SKEWS_CLOCK) == ("clock-skew",)
    assert set(with_effect(fx.KILLS_PROCESS)) == {
        "kill", "power-loss", "torn-power-loss", "outage", "vm-power-off", "corrupt-segment"}


def test_effects_are_read_from_the_op_first_then_the_frozen_table():
    op = {"process": "nemesis", "type": "info", "f": "start-kill", "value": {"nodes": ["n2"]}}
    assert effects_of(op) == {fx.KILLS_PROCESS}  # an old history: no effects recorded
    recorded = {**op, "value": {"nodes": ["n2"], "effects": [fx.PAUSES_PROCESS]}}
    assert effects_of(recorded) == {fx.PAUSES_PROCESS}
    assert effects_of({**op, "f": "start-something-new"}) == frozenset()
    assert effects_of({**op, "f": "stop-kill"}) == frozenset()


def test_a_kind_tells_its_own_story():
    base = {"started_s": 1.0, "ended_s": 3.5, "resolved": {"nodes": ["n2"]}}
    assert _fault_text(dict(base, kind="clock-skew"), None) == \
        "the clock of broker 1 (n2) jumps for 2.50 s"
    assert lookup("pause").tell(["n2", "n3"], "brokers 1, 2", healed=True) == "brokers 1, 2 resume"
    assert _fault_text(dict(base, kind="gone-kind"), None) == "broker 1 (n2) is hit by gone-kind for 2.50 s"


def test_a_kinds_settings_are_the_configs_schema():
    assert all_settings()["clock_skew_ms"].default == 5000.0
    config = load_config("fast", ["nemesis.clock_skew_ms=-2500"])
    assert config["nemesis"]["clock_skew_ms"] == -2500
    with pytest.raises(ConfigError, match="clock_skew_ms"):
        load_config("fast", ["nemesis.clock_skew_ms=1e12"])


def _host(vm: str):
    from control.host import Host

    p = PurePosixPath("/x")
    return Host("n2", "10.0.0.2", p, p, p, remote=None, vm=vm)  # type: ignore[arg-type]


def test_a_namespace_host_refuses_a_clock_step_before_any_command():
    # remote=None: a command would fail otherwise than with this message
    with pytest.raises(RuntimeError, match="share this machine's one kernel clock"):
        ClockStep(5000.0).on_host(RealHost(_host(""), "python3", None))


def _simulate(tmp_path, seed: int) -> list[dict]:
    config = as_simulated(load_config("fast", [
        "nodes=4", "topic.partitions=1", "time_limit=8", "nemesis.faults=['clock-skew']",
        "nemesis.interval=1", "nemesis.duration=2", "nemesis.clock_skew_ms=3000",
        "workload.final_read_timeout=20", f"seed={seed}"]))
    simulate_into(Test.of(config, tmp_path, check=False), tmp_path)
    return [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]


def test_clock_skew_runs_in_the_simulator_and_its_op_records_its_effects(tmp_path):
    ops = _simulate(tmp_path, 3)
    starts = [o for o in ops if o["process"] == "nemesis" and o["f"] == "start-clock-skew"]
    assert starts and all(o["value"]["effects"] == [fx.SKEWS_CLOCK] for o in starts)
    assert all(o["value"]["link"] == {"clock_skew_ms": 3000.0} for o in starts)
    assert not any("error" in o["value"] for o in starts)
    schedule = json.loads((tmp_path / "schedule.json").read_text())
    assert any(f["outcome"] == "ok" for f in schedule["faults"])


def test_clock_skew_is_deterministic():
    config = load_config("fast", ["nodes=4", "topic.partitions=1", "time_limit=6", "seed=4",
                                  "nemesis.faults=['clock-skew','kill']"])
    assert check_determinism(typed(config), 4) is None


# ---- vm-power-off: a HostAction like clock-skew -----------------------------------------------


class _Recorder:
    """The World verbs vm-power-off may call, recorded (the kind's wiring alone)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def act_on_host(self, node, key, action):
        self.calls.append(("act", node, key, type(action).__name__))
        return {"lost_bytes": 0}

    async def undo_on_host(self, node, key):
        self.calls.append(("undo", node, key))

    async def start(self, node):
        self.calls.append(("start", node))


def test_vm_power_off_goes_through_the_generic_host_verbs():
    import asyncio

    kind, world = lookup("vm-power-off"), _Recorder()
    out = asyncio.run(kind.apply(world, ["n2", "n3"], 0, {}))
    asyncio.run(kind.heal(world, ["n2"]))
    assert out == {"n2": {"lost_bytes": 0}, "n3": {"lost_bytes": 0}}
    assert world.calls == [("act", "n2", "vm-power-off", "PowerCycle"),
                           ("act", "n3", "vm-power-off", "PowerCycle"),
                           ("undo", "n2", "vm-power-off"), ("start", "n2")]


class _Blocking:
    """A HostAction whose command blocks its worker thread until released (or fails)."""

    def __init__(self, fail: bool = False) -> None:
        import threading

        self.entered, self.release, self.fail, self.finished = (threading.Event(),
                                                                  threading.Event(), fail, False)

    def on_host(self, host):
        self.entered.set()
        self.release.wait(10)
        if self.fail:
            raise RuntimeError("the command failed")
        self.finished = True
        return {}

    def undo_on_host(self, host):
        pass


def _cancel_midway(action: _Blocking) -> tuple[bool, list]:
    """act_on_host on a real HostsWorld (a worker thread), cancelled while the action runs:
    whether the cancel waited for the thread, and the actions left to undo."""
    import asyncio

    from control.cluster import Cluster
    from nemesis.hosts_world import HostsWorld

    world = HostsWorld(Cluster([_host("")], {}))

    async def scenario() -> bool:
        task = asyncio.create_task(world.act_on_host("n2", "k", action))
        await asyncio.get_running_loop().run_in_executor(None, action.entered.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        waited = not task.done()  # still waiting for the thread, not cancelled at once
        action.release.set()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return waited

    waited = asyncio.run(scenario())
    return waited, world.acted.pending()


def test_a_host_action_cancelled_midway_is_waited_for_and_left_for_the_heal():
    action = _Blocking()
    waited, pending = _cancel_midway(action)
    assert waited and action.finished and pending == [("n2", "k")]


def test_a_host_action_that_failed_while_cancelled_is_not_left_for_the_heal():
    # the twin: what is remembered is what succeeded, not every action started
    waited, pending = _cancel_midway(_Blocking(fail=True))
    assert waited and pending == []
