//! The cells of a partition: one per distinct (offset, value) read or acked.
//!
//! A healthy partition has one value per offset and its offsets are dense, so each offset's
//! first value and cell go in a vector indexed by the offset, and only another value at an
//! offset already taken (an inconsistent offset) goes in a hash map. At 100M operations a
//! hash map of every cell took a third of a partition's checks, nearly all of it cache
//! misses on random probes; the records a read returns come in offset order, so the
//! vector's slots are visited in order. Offsets too sparse for a vector (a span past
//! DENSE times the cells) go in the hash map alone.

use rustc_hash::FxHashMap;

/// The most slots per cell a vector may take (each slot 24 bytes, a hash map's entry
/// about 40).
const DENSE: u64 = 2;

#[derive(Clone, Copy)]
pub struct Cell {
    pub read: bool,
    pub in_final: bool,
    pub first_op: i64,
}

/// An offset's first value and its cell; `value` is EMPTY while the offset has none (a
/// value never holds it: the loader refuses i64::MIN, load.rs's Opt).
#[derive(Clone, Copy)]
struct Slot {
    value: i64,
    cell: Cell,
}

const EMPTY: i64 = i64::MIN;

pub struct CellMap {
    /// The offset of `slots[0]`.
    base: i64,
    slots: Vec<Slot>,
    more: FxHashMap<(i64, i64), Cell>,
}

impl CellMap {
    /// For cells at offsets in `lo..=hi` (None: no offset at all), about `cells` of them: a
    /// vector over the offsets when it takes at most DENSE slots a cell, else a hash map
    /// with room for `cells`.
    pub fn new(span: Option<(i64, i64)>, cells: usize) -> CellMap {
        let slots = match span {
            Some((lo, hi)) if hi.abs_diff(lo) < DENSE * cells as u64 => {
                hi.abs_diff(lo) as usize + 1
            }
            _ => 0,
        };
        let empty = Slot {
            value: EMPTY,
            cell: Cell {
                read: false,
                in_final: false,
                first_op: 0,
            },
        };
        let more = if slots > 0 { 0 } else { cells };
        CellMap {
            base: span.map_or(0, |(lo, _)| lo),
            slots: vec![empty; slots],
            more: FxHashMap::with_capacity_and_hasher(more, Default::default()),
        }
    }

    fn slot(&self, off: i64) -> Option<usize> {
        let i = off.checked_sub(self.base)?;
        (0..self.slots.len() as i64)
            .contains(&i)
            .then_some(i as usize)
    }

    /// Merge into the cell of (off, v) with `update`, or make it `new`.
    pub fn upsert(&mut self, off: i64, v: i64, new: Cell, update: impl FnOnce(&mut Cell)) {
        if let Some(i) = self.slot(off) {
            let s = &mut self.slots[i];
            if s.value == EMPTY {
                *s = Slot {
                    value: v,
                    cell: new,
                };
                return;
            }
            if s.value == v {
                update(&mut s.cell);
                return;
            }
        }
        self.more.entry((off, v)).and_modify(update).or_insert(new);
    }

    pub fn get(&self, off: i64, v: i64) -> Option<&Cell> {
        match self.slot(off).map(|i| &self.slots[i]) {
            Some(s) if s.value == v => Some(&s.cell),
            _ => self.more.get(&(off, v)),
        }
    }

    /// Every cell with its (offset, value), the vector's in offset order, then the map's.
    pub fn iter(&self) -> impl Iterator<Item = ((i64, i64), &Cell)> + Clone + '_ {
        let base = self.base;
        let dense = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.value != EMPTY);
        dense
            .map(move |(i, s)| ((base + i as i64, s.value), &s.cell))
            .chain(self.more.iter().map(|(&k, c)| (k, c)))
    }

    pub fn keys(&self) -> impl Iterator<Item = (i64, i64)> + Clone + '_ {
        self.iter().map(|(k, _)| k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(first_op: i64) -> Cell {
        Cell {
            read: true,
            in_final: false,
            first_op,
        }
    }

    /// The same upserts into a dense map and a sparse one (all in the hash map).
    fn both(ops: &[(i64, i64, i64)]) -> [Vec<((i64, i64), i64)>; 2] {
        let lo = ops.iter().map(|o| o.0).min();
        let hi = ops.iter().map(|o| o.0).max();
        [lo.zip(hi), None].map(|span| {
            let mut m = CellMap::new(span, ops.len());
            for &(off, v, op) in ops {
                m.upsert(off, v, cell(op), |c| c.first_op = c.first_op.min(op));
            }
            for &(off, v, _) in ops {
                assert!(m.get(off, v).is_some());
            }
            assert!(m.get(ops[0].0, i64::MAX).is_none());
            let mut all: Vec<_> = m.iter().map(|(k, c)| (k, c.first_op)).collect();
            all.sort_unstable();
            all
        })
    }

    #[test]
    fn dense_and_sparse_hold_the_same_cells() {
        // two values at offset 5 (an inconsistent offset), a value at two offsets, repeats
        let ops = [
            (5, 50, 9),
            (6, 60, 3),
            (5, 51, 4),
            (5, 50, 2),
            (8, 60, 7),
            (6, 60, 8),
        ];
        let [dense, sparse] = both(&ops);
        assert_eq!(dense, sparse);
        assert_eq!(
            dense,
            vec![((5, 50), 2), ((5, 51), 4), ((6, 60), 3), ((8, 60), 7)]
        );
    }

    #[test]
    fn offsets_too_far_apart_go_in_the_map_alone() {
        let m = CellMap::new(Some((0, i64::MAX - 1)), 2);
        assert!(m.slots.is_empty());
        let m = CellMap::new(Some((-3, 0)), 2);
        assert_eq!((m.base, m.slots.len()), (-3, 4));
        let [a, b] = both(&[(0, 1, 1), (i64::MAX - 1, 2, 2)]);
        assert_eq!(a, b);
    }
}
