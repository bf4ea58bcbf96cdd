//! A short text field of a history line (process, f, node, error) without an allocation.
//!
//! The parsers type millions of lines, each with two to four of these, and the main thread
//! frees them: as `String`s they were one allocation each, freed on another thread than the
//! one that allocated it (`_mi_page_malloc_zero` and `mi_free`, about 7% of the ingest's
//! samples at 10M operations, docs/checkers.md). Their texts are short ("3", "send",
//! "final-poll", "NOT_ENOUGH_REPLICAS"), so they are kept inline, as big as a `String`; a
//! longer one (a nemesis's f, an odd error) goes to the heap as before.

use std::fmt;
use std::ops::Deref;

/// Bytes kept inline: with the tag and the length, as big as a `String` (24 bytes).
const INLINE: usize = 22;

#[derive(Clone)]
pub enum Text {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl Text {
    pub fn new(s: &str) -> Text {
        if s.len() > INLINE {
            return Text::Heap(s.into());
        }
        let mut bytes = [0u8; INLINE];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Text::Inline {
            len: s.len() as u8,
            bytes,
        }
    }

    /// An integer's decimal text, as Python's str(int) writes it (at most 20 bytes: inline).
    /// Digit by digit rather than by `write!`: the formatting machinery was 1% of the ingest.
    pub fn int(i: i64) -> Text {
        // the digits, backwards from the end (an i64's magnitude has at most 19)
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        let mut rest = i.unsigned_abs();
        loop {
            start -= 1;
            digits[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let mut bytes = [0u8; INLINE];
        let sign = usize::from(i < 0);
        bytes[0] = b'-';
        let len = sign + digits.len() - start;
        bytes[sign..len].copy_from_slice(&digits[start..]);
        Text::Inline {
            len: len as u8,
            bytes,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // SAFETY: the bytes were copied whole from a &str, or are an
            // integer: valid UTF-8, cut at a character boundary (the str's own end)
            Text::Inline { len, bytes } => unsafe {
                std::str::from_utf8_unchecked(&bytes[..*len as usize])
            },
            Text::Heap(s) => s,
        }
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

// Compared inline, not by a call to memcmp: the main thread compares a few texts per line
// (a process's id, `f` against "send", a completion's f against its invoke's), and the calls
// were 2 % of its samples at 10M operations.
impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        match (self, other) {
            // the bytes past `len` are zeros in both (`new`, `int`)
            (Text::Inline { len: a, bytes: x }, Text::Inline { len: b, bytes: y }) => {
                a == b && x == y
            }
            _ => same(self.as_bytes(), other.as_bytes()),
        }
    }
}

impl Eq for Text {}

impl std::hash::Hash for Text {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        same(self.as_bytes(), other.as_bytes())
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        same(self.as_bytes(), other.as_bytes())
    }
}

/// Byte by byte: these texts are a few bytes long, shorter than a call to memcmp.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_keep_their_bytes_inline_or_not() {
        for s in [
            "",
            "3",
            "final-poll",
            "NOT_ENOUGH_REPLICAS",
            "é22 bytes, not 23 ..",
            "x".repeat(23).as_str(),
        ] {
            assert_eq!(Text::new(s).as_str(), s);
        }
        assert!(matches!(Text::new(&"x".repeat(22)), Text::Inline { .. }));
        assert!(matches!(Text::new(&"x".repeat(23)), Text::Heap(_)));
    }

    #[test]
    fn texts_equal_theirs_only() {
        let texts = [
            "",
            "3",
            "30",
            "send",
            "sent",
            "x".repeat(22).as_str(),
            "x".repeat(23).as_str(),
        ]
        .map(|s| s.to_string());
        for a in &texts {
            for b in &texts {
                assert_eq!(Text::new(a) == Text::new(b), a == b, "{a} {b}");
                assert_eq!(Text::new(a) == b.as_str(), a == b, "{a} {b}");
            }
        }
        assert!(Text::int(30) == Text::new("30") && Text::int(3) != Text::new("30"));
    }

    #[test]
    fn integers_are_written_as_python_writes_them() {
        for i in [0, -1, 7, -10, 42, 100, i64::MIN, i64::MIN + 1, i64::MAX] {
            assert_eq!(Text::int(i).as_str(), i.to_string());
        }
    }
}
