//! A history line of the shapes the harness writes -> its fields, typed as they are scanned,
//! in one pass over the bytes and without serde_json (which was a third of the ingest's
//! parsing).
//!
//! It knows a subset of JSON only: an object whose keys are strings without escapes, and
//! whose values are null, true, false, integers, strings without escapes, or arrays of
//! these (records are arrays of integer pairs). Anything else (an escape, a float, an
//! object value, a field given twice, text after the object, bytes that are not UTF-8, ...)
//! gives None, and serde_json reads the line instead: so what this takes is valid JSON,
//! captured as serde_json captures it, and every line it does not vouch for is serde_json's
//! to take or refuse, with serde_json's message.
//!
//! One pass does all the work the parsers used to do in three (UTF-8 over the whole line,
//! this scan, then each field trimmed and re-read): every integer is read as its digits are
//! validated, a `records` array of integer pairs is read into its pairs as it is scanned,
//! and UTF-8 is checked only inside strings (all else this scanner takes is ASCII).

use crate::parse::{Field, Fields, Kind};

/// Arrays nested deeper than this are left to serde_json.
const DEPTH: usize = 8;

/// The fields of `line`, one JSON object, into `fl` (filled in place: the fields are a few
/// hundred bytes, moved per line they cost); None when serde_json must read it (`fl` then
/// holds what was scanned before the line was left).
pub fn scan<'a>(line: &'a [u8], fl: &mut Fields<'a>) -> Option<()> {
    let mut s = Cursor { b: line, i: 0 };
    s.ws();
    s.eat(b'{')?;
    s.ws();
    if s.peek() == Some(b'}') {
        s.i += 1;
    } else {
        loop {
            let key = match s.known_key() {
                Some(key) => key,
                None => s.string()?,
            };
            s.separator(b':')?;
            let field = if is(key, b"records") {
                s.records(&mut fl.pairs)?
            } else {
                s.value(DEPTH)?
            };
            if let Some(slot) = slot(fl, key) {
                // a field given twice is serde_json's error to give
                if slot.replace(field).is_some() {
                    return None;
                }
            }
            if s.separator(b',').is_none() {
                s.eat(b'}')?;
                break;
            }
        }
    }
    s.ws();
    (s.i == s.b.len()).then_some(())
}

/// Where a key's value goes; None for a key the checkers do not read (skipped, as serde's).
/// By length first, then as a fixed-size array: compared inline, not by a call to memcmp
/// per key tried (3% of the parsers' samples).
fn slot<'f, 'a>(fl: &'f mut Fields<'a>, key: &[u8]) -> Option<&'f mut Option<Field<'a>>> {
    Some(match key.len() {
        1 if key[0] == b'f' => &mut fl.f,
        3 if is(key, b"hwm") => &mut fl.hwm,
        3 if is(key, b"txn") => &mut fl.txn,
        4 if is(key, b"time") => &mut fl.time,
        4 if is(key, b"type") => &mut fl.r#type,
        4 if is(key, b"node") => &mut fl.node,
        4 if is(key, b"acks") => &mut fl.acks,
        5 if is(key, b"index") => &mut fl.index,
        5 if is(key, b"value") => &mut fl.value,
        5 if is(key, b"epoch") => &mut fl.epoch,
        5 if is(key, b"error") => &mut fl.error,
        6 if is(key, b"offset") => &mut fl.offset,
        7 if is(key, b"process") => &mut fl.process,
        7 if is(key, b"records") => &mut fl.records,
        8 if is(key, b"complete") => &mut fl.complete,
        9 if is(key, b"partition") => &mut fl.partition,
        _ => return None,
    })
}

/// Whether `key` is `name`, compared as a fixed-size array (inline, without memcmp).
fn is<const N: usize>(key: &[u8], name: &[u8; N]) -> bool {
    <&[u8; N]>::try_from(key).is_ok_and(|k| k == name)
}

/// `key` (quotes and all) when `rest` begins with it: its name without the quotes. Compared
/// as a fixed-size array, inline (a slice compare of a length known only at run time was a
/// call to memcmp per key).
#[inline]
fn quoted<const N: usize>(rest: &[u8], key: &'static [u8; N]) -> Option<&'static [u8]> {
    let head = <&[u8; N]>::try_from(rest.get(..N)?).ok()?;
    (head == key).then(|| &key[1..N - 1])
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` (little-endian: the first byte lowest) that is a
/// quote, a backslash, a control character or past ASCII. Exact for the lowest flagged byte:
/// a byte's "below n" test (x - n) & !x borrows only from a byte that is itself below n, so
/// a wrong flag can only sit above a right one.
fn stops(word: u64) -> u64 {
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS;
    let quote = below(word ^ (ONES * u64::from(b'"')), 1);
    let backslash = below(word ^ (ONES * u64::from(b'\\')), 1);
    quote | backslash | below(word, 0x20) | (word & HIGHS)
}

/// The value of a run of ASCII digits, None past 64 bits.
fn checked_magnitude(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |m, d| {
        m.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    /// JSON's whitespace, as serde_json skips it.
    fn ws(&mut self) {
        // counted in a local: kept in `self`, the index went to memory at every byte
        let mut i = self.i;
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(i) {
            i += 1;
        }
        self.i = i;
    }

    /// `c` with JSON's whitespace around it; None, having taken only whitespace, when the
    /// next other byte is not `c`. The harness writes `c` and one space: that is looked at
    /// first, as two bytes (a quarter of the scanner's loop was whitespace, called for).
    #[inline]
    fn separator(&mut self, c: u8) -> Option<()> {
        if self.b.get(self.i..self.i + 2) == Some(&[c, b' ']) {
            self.i += 2;
        } else {
            self.ws();
            if self.peek()? != c {
                return None;
            }
            self.i += 1;
        }
        self.ws();
        Some(())
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// The scanned bytes from `start` as text.
    fn text(&self, start: usize) -> &'a str {
        let bytes = &self.b[start..self.i];
        // SAFETY: every token this cursor takes is ASCII but a string's contents, which
        // `string` checks are UTF-8; a token starts and ends at an ASCII byte, so the bytes
        // of whole tokens are UTF-8
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// A key the checkers read, quotes and all, taken whole by its first letter and one
    /// fixed-size compare (most keys of a line are these: scanned as strings and then matched
    /// by `slot`, they were a fifth of the parsers' instructions); None leaves the key to
    /// `string`, from where it was. The closing quote is part of the compare, so `"index2"` is
    /// not `"index"`. These are `slot`'s keys: one missing here is still read, the slow way.
    fn known_key(&mut self) -> Option<&'a [u8]> {
        let rest = &self.b[self.i..];
        let key = match *rest.get(1)? {
            b'i' => quoted(rest, b"\"index\""),
            b'v' => quoted(rest, b"\"value\""),
            b'o' => quoted(rest, b"\"offset\""),
            b'n' => quoted(rest, b"\"node\""),
            b'f' => quoted(rest, b"\"f\""),
            b'h' => quoted(rest, b"\"hwm\""),
            b'a' => quoted(rest, b"\"acks\""),
            b'r' => quoted(rest, b"\"records\""),
            b'c' => quoted(rest, b"\"complete\""),
            b't' => match rest.get(2)? {
                b'i' => quoted(rest, b"\"time\""),
                b'y' => quoted(rest, b"\"type\""),
                _ => quoted(rest, b"\"txn\""),
            },
            b'p' => match rest.get(3)? {
                b'o' => quoted(rest, b"\"process\""),
                _ => quoted(rest, b"\"partition\""),
            },
            b'e' => match rest.get(2)? {
                b'p' => quoted(rest, b"\"epoch\""),
                _ => quoted(rest, b"\"error\""),
            },
            _ => None,
        }?;
        self.i += key.len() + 2;
        Some(key)
    }

    /// A string without escapes or control characters, UTF-8: its bytes between the quotes.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let mut high = false;
        loop {
            self.skip_plain();
            match self.next()? {
                b'"' => break,
                b'\\' | 0..=0x1f => return None,
                _ => high = true,
            }
        }
        let inner = &self.b[start..self.i - 1];
        // only a string may hold bytes past ASCII: checked here, not over the whole line
        if high {
            std::str::from_utf8(inner).ok()?;
        }
        Some(inner)
    }

    /// Past the string bytes that need no look (ASCII, not a quote, a backslash or a
    /// control character), eight at a time: most of a line's bytes are its keys and text,
    /// and a byte at a time they were a fifth of the parsers' instructions.
    fn skip_plain(&mut self) {
        while let Some(word) = self.b.get(self.i..self.i + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            let stops = stops(word);
            if stops != 0 {
                // the lowest flagged byte is the first one to look at (see `stops`)
                self.i += stops.trailing_zeros() as usize / 8;
                return;
            }
            self.i += 8;
        }
        // the last few bytes of the line: a byte at a time, by the caller
        while let Some(&c) = self.b.get(self.i) {
            if c == b'"' || c == b'\\' || c < 0x20 || c >= 0x80 {
                return;
            }
            self.i += 1;
        }
    }
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// An integer as JSON writes one (no leading zeros); a fraction or exponent: None.
    /// Some(its value) when it fits 64 bits (as Rust's i64 parse reads it), Some(None) past.
    #[inline]
    fn integer(&mut self) -> Option<Option<i64>> {
        let b = self.b;
        let mut i = self.i;
        let negative = b.get(i) == Some(&b'-');
        i += usize::from(negative);
        let first = i;
        // summed as the digits are checked, without a checked multiply per digit (the
        // scanner's costliest loop: most of a line's bytes are integers): up to 19 digits
        // cannot wrap a u64, a longer run is summed again with checks
        let mut sum = 0u64;
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while let Some(&c @ b'0'..=b'9') = b.get(i) {
                    sum = sum.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
                    i += 1;
                }
            }
            _ => return None,
        }
        self.i = i;
        if let Some(b'.' | b'e' | b'E') = b.get(i) {
            return None;
        }
        let magnitude = if i - first <= 19 {
            Some(sum)
        } else {
            checked_magnitude(&b[first..i])
        };
        let magnitude = magnitude.filter(|&m| m <= i64::MAX as u64 + u64::from(negative));
        Some(magnitude.map(|m| {
            if negative {
                (m as i64).wrapping_neg()
            } else {
                m as i64
            }
        }))
    }

    fn value(&mut self, depth: usize) -> Option<Field<'a>> {
        let start = self.i;
        let kind = match self.peek()? {
            b'"' => self.string().map(|_| Kind::Str)?,
            b'n' => self.literal(b"null").map(|()| Kind::Null)?,
            b't' => self.literal(b"true").map(|()| Kind::Other)?,
            b'f' => self.literal(b"false").map(|()| Kind::Other)?,
            b'-' | b'0'..=b'9' => self.integer()?.map_or(Kind::Other, Kind::Int),
            b'[' if depth > 0 => self.array(depth - 1).map(|()| Kind::Other)?,
            _ => return None,
        };
        Some(Field {
            text: self.text(start),
            kind,
        })
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.value(depth)?;
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    /// A `records` value: read into `pairs` when it is `[[offset, value], ...]` as
    /// `parse::records` takes it, else scanned as any value (and `pairs` left None).
    fn records(&mut self, pairs: &mut Option<Vec<(i64, i64)>>) -> Option<Field<'a>> {
        let start = self.i;
        match self.pairs() {
            Some(read) => {
                *pairs = Some(read);
                Some(Field {
                    text: self.text(start),
                    kind: Kind::Other,
                })
            }
            None => {
                self.i = start;
                self.value(DEPTH)
            }
        }
    }

    /// `[[offset, value], ...]` with offsets in [0, 2^63 - 1) and 64-bit values, or None.
    fn pairs(&mut self) -> Option<Vec<(i64, i64)>> {
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(Vec::new());
        }
        // about 10 bytes a pair as the harness writes them ("[12, 345], ")
        let mut out = Vec::with_capacity((self.b.len() - self.i) / 10);
        loop {
            self.eat(b'[')?;
            self.ws();
            let offset = self.integer()??;
            self.separator(b',')?;
            let value = self.integer()??;
            self.ws();
            self.eat(b']')?;
            if !(0..i64::MAX).contains(&offset) {
                return None;
            }
            out.push((offset, value));
            if self.separator(b',').is_none() {
                self.eat(b']')?;
                return Some(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(line: &[u8]) -> Option<Fields<'_>> {
        let mut fl = Fields::default();
        scan(line, &mut fl).map(|()| fl)
    }

    fn raw(text: &str) -> Option<Vec<Option<&str>>> {
        scanned(text.as_bytes()).map(|f| {
            [f.index, f.process, f.value, f.records, f.complete]
                .iter()
                .map(|f| f.map(|f| f.text))
                .collect()
        })
    }

    fn kinds(text: &str) -> Vec<Option<Kind>> {
        let f = scanned(text.as_bytes()).expect("a line the scanner takes");
        [f.index, f.process, f.value, f.records, f.complete]
            .iter()
            .map(|f| f.map(|f| f.kind))
            .collect()
    }

    #[test]
    fn the_shapes_the_harness_writes() {
        assert_eq!(
            raw(
                r#"{"index": 3, "process": "c0", "value": -12, "records": [[0, 1], [1,2]], "complete" : true}"#
            ),
            Some(vec![
                Some("3"),
                Some("\"c0\""),
                Some("-12"),
                Some("[[0, 1], [1,2]]"),
                Some("true")
            ])
        );
        assert_eq!(
            raw(" {\"index\":null,\"other\":[\"x\",[]]}\r"),
            Some(vec![Some("null"), None, None, None, None])
        );
        assert_eq!(raw("{}"), Some(vec![None; 5]));
    }

    #[test]
    fn every_key_goes_to_its_field_and_no_other() {
        let keys = [
            "index",
            "time",
            "process",
            "type",
            "f",
            "partition",
            "value",
            "offset",
            "node",
            "epoch",
            "error",
            "hwm",
            "acks",
            "records",
            "txn",
            "complete",
        ];
        for (n, key) in keys.iter().enumerate() {
            let line = format!("{{\"{key}\": {n}}}");
            let fl = scanned(line.as_bytes()).expect("scanned");
            let got: Vec<Option<Kind>> = [
                fl.index,
                fl.time,
                fl.process,
                fl.r#type,
                fl.f,
                fl.partition,
                fl.value,
                fl.offset,
                fl.node,
                fl.epoch,
                fl.error,
                fl.hwm,
                fl.acks,
                fl.records,
                fl.txn,
                fl.complete,
            ]
            .iter()
            .map(|f| f.map(|f| f.kind))
            .collect();
            let mut want = vec![None; keys.len()];
            want[n] = Some(Kind::Int(n as i64));
            assert_eq!(got, want, "{key}");
        }
        // near misses are keys the checkers do not read
        for key in [
            "indey",
            "Index",
            "ff",
            "",
            "hwm2",
            "recordz",
            "partitio",
            "completes",
            // keys known_key takes by their first letters, cut short or run on
            "t",
            "ti",
            "tx",
            "p",
            "pr",
            "e",
            "ep",
            "indexindex",
            "partitions",
        ] {
            let line = format!("{{\"{key}\": 1}}");
            let fl = scanned(line.as_bytes()).expect("scanned");
            assert!(
                fl.index.is_none() && fl.f.is_none() && fl.hwm.is_none() && fl.records.is_none(),
                "{key}"
            );
            assert!(fl.partition.is_none() && fl.complete.is_none(), "{key}");
            assert!(fl.time.is_none() && fl.r#type.is_none() && fl.txn.is_none(), "{key}");
            assert!(fl.process.is_none() && fl.epoch.is_none() && fl.error.is_none(), "{key}");
        }
    }

    #[test]
    fn integers_are_read_as_they_are_scanned() {
        assert_eq!(
            kinds(r#"{"index": 0, "process": -9223372036854775808, "value": 9223372036854775807}"#),
            vec![
                Some(Kind::Int(0)),
                Some(Kind::Int(i64::MIN)),
                Some(Kind::Int(i64::MAX)),
                None,
                None
            ]
        );
        // -0 is 0 to Rust's i64 parse, as to the exact path's int
        assert_eq!(kinds(r#"{"index": -0}"#)[0], Some(Kind::Int(0)));
        // past 64 bits: JSON still, but no integer here (the typing refuses or keeps its text)
        for past in [
            r#"{"index": 9223372036854775808}"#,
            r#"{"index": -9223372036854775809}"#,
            r#"{"index": 99999999999999999999999}"#,
        ] {
            assert_eq!(kinds(past)[0], Some(Kind::Other), "{past}");
        }
        assert_eq!(
            kinds(r#"{"index": null, "process": "é", "value": [1], "complete": false}"#),
            vec![
                Some(Kind::Null),
                Some(Kind::Str),
                Some(Kind::Other),
                None,
                Some(Kind::Other)
            ]
        );
    }

    #[test]
    fn integers_of_19_digits_and_more_are_exact_or_refused() {
        let kind = |digits: &str| kinds(&format!("{{\"index\": {digits}}}"))[0];
        assert_eq!(kind("1000000000000000000"), Some(Kind::Int(10i64.pow(18))));
        // 19 digits past i64 (the unchecked sum is exact there, the range check refuses)
        assert_eq!(kind("9999999999999999999"), Some(Kind::Other));
        // 2^64 and 2^64 + 1: an unchecked sum wraps to 0 and 1 here, the checked one refuses
        assert_eq!(kind("18446744073709551616"), Some(Kind::Other));
        assert_eq!(kind("18446744073709551617"), Some(Kind::Other));
        assert_eq!(kind("-18446744073709551617"), Some(Kind::Other));
        assert_eq!(checked_magnitude(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(checked_magnitude(b"18446744073709551616"), None);
    }

    #[test]
    fn records_are_read_into_pairs_or_left_to_parse() {
        let pairs = |text: &str| scanned(text.as_bytes()).expect("scanned").pairs;
        assert_eq!(
            pairs(r#"{"records": [[0, 10], [1,-11] ], "hwm": 2}"#),
            Some(vec![(0, 10), (1, -11)])
        );
        assert_eq!(pairs(r#"{"records": [ ]}"#), Some(vec![]));
        assert_eq!(
            pairs(r#"{"records": [[9223372036854775806, 1]]}"#),
            Some(vec![(i64::MAX - 1, 1)])
        );
        // JSON the pairs reader does not take: scanned as any array, its text kept for
        // parse::records to refuse (the must-fail twins of the shapes above)
        for text in [
            r#"{"records": [[-1, 1]]}"#,
            r#"{"records": [[9223372036854775807, 1]]}"#,
            r#"{"records": [[0, 99999999999999999999]]}"#,
            r#"{"records": [[0, 1, 2]]}"#,
            r#"{"records": [[0, "1"]]}"#,
            r#"{"records": [[0], 1]}"#,
            r#"{"records": null}"#,
            r#"{"records": 7}"#,
        ] {
            let fl = scanned(text.as_bytes()).expect("valid JSON of the known shapes");
            assert_eq!(fl.pairs, None, "{text}");
            assert!(fl.records.is_some(), "{text}");
        }
        // and JSON it does not know at all stays serde_json's
        assert!(scanned(br#"{"records": [[0, 1.5]]}"#).is_none());
        assert!(scanned(br#"{"records": [[0, 1],]}"#).is_none());
        assert!(scanned(br#"{"records": [[0, 1]], "records": []}"#).is_none());
    }

    #[test]
    fn the_rest_is_left_to_serde() {
        for text in [
            r#"{"index": 1.5}"#,
            r#"{"index": 1e3}"#,
            r#"{"index": 01}"#,
            r#"{"index": -}"#,
            r#"{"process": "a\"b"}"#,
            r#"{"ind\u0065x": 1}"#,
            "{\"process\": \"a\tb\"}",
            r#"{"value": {"a": 1}}"#,
            r#"{"index": 1, "index": 2}"#,
            r#"{"index": 1,}"#,
            r#"{"index": 1} x"#,
            r#"{"index": nul}"#,
            r#"{"index": truex}"#,
            r#"{"value": [[[[[[[[[[1]]]]]]]]]]}"#,
            r#"[1]"#,
            r#"{"index": 1"#,
        ] {
            assert!(scanned(text.as_bytes()).is_none(), "{text}");
        }
        // a field the checkers do not read may repeat, as serde_json lets it
        assert!(scanned(br#"{"x": 1, "x": 2}"#).is_some());
    }

    #[test]
    fn strings_are_scanned_eight_bytes_at_a_time_and_stop_where_a_byte_does() {
        // each byte that ends a plain run, at each position of a long string and its tail
        for at in 0..20 {
            for stop in [b'"', b'\\', 0x00, 0x1f, 0x7f, 0x80, 0xc3, 0xff] {
                let mut line = vec![b'a'; 24];
                line[at] = stop;
                let mut c = Cursor { b: &line, i: 0 };
                c.skip_plain();
                // 0x7f (DEL) is plain text to JSON: it does not stop the run
                let want = if stop == 0x7f { 24 } else { at };
                assert_eq!(c.i, want, "byte {stop:#x} at {at}");
            }
        }
        // a flag past the first stop does not move it (a borrow runs upward only)
        assert_eq!(
            stops(u64::from_le_bytes(*b"a\"\x00\x01\"\\b\x80")).trailing_zeros(),
            15
        );
        let mut c = Cursor {
            b: "\"abcdefghij\u{e9}klmnopq\"".as_bytes(),
            i: 0,
        };
        assert_eq!(c.string(), Some("abcdefghij\u{e9}klmnopq".as_bytes()));
        for bad in [
            &b"\"abcdefghi\\jkl\""[..],
            b"\"abcdefghijk\nl\"",
            b"\"abcdefghijk\xe9l\"",
            b"\"abc",
        ] {
            let mut c = Cursor { b: bad, i: 0 };
            assert_eq!(c.string(), None, "{bad:?}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_left_to_serde() {
        // UTF-8 is checked inside strings only: in a value, a key, a skipped field's string
        for text in [
            &b"{\"process\": \"c\xff\"}"[..],
            b"{\"x\xc3\": 1}",
            b"{\"other\": [\"\xed\xa0\x80\"]}",
            b"{\"index\": 1}\xff",
            b"{\"index\": 1\xc2\xa0}",
        ] {
            assert!(scanned(text).is_none(), "{text:?}");
        }
        // and valid UTF-8 past ASCII is taken, as it was
        assert_eq!(
            scanned("{\"process\": \"ç0\"}".as_bytes()).and_then(|f| f.process.map(|p| p.text)),
            Some("\"ç0\"")
        );
    }
}
