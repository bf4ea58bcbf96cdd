"""The Store (no FUSE) against an independent model of the durability rules.

Random sequences of create/write/truncate/rename/unlink/fsync/dir-fsync/flush/
power-loss run on a real backing directory; after every step what processes see
must equal the model's visible state and the backing directory must equal the
model's durable state.
"""

import errno
import os
import tempfile

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nemesis.lazyfs.store import Store

NAMES = ["a", "b"]
name = st.sampled_from(NAMES)
step = st.one_of(
    st.tuples(st.just("create"), name),
    st.tuples(st.just("write"), name, st.integers(0, 24), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("append"), name, st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("truncate"), name, st.integers(0, 30)),
    st.tuples(st.just("rename"), name, name),
    st.tuples(st.just("unlink"), name),
    st.tuples(st.just("fsync"), name),
    st.tuples(st.just("fsync_dir")),
    st.tuples(st.just("flush_all")),
    st.tuples(st.just("lose")),
)


class Model:
    """Files are ids; visible and durable namespaces map names to ids."""

    def __init__(self) -> None:
        self.next_id = 0
        self.visible: dict[str, int] = {}
        self.durable: dict[str, int] = {}
        self.data: dict[int, bytearray] = {}  # what processes read
        self.disk: dict[int, bytes] = {}  # what the backing file holds
        self.journal: list[tuple] = []

    def commit(self) -> None:
        for op in self.journal:
            if op[0] == "create":
                self.durable[op[1]] = op[2]
                self.disk[op[2]] = b""
            elif op[0] == "unlink":
                del self.durable[op[1]]
            else:
                self.durable[op[2]] = self.durable.pop(op[1])
        self.journal.clear()

    def is_durable(self, fid: int) -> bool:
        return fid in self.durable.values()

    def apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "create":
            fid, self.next_id = self.next_id, self.next_id + 1
            self.visible[op[1]] = fid
            self.data[fid] = bytearray()
            self.journal.append(("create", op[1], fid))
        elif kind in ("write", "append"):
            buf = self.data[self.visible[op[1]]]
            off, payload = (op[2], op[3]) if kind == "write" else (len(buf), op[2])
            if len(buf) < off:
                buf.extend(bytes(off - len(buf)))
            buf[off : off + len(payload)] = payload
        elif kind == "truncate":
            buf = self.data[self.visible[op[1]]]
            del buf[op[2] :]
            buf.extend(bytes(op[2] - len(buf)))
        elif kind == "rename":
            self.visible[op[2]] = self.visible.pop(op[1])
            self.journal.append(("rename", op[1], op[2]))
        elif kind == "unlink":
            del self.visible[op[1]]
            self.journal.append(("unlink", op[1]))
        elif kind == "fsync":
            fid = self.visible[op[1]]
            if not self.is_durable(fid):
                self.commit()
            if self.is_durable(fid):
                self.disk[fid] = bytes(self.data[fid])
        elif kind == "fsync_dir":
            self.commit()
        elif kind == "flush_all":
            self.commit()
            for fid in self.durable.values():
                self.disk[fid] = bytes(self.data[fid])
        elif kind == "lose":
            self.journal.clear()
            self.visible = dict(self.durable)
            for fid in self.durable.values():
                self.data[fid] = bytearray(self.disk[fid])

    def prepare(self, op: tuple) -> list[tuple]:
        """The op, preceded by a create when it needs a file that does not exist."""
        if op[0] == "create":
            return [] if op[1] in self.visible else [op]
        if op[0] in ("write", "append", "truncate", "unlink", "fsync", "rename") and op[1] not in self.visible:
            return [("create", op[1]), op]
        return [op]


def run_store(store: Store, op: tuple) -> None:
    kind = op[0]
    if kind == "create":
        store.create("/" + op[1], 0o644, os.getuid(), os.getgid())
    elif kind == "write":
        store.write(store.lookup("/" + op[1]), op[2], op[3])
    elif kind == "append":
        store.write(store.lookup("/" + op[1]), 0, op[2], append=True)
    elif kind == "truncate":
        store.truncate(store.lookup("/" + op[1]), op[2])
    elif kind == "rename":
        store.rename("/" + op[1], "/" + op[2])
    elif kind == "unlink":
        store.unlink("/" + op[1])
    elif kind == "fsync":
        store.fsync(store.lookup("/" + op[1]))
    elif kind == "fsync_dir":
        store.fsync(store.root)
    elif kind == "flush_all":
        store.flush_all()
    elif kind == "lose":
        store.lose_unsynced()


@settings(max_examples=300, deadline=None)
@given(st.lists(step, min_size=10, max_size=50))
@example([("write", "a", 0, b"abc"), ("fsync", "a"), ("truncate", "a", 0), ("truncate", "a", 5)])
def test_store_matches_the_durability_model(steps):
    with tempfile.TemporaryDirectory() as backing:
        store, model = Store(backing, sync_backing=False), Model()
        for op in (prepared for raw in steps for prepared in model.prepare(raw)):
            model.apply(op)
            run_store(store, op)
            assert sorted(store.readdir(store.root)) == sorted(model.visible)
            for n, fid in model.visible.items():
                node = store.lookup("/" + n)
                assert store.read(node, 0, 1000) == bytes(model.data[fid]), (op, n)
                assert node.attrs()["st_size"] == len(model.data[fid])
            assert sorted(os.listdir(backing)) == sorted(model.durable)
            for n, fid in model.durable.items():
                with open(os.path.join(backing, n), "rb") as f:
                    assert f.read() == model.disk[fid], (op, n)
            unsynced = sum(len(b) for b in model.data.values())  # an upper bound
            assert 0 <= store.report()["unsynced_bytes"] <= unsynced


def test_a_node_from_before_a_power_loss_cannot_re_enter_the_cache(tmp_path):
    store = Store(str(tmp_path), sync_backing=False)
    node = store.create("/f", 0o644, os.getuid(), os.getgid())
    store.fsync(node)
    store.lose_unsynced()
    # a request that looked the node up before the loss and runs after it
    for call in (lambda: store.write(node, 0, b"late"), lambda: store.fsync(node),
                 lambda: store.truncate(node, 0), lambda: store.read(node, 0, 10)):
        try:
            call()
        except OSError as exc:
            assert exc.errno == errno.EIO
        else:
            raise AssertionError("a dead node was accepted")
    assert store.report()["unsynced_bytes"] == 0 and not store.dirty
