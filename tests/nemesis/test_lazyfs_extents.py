"""Pure-logic tests of the dirty-extent map and torn-write selection (no FUSE)."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from nemesis.lazyfs.extents import EXTENT_MAX, PAGE_SIZE, DirtyExtents
from nemesis.lazyfs.torn import kept_pieces

ops = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.integers(0, 300), st.binary(min_size=1, max_size=80)),
        st.tuples(st.just("t"), st.integers(0, 400), st.just(b"")),
    ),
    max_size=40,
)


def _model_apply(data: dict[int, int], op: tuple[str, int, bytes]) -> None:
    kind, off, payload = op
    if kind == "w":
        for i, b in enumerate(payload):
            data[off + i] = b
    else:
        for k in [k for k in data if k >= off]:
            del data[k]


@settings(max_examples=300, deadline=None)
@given(ops)
def test_extents_match_a_byte_model(seq):
    ext, model = DirtyExtents(), {}
    for op in seq:
        before = len(model)
        if op[0] == "w":
            added = ext.write(op[1], op[2])
        else:
            added = -ext.truncate(op[1])
        _model_apply(model, op)
        assert added == len(model) - before
        assert ext.dirty_bytes == len(model)
    got = {}
    for start, buf in ext:
        for i, b in enumerate(buf):
            got[start + i] = b
    assert got == model
    starts = [s for s, _ in ext]
    ends = [s + len(b) for s, b in ext]
    # sorted, non-overlapping, non-adjacent (adjacent writes are coalesced)
    assert all(ends[i] < starts[i + 1] for i in range(len(starts) - 1))
    for off in range(0, 420, 37):
        for start, piece in ext.overlapping(off, 50):
            assert off <= start and start + len(piece) <= off + 50
            assert bytes(piece) == bytes(model[start + i] for i in range(len(piece)))


def test_sequential_appends_stay_one_extent():
    ext = DirtyExtents()
    for i in range(1000):
        ext.write(i * 100, b"x" * 100)
    assert len(list(ext)) == 1 and ext.dirty_bytes == 100_000


def test_torn_prefix_is_a_seeded_prefix_in_offset_order():
    ext = DirtyExtents()
    ext.write(5000, b"b" * 3000)
    ext.write(0, b"a" * 1000)
    first = kept_pieces(ext, random.Random(7), "prefix")
    assert first == kept_pieces(ext, random.Random(7), "prefix")
    flat = b"".join(d for _, d in first)
    assert flat == (b"a" * 1000 + b"b" * 3000)[: len(flat)]
    assert [o for o, _ in first] == [0, 5000][: len(first)]


def test_torn_pages_are_page_aligned_pieces_of_the_dirty_data():
    ext = DirtyExtents()
    ext.write(100, bytes(range(256)) * 64)
    kept = kept_pieces(ext, random.Random(3), "pages")
    assert kept == kept_pieces(ext, random.Random(3), "pages")
    assert 0 < len(kept) < len(ext.pages())
    for off, data in kept:
        assert off // PAGE_SIZE == (off + len(data) - 1) // PAGE_SIZE
        assert data == (bytes(range(256)) * 64)[off - 100 : off - 100 + len(data)]


def test_an_append_onto_a_full_extent_starts_an_adjacent_one():
    """Growing one buffer forever re-copies it now and then; past EXTENT_MAX appends go to a
    new extent, and reads, truncation and pieces see one contiguous range as before."""
    ext = DirtyExtents()
    chunk = bytes(range(256)) * (EXTENT_MAX // 512)  # half an extent
    for i in range(3):
        ext.write(i * len(chunk), chunk)
    starts = [s for s, _ in ext]
    assert starts == [0, EXTENT_MAX] and ext.dirty_bytes == 3 * len(chunk)
    assert b"".join(bytes(p) for _, p in ext.overlapping(EXTENT_MAX - 10, 20)) == chunk[-10:] + chunk[:10]
    ext.write(EXTENT_MAX - 2, b"XYZW")  # a write across the seam merges the two
    assert [s for s, _ in ext] == [0] and ext.dirty_bytes == 3 * len(chunk)
    assert ext.truncate(EXTENT_MAX) == len(chunk)
