"""The simulated world: the real protocol, client, workload and history in simulated time.

One process, one thread, one seed. The unmodified sans-IO `Controller`/`Broker` driven by
the node driver of real hosts (`replication/driver.py`) over their storage code of real hosts
(`BrokerStore`, `SegmentLog`, the metadata file) on an in-memory lossy filesystem, the asyncio
`Client` and `KafkaWorkload`, the run sequence (`workloads/sequence.py`) and `HistoryWriter`
run on a deterministic virtual-time event loop; timers fire at their own times and nothing waits for
the wall clock. Same seed + configuration + code: byte-identical history.jsonl and
events.jsonl (in any process, whatever PYTHONHASHSEED). In the spirit of FoundationDB's
simulation, TigerBeetle's VOPR and madsim.

Modules (bottom up):

- `loop`: `SimLoop`, an asyncio event loop with a virtual clock that jumps to the next timer
  instead of waiting; refuses real I/O; raises `SimulationDeadlock` when nothing can happen.
- `network`: TCP as the harness's hosts see it -- FIFO streams with seeded latency, process
  death (FIN/reset), pause, partitions as grudges (a stall, then TCP retransmission), link
  faults on what a host receives -- and `Pool`/`Connection` with replication/net.py's
  interface, passing message objects.
- `simfs`: `SimFs`, an in-memory filesystem with the lossy filesystem's durability model
  (power loss, torn writes, page-cache loss with EIO), the storage code's `Fs` port.
- `disk`: per-node disks: one `SimFs` each, under the real storage code of brokers and the
  controller; the log views the invariant monitor reads.
- `node`: node processes, the port of the node driver (replication/driver.py) that drives the
  state machines on real hosts too: each host's own clock and timers, requests over the
  simulated network, fsyncs that block the loop, the storage port's job queue.
- `world`: `World`, the cluster and its operations by node name (start, kill, stop_clean,
  pause, resume, power_loss, page_cache_loss, partition, heal_partition, degrade_link,
  restore_link, clock_jump, clock_drift, clock_reset, is_running, events), and `Verbs`, the
  same as coroutines for nemesis.kinds' fault kinds.
- `invariants`: the protocol invariants (checkers/invariants.py) checked after every step.
- `run`: `run_simulation`, one whole test through the run sequence of real hosts (start,
  topic, workload with a faults callback, heal, final read) writing history.jsonl and
  events.jsonl.

The package imports replication, workloads, checkers.invariants, runformat (fault effects)
and, of nemesis, the kinds that say they degrade a link and the damage of `corrupt-segment`
(never control or harness). Scripted fault plans for tests are in tests/support/scenarios.py.
"""
