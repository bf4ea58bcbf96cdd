//! A history line of the shapes the harness writes -> its fields' raw JSON text, in one
//! pass over the bytes and without serde_json (which was a third of the ingest's parsing).
//!
//! It knows a subset of JSON only: an object whose keys are strings without escapes, and
//! whose values are null, true, false, integers, strings without escapes, or arrays of
//! these (records are arrays of integer pairs). Anything else (an escape, a float, an
//! object value, a field given twice, text after the object, ...) gives None, and
//! serde_json reads the line instead: so what this takes is valid JSON, captured as
//! serde_json captures it, and every line it does not vouch for is serde_json's to take or
//! refuse, with serde_json's message.

use crate::parse::Fields;

/// Arrays nested deeper than this are left to serde_json.
const DEPTH: usize = 8;

/// The fields of `text`, one JSON object; None when serde_json must read it.
pub fn scan(text: &str) -> Option<Fields<'_>> {
    let mut s = Cursor {
        b: text.as_bytes(),
        i: 0,
    };
    let mut fl = Fields::default();
    s.ws();
    s.eat(b'{')?;
    s.ws();
    if s.peek() == Some(b'}') {
        s.i += 1;
    } else {
        loop {
            let key = s.string()?;
            s.ws();
            s.eat(b':')?;
            s.ws();
            let start = s.i;
            s.value(DEPTH)?;
            if let Some(slot) = slot(&mut fl, key) {
                // a field given twice is serde_json's error to give
                if slot.replace(&text[start..s.i]).is_some() {
                    return None;
                }
            }
            s.ws();
            match s.next()? {
                b',' => s.ws(),
                b'}' => break,
                _ => return None,
            }
        }
    }
    s.ws();
    (s.i == s.b.len()).then_some(fl)
}

/// Where a key's value goes; None for a key the checkers do not read (skipped, as serde's).
fn slot<'f, 'a>(fl: &'f mut Fields<'a>, key: &[u8]) -> Option<&'f mut Option<&'a str>> {
    Some(match key {
        b"index" => &mut fl.index,
        b"time" => &mut fl.time,
        b"process" => &mut fl.process,
        b"type" => &mut fl.r#type,
        b"f" => &mut fl.f,
        b"partition" => &mut fl.partition,
        b"value" => &mut fl.value,
        b"offset" => &mut fl.offset,
        b"node" => &mut fl.node,
        b"epoch" => &mut fl.epoch,
        b"error" => &mut fl.error,
        b"hwm" => &mut fl.hwm,
        b"acks" => &mut fl.acks,
        b"records" => &mut fl.records,
        b"txn" => &mut fl.txn,
        b"complete" => &mut fl.complete,
        _ => return None,
    })
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    /// JSON's whitespace, as serde_json skips it.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
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

    /// A string without escapes or control characters: its bytes between the quotes.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            match self.next()? {
                b'"' => return Some(&self.b[start..self.i - 1]),
                b'\\' | 0..=0x1f => return None,
                _ => {}
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// An integer as JSON writes one (no leading zeros); a fraction or exponent: None.
    fn integer(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => {
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
            }
            _ => return None,
        }
        match self.peek() {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(()),
        }
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.integer(),
            b'[' if depth > 0 => self.array(depth - 1),
            _ => None,
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Option<Vec<Option<&str>>> {
        scan(text).map(|f| vec![f.index, f.process, f.value, f.records, f.complete])
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
            assert!(scan(text).is_none(), "{text}");
        }
        // a field the checkers do not read may repeat, as serde_json lets it
        assert!(scan(r#"{"x": 1, "x": 2}"#).is_some());
    }
}
