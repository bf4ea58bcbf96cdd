//! The tables' columns as the main thread fills them: plain vectors, a value pushed per row,
//! made arrow arrays once per row group (`finish`).
//!
//! Arrow's builders do their bookkeeping per value (the validity bit and its buffer's growth,
//! a zeroed slot per null, the offset's checks): some 40 instructions an integer and 70 a
//! string, and filling the columns (`Tables::op` and `Tables::reads`) was about a sixth of
//! the ingest's instructions; a push here is a few (docs/checkers.md, "Measured on
//! 2026-11-29, night"). The arrays are the builders' (a column without nulls has no validity bitmap, as a
//! builder's has not), so the Parquet written is the same bytes.

use std::sync::Arc;

use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{ArrayRef, PrimitiveArray, StringArray};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};

/// Which rows have a value, as bits, 64 to a word. Not arrow's `NullBufferBuilder`, which
/// keeps the same bits but grows its buffer a byte at a time: with it in place of this, the
/// ingest of the 10M history's first 2M lines took 18,234M instructions, more than with
/// arrow's builders (18,008M) and 5 % more than with this (17,372M; callgrind).
struct Validity {
    words: Vec<u64>,
    len: usize,
}

impl Validity {
    fn with_capacity(n: usize) -> Self {
        Validity {
            words: Vec::with_capacity(n.div_ceil(64)),
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, present: bool) {
        let bit = self.len % 64;
        if bit == 0 {
            self.words.push(0);
        }
        if present {
            *self.words.last_mut().expect("a word for this bit") |= 1 << bit;
        }
        self.len += 1;
    }

    fn push_n(&mut self, present: bool, n: usize) {
        for _ in 0..n {
            self.push(present);
        }
    }

    /// None when every row has its value.
    fn finish(self) -> Option<NullBuffer> {
        let bits = BooleanBuffer::new(Buffer::from_vec(self.words), 0, self.len);
        Some(NullBuffer::new(bits)).filter(|n| n.null_count() > 0)
    }
}

/// A column of integers (`P`: Int64Type, Int32Type).
pub struct Ints<P: ArrowPrimitiveType> {
    values: Vec<P::Native>,
    present: Validity,
}

impl<P: ArrowPrimitiveType> Ints<P> {
    pub fn with_capacity(n: usize) -> Self {
        Ints {
            values: Vec::with_capacity(n),
            present: Validity::with_capacity(n),
        }
    }

    #[inline]
    pub fn push_value(&mut self, v: P::Native) {
        self.values.push(v);
        self.present.push(true);
    }

    #[inline]
    pub fn push(&mut self, v: Option<P::Native>) {
        self.values.push(v.unwrap_or_default());
        self.present.push(v.is_some());
    }

    /// `push(v)` `n` times over.
    pub fn push_n(&mut self, v: Option<P::Native>, n: usize) {
        self.values
            .resize(self.values.len() + n, v.unwrap_or_default());
        self.present.push_n(v.is_some(), n);
    }

    pub fn finish(self) -> ArrayRef {
        let nulls = self.present.finish();
        Arc::new(PrimitiveArray::<P>::new(
            ScalarBuffer::from(self.values),
            nulls,
        ))
    }
}

/// A column of text.
pub struct Texts {
    /// Where each row's text ends in `bytes` (after a 0: arrow's offsets).
    ends: Vec<i32>,
    bytes: Vec<u8>,
    present: Validity,
}

impl Texts {
    /// Room for `n` rows and `bytes` bytes of text.
    pub fn with_capacity(n: usize, bytes: usize) -> Self {
        let mut ends = Vec::with_capacity(n + 1);
        ends.push(0);
        Texts {
            ends,
            bytes: Vec::with_capacity(bytes),
            present: Validity::with_capacity(n),
        }
    }

    /// The text so far as an offset: past 2 GiB in one row group, a panic, as arrow's
    /// builder's.
    #[inline]
    fn end(&self) -> i32 {
        i32::try_from(self.bytes.len()).expect("byte array offset overflow")
    }

    #[inline]
    pub fn push_value(&mut self, v: &str) {
        self.bytes.extend_from_slice(v.as_bytes());
        self.ends.push(self.end());
        self.present.push(true);
    }

    #[inline]
    pub fn push(&mut self, v: Option<&str>) {
        match v {
            Some(v) => self.push_value(v),
            None => {
                self.ends.push(self.end());
                self.present.push(false);
            }
        }
    }

    /// `push_value(v)` `n` times over.
    pub fn push_n(&mut self, v: &str, n: usize) {
        let (start, width) = (self.bytes.len(), v.len());
        self.bytes.extend_from_slice(&v.as_bytes().repeat(n));
        self.end(); // the last offset fits, so every one before it does
        self.ends
            .extend((1..=n).map(|k| (start + k * width) as i32));
        self.present.push_n(true, n);
    }

    pub fn finish(self) -> ArrayRef {
        let nulls = self.present.finish();
        let ends = OffsetBuffer::new(ScalarBuffer::from(self.ends));
        // SAFETY: the bytes are whole `&str`s one after another, each ending at its offset,
        // so every value is UTF-8 and every offset on a char boundary
        Arc::new(unsafe { StringArray::new_unchecked(ends, Buffer::from_vec(self.bytes), nulls) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{Int64Builder, StringBuilder};
    use arrow_array::types::Int64Type;
    use arrow_array::Array;

    /// Rows of every shape: none, all present, all null, and nulls across word boundaries.
    fn shapes() -> Vec<Vec<Option<i64>>> {
        let mixed = (0..200).map(|i| (i % 3 != 0).then_some(i)).collect();
        let tail = (0..130).map(|i| (i != 129).then_some(-i)).collect();
        vec![
            vec![],
            (0..70).map(Some).collect(),
            vec![None; 65],
            mixed,
            tail,
        ]
    }

    #[test]
    fn integers_are_the_arrays_a_builder_makes() {
        for rows in shapes() {
            let (mut ours, mut theirs) = (Ints::<Int64Type>::with_capacity(4), Int64Builder::new());
            for (i, &v) in rows.iter().enumerate() {
                match (i % 2, v) {
                    (0, Some(v)) => ours.push_value(v),
                    _ => ours.push(v),
                }
                theirs.append_option(v);
            }
            let (ours, theirs) = (ours.finish(), theirs.finish());
            assert_eq!(ours.to_data(), theirs.to_data());
            assert_eq!(ours.nulls().is_some(), theirs.nulls().is_some());
        }
    }

    #[test]
    fn repeated_integers_and_texts_are_pushes_one_by_one() {
        let (mut ours, mut theirs) = (Ints::<Int64Type>::with_capacity(0), Int64Builder::new());
        let (mut text, mut strings) = (Texts::with_capacity(0, 0), StringBuilder::new());
        for (v, n) in [(Some(7), 3), (None, 70), (Some(-1), 0), (Some(2), 61)] {
            ours.push_n(v, n);
            let word = v.map(|v| format!("é{v}"));
            match &word {
                Some(w) => text.push_n(w, n),
                None => (0..n).for_each(|_| text.push(None)),
            }
            for _ in 0..n {
                theirs.append_option(v);
                strings.append_option(word.as_deref());
            }
        }
        assert_eq!(ours.finish().to_data(), theirs.finish().to_data());
        assert_eq!(text.finish().to_data(), strings.finish().to_data());
    }

    #[test]
    fn texts_are_the_arrays_a_builder_makes() {
        let rows = [
            Some("poll"),
            None,
            Some(""),
            Some("ünï"),
            None,
            Some("send"),
        ];
        let (mut ours, mut theirs) = (Texts::with_capacity(1, 1), StringBuilder::new());
        for v in rows.iter().cycle().take(100) {
            ours.push(*v);
            theirs.append_option(*v);
        }
        assert_eq!(ours.finish().to_data(), theirs.finish().to_data());
        let mut full = Texts::with_capacity(2, 0);
        full.push_value("a");
        full.push_value("bc");
        assert!(full.finish().nulls().is_none());
    }
}
