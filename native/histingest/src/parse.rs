//! One history line -> a typed op, exactly as `checkers/ingest.py` types it, or UNSURE.
//!
//! Every field is first captured as its raw JSON text, with what the line scanner learnt of
//! it on the way (fields.rs; serde_json validates the lines it leaves), then typed by hand, so that nothing is coerced: "10", 1.5 and true are not integers here
//! either. Where Python's typing and this one could differ (floats inside a nemesis value,
//! integers past 64 bits, duplicate keys), the line is UNSURE rather than guessed.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::fields;
use crate::text::Text;
use crate::Failure;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Typ {
    Invoke,
    Ok,
    Fail,
    Info,
}

impl Typ {
    pub fn name(self) -> &'static str {
        match self {
            Typ::Invoke => "invoke",
            Typ::Ok => "ok",
            Typ::Fail => "fail",
            Typ::Info => "info",
        }
    }
}

pub struct Op {
    pub line: u64,
    pub index: i64,
    pub time: i64,
    pub process: Text,
    pub typ: Typ,
    pub f: Text,
    pub partition: Option<i32>,
    pub value: Option<i64>,
    pub value_json: Option<String>,
    pub offset: Option<i64>,
    pub node: Option<Text>,
    pub epoch: Option<i64>,
    pub error: Option<Text>,
    pub hwm: Option<i64>,
    pub acks: Option<&'static str>,
    pub txn: Option<i64>,
    /// Some for an ok poll or final-poll: its [offset, value] pairs.
    pub records: Option<Vec<(i64, i64)>>,
}

pub enum Parsed {
    Op(Op),
    /// The file's last line, without a newline, is not JSON: perhaps a crashed run's torn tail.
    Torn(u64),
}

/// One field's value: its JSON text (trimmed; a present `null` is kept, as "null") and what
/// the scanner learnt of it on the way, so that nothing is read twice.
#[derive(Clone, Copy)]
pub struct Field<'a> {
    pub text: &'a str,
    pub kind: Kind,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Null,
    /// A plain JSON integer that fits 64 bits, as Python's int (`plain_int`).
    Int(i64),
    /// A string without escapes: its text is the quotes and the bytes between them.
    Str,
    /// Anything else (a boolean, an array, an integer past 64 bits, an escaped string, ...).
    Other,
}

impl<'a> Field<'a> {
    /// A value's raw JSON text as serde_json captured it, classified as the scanner would.
    fn classify(raw: &'a str) -> Field<'a> {
        let text = raw.trim();
        let kind = if text == "null" {
            Kind::Null
        } else if let Some(i) = plain_int(text) {
            Kind::Int(i)
        } else if text.starts_with('"') && !text.contains('\\') {
            Kind::Str
        } else {
            Kind::Other
        };
        Field { text, kind }
    }

    /// The text between the quotes of a string without escapes.
    fn unquoted(&self) -> &'a str {
        &self.text[1..self.text.len() - 1]
    }
}

/// The fields the checkers read: from the line scanner (`fields.rs`) when the line is of the
/// shape it knows, else from serde_json.
#[derive(Default)]
pub struct Fields<'a> {
    pub index: Option<Field<'a>>,
    pub time: Option<Field<'a>>,
    pub process: Option<Field<'a>>,
    pub r#type: Option<Field<'a>>,
    pub f: Option<Field<'a>>,
    pub partition: Option<Field<'a>>,
    pub value: Option<Field<'a>>,
    pub offset: Option<Field<'a>>,
    pub node: Option<Field<'a>>,
    pub epoch: Option<Field<'a>>,
    pub error: Option<Field<'a>>,
    pub hwm: Option<Field<'a>>,
    pub acks: Option<Field<'a>>,
    pub records: Option<Field<'a>>,
    pub txn: Option<Field<'a>>,
    pub complete: Option<Field<'a>>,
    /// `records` read into its pairs by the scanner, when they are what `records` takes.
    pub pairs: Option<Vec<(i64, i64)>>,
}

/// The same fields as serde_json reads them (any line the scanner leaves to it).
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    index: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    time: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    process: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    r#type: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    f: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    partition: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    value: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    offset: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    node: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    epoch: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    hwm: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    acks: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    records: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    txn: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    complete: Option<&'a RawValue>,
}

impl<'a> Raw<'a> {
    fn fields(self) -> Fields<'a> {
        let g = |r: Option<&'a RawValue>| r.map(|r| Field::classify(r.get()));
        Fields {
            index: g(self.index),
            time: g(self.time),
            process: g(self.process),
            r#type: g(self.r#type),
            f: g(self.f),
            partition: g(self.partition),
            value: g(self.value),
            offset: g(self.offset),
            node: g(self.node),
            epoch: g(self.epoch),
            error: g(self.error),
            hwm: g(self.hwm),
            acks: g(self.acks),
            records: g(self.records),
            txn: g(self.txn),
            complete: g(self.complete),
            pairs: None,
        }
    }
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Python's bytes.strip() whitespace: a line of only these is skipped.
fn blank(line: &[u8]) -> bool {
    line.iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
}

/// Every line of a block of whole lines (the file's last may lack its newline).
pub fn parse_block(
    bytes: &[u8],
    first_line: u64,
    max_partition: i64,
) -> Result<Vec<Parsed>, Failure> {
    let mut out = Vec::with_capacity(bytes.len() / 128 + 1);
    let mut line = first_line;
    let mut rest = bytes;
    while !rest.is_empty() {
        let (raw, next, newline) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], &rest[i + 1..], true),
            None => (rest, &rest[rest.len()..], false),
        };
        rest = next;
        if !blank(raw) {
            match parse_line(raw, line, max_partition) {
                Ok(op) => out.push(Parsed::Op(op)),
                Err(Bad::Json(_)) if !newline => out.push(Parsed::Torn(line)),
                Err(Bad::Json(why)) | Err(Bad::Line(why)) => {
                    return Err(Failure::Unsure(format!("line {line}: {why}")))
                }
            }
        }
        line += 1;
    }
    Ok(out)
}

enum Bad {
    /// Not JSON as serde_json reads it (the exact path may still read it: its messages rule).
    Json(String),
    /// JSON, but not a line this reader vouches for.
    Line(String),
}

fn line_bad<T>(why: impl Into<String>) -> Result<T, Bad> {
    Err(Bad::Line(why.into()))
}

const READ_FS: [&str; 2] = ["poll", "final-poll"];
const NEMESIS: &str = "nemesis";

/// The fields the contract fixes for this kind of op (`_shape` in checkers/ingest.py): the
/// nemesis writes only `info` of start-<kind>, stop-<kind> or stop-all; a client's f is send,
/// poll or final-poll; a fail carries an error; a final-poll's `complete` is a boolean.
fn shape(process: &str, typ: Typ, f: &str, fl: &Fields) -> Result<(), Bad> {
    if process == NEMESIS {
        if typ != Typ::Info || !(f.starts_with("start-") || f.starts_with("stop-")) {
            return line_bad("a nemesis op that is not an info of start-/stop-");
        }
        return Ok(());
    }
    if f != "send" && !READ_FS.contains(&f) {
        return line_bad("a client's f is not send, poll or final-poll");
    }
    if typ == Typ::Fail && is_null(fl.error).is_none() {
        return line_bad("a fail without an error");
    }
    let complete = is_null(fl.complete);
    if f == "final-poll" && complete.is_some_and(|c| c.text != "true" && c.text != "false") {
        return line_bad("'complete' is not a boolean");
    }
    Ok(())
}

/// A line's fields, into `fl`: the scanner's, or serde_json's for a line the scanner leaves
/// (only then is the whole line checked as UTF-8: the scanner checks the strings it takes).
fn fields_of<'a>(raw: &'a [u8], fl: &mut Fields<'a>) -> Result<(), Bad> {
    if fields::scan(raw, fl).is_some() {
        return Ok(());
    }
    let text = std::str::from_utf8(raw).map_err(|e| Bad::Json(e.to_string()))?;
    *fl = serde_json::from_str::<Raw>(text)
        .map_err(|e| Bad::Json(e.to_string()))?
        .fields();
    Ok(())
}

/// A field the line must have (the message is built only for a line that lacks it).
fn required<T>(v: Option<T>, why: &'static str) -> Result<T, Bad> {
    v.ok_or_else(|| Bad::Line(why.into()))
}

fn parse_line(raw: &[u8], line: u64, max_partition: i64) -> Result<Op, Bad> {
    // serde would also take a JSON array as a struct; the exact path wants an object
    if raw.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\r')) != Some(&b'{') {
        return Err(Bad::Json("not a JSON object".into()));
    }
    let mut fl = Fields::default();
    fields_of(raw, &mut fl)?;
    let index = required(int(fl.index, "index")?, "missing 'index'")?;
    let time = required(int(fl.time, "time")?, "missing 'time'")?;
    if index < 0 || time < 0 {
        return line_bad("negative index or time");
    }
    let process = required(text_or_int(fl.process, "process")?, "missing 'process'")?;
    let typ = match is_null(fl.r#type) {
        Some(t) if t.kind == Kind::Str => match t.unquoted() {
            "invoke" => Typ::Invoke,
            "ok" => Typ::Ok,
            "fail" => Typ::Fail,
            "info" => Typ::Info,
            _ => return line_bad("'type' is not invoke, ok, fail or info"),
        },
        // an escaped or odd type: typed the long way, with its message
        _ => match string(fl.r#type, "type")?.as_deref() {
            Some("invoke") => Typ::Invoke,
            Some("ok") => Typ::Ok,
            Some("fail") => Typ::Fail,
            Some("info") => Typ::Info,
            _ => return line_bad("'type' is not invoke, ok, fail or info"),
        },
    };
    let f = required(
        string(fl.f, "f")?.filter(|f| !f.is_empty()),
        "'f' must be a string",
    )?;
    let is_send = f == "send";
    let is_read_f = READ_FS.contains(&f.as_str());
    let partition = int(fl.partition, "partition")?;
    let partition = match partition {
        None if is_send || is_read_f => return line_bad("missing 'partition'"),
        None => None,
        Some(p) if p < 0 || p > max_partition => return line_bad("partition out of range"),
        Some(p) => Some(p as i32),
    };
    let (value, value_json) = value(fl.value)?;
    // an integer past 64 bits is no send's value, not even a failed one's
    let huge = value_json
        .as_deref()
        .is_some_and(|j| j.starts_with(|c: char| c == '-' || c.is_ascii_digit()));
    if is_send && value.is_none() && (typ != Typ::Fail || huge) {
        return line_bad("send value must be a 64-bit integer");
    }
    let offset = int(fl.offset, "offset")?;
    let hwm = int(fl.hwm, "hwm")?;
    if offset.is_some_and(|o| o < 0) || hwm.is_some_and(|h| h < 0) {
        return line_bad("negative offset or hwm");
    }
    // an ack's offset, as a record's, is below i64::MAX: the log end after it fits 64 bits
    if is_send && offset == Some(i64::MAX) {
        return line_bad("a send's offset past the last one a log can hold");
    }
    let epoch = int(fl.epoch, "epoch")?;
    let node = text_or_int(fl.node, "node")?;
    let error = text_or_int(fl.error, "error")?;
    let acks = match fl.acks.map(|a| a.text) {
        None | Some("null") => None,
        Some("\"all\"" | "\"-1\"" | "-1") => Some("all"),
        Some("\"1\"" | "1") => Some("1"),
        Some("\"0\"" | "0") => Some("0"),
        Some(other) => return line_bad(format!("'acks' is {other}")),
    };
    let txn = int(fl.txn, "txn")?;
    shape(&process, typ, &f, &fl)?;
    let records = if typ == Typ::Ok && is_read_f {
        match is_null(fl.records) {
            None => return line_bad("an ok read without its records"),
            Some(raw) => Some(required(
                fl.pairs.take().or_else(|| records(raw.text)),
                "'records' are not [offset, value] pairs of 64-bit integers",
            )?),
        }
    } else {
        None
    };
    Ok(Op {
        line,
        index,
        time,
        process,
        typ,
        f,
        partition,
        value,
        value_json,
        offset,
        node,
        epoch,
        error,
        hwm,
        acks,
        txn,
        records,
    })
}

fn is_null(field: Option<Field>) -> Option<Field> {
    field.filter(|f| f.kind != Kind::Null)
}

/// A plain JSON integer that fits 64 bits, as Python's int.
fn plain_int(t: &str) -> Option<i64> {
    let digits = t.strip_prefix('-').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<i64>().ok()
}

fn int(field: Option<Field>, key: &str) -> Result<Option<i64>, Bad> {
    match field.map(|f| f.kind) {
        None | Some(Kind::Null) => Ok(None),
        Some(Kind::Int(i)) => Ok(Some(i)),
        Some(_) => Err(Bad::Line(format!("'{key}' is not a 64-bit integer"))),
    }
}

/// A JSON string, decoded (escapes as Python decodes them; a lone surrogate is refused).
fn decode(t: &str) -> Option<Text> {
    if !t.contains('\\') {
        return Some(Text::new(&t[1..t.len() - 1]));
    }
    serde_json::from_str::<String>(t)
        .ok()
        .map(|s| Text::new(&s))
}

fn string(field: Option<Field>, key: &str) -> Result<Option<Text>, Bad> {
    match is_null(field) {
        None => Ok(None),
        Some(f) if f.kind == Kind::Str => Ok(Some(Text::new(f.unquoted()))),
        Some(f) if f.text.starts_with('"') => decode(f.text)
            .map(Some)
            .ok_or_else(|| Bad::Line(format!("'{key}' is not text"))),
        Some(_) => line_bad(format!("'{key}' must be a string")),
    }
}

/// A string, or an integer as its decimal text (Python's str(v)).
fn text_or_int(field: Option<Field>, key: &str) -> Result<Option<Text>, Bad> {
    match is_null(field) {
        Some(Field {
            kind: Kind::Int(i), ..
        }) => Ok(Some(Text::int(i))),
        Some(f) if !f.text.starts_with('"') => {
            line_bad(format!("'{key}' must be a string or an integer"))
        }
        _ => string(field, key),
    }
}

/// (the integer value, or the value as compact JSON text as Python's json.dumps writes it).
fn value(field: Option<Field>) -> Result<(Option<i64>, Option<String>), Bad> {
    let Some(f) = is_null(field) else {
        return Ok((None, None));
    };
    if let Kind::Int(i) = f.kind {
        return Ok((Some(i), None));
    }
    let v: Value = serde_json::from_str(f.text).map_err(|e| Bad::Line(e.to_string()))?;
    if !integral(&v) {
        return line_bad("'value' holds a number Python would write otherwise");
    }
    Ok((None, Some(v.to_string())))
}

/// Whether json.dumps(json.loads(text)) writes every number of `v` as written: integers of
/// any size (numbers keep their text here: serde_json's arbitrary_precision), but not -0,
/// floats (Python writes them its own way) or integers past Python's 4300 digits.
fn integral(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            let t = n.to_string();
            t != "-0" && t.len() < 4000 && !t.contains(['.', 'e', 'E'])
        }
        Value::Array(a) => a.iter().all(integral),
        Value::Object(o) => o.values().all(integral),
        _ => true,
    }
}

/// `[[offset, value], ...]`: offsets in [0, 2^63 - 1) (the log end after a record fits 64
/// bits), values 64-bit; None for anything else.
fn records(t: &str) -> Option<Vec<(i64, i64)>> {
    let mut s = Scanner {
        b: t.as_bytes(),
        i: 0,
    };
    let mut out = Vec::with_capacity(t.len() / 12);
    s.expect(b'[')?;
    if s.peek()? == b']' {
        s.i += 1;
    } else {
        loop {
            s.expect(b'[')?;
            let offset = s.int()?;
            s.expect(b',')?;
            let value = s.int()?;
            s.expect(b']')?;
            if !(0..i64::MAX).contains(&offset) {
                return None;
            }
            out.push((offset, value));
            match s.next()? {
                b',' => continue,
                b']' => break,
                _ => return None,
            }
        }
    }
    s.ws();
    (s.i == s.b.len()).then_some(out)
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }
    fn expect(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }
    /// A plain integer (the JSON was validated already: no leading zeros to worry about).
    fn int(&mut self) -> Option<i64> {
        self.ws();
        let start = self.i;
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        let digits = self.i;
        while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        if self.i == digits {
            return None;
        }
        // a fraction or an exponent: not an integer
        if matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        std::str::from_utf8(&self.b[start..self.i])
            .ok()?
            .parse()
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_scan_pairs_and_refuse_the_rest() {
        assert_eq!(records("[]"), Some(vec![]));
        assert_eq!(
            records("[[0, 10], [1,-11] ]"),
            Some(vec![(0, 10), (1, -11)])
        );
        assert_eq!(records("[[0, 1.5]]"), None);
        assert_eq!(records("[[-1, 1]]"), None);
        assert_eq!(records("[[9223372036854775807, 1]]"), None);
        assert_eq!(
            records("[[9223372036854775806, 1]]"),
            Some(vec![(i64::MAX - 1, 1)])
        );
        assert_eq!(records("[[0, 1, 2]]"), None);
        assert_eq!(records("[[0, \"1\"]]"), None);
        assert_eq!(records("[[0, 99999999999999999999]]"), None);
        assert_eq!(records("[[0, 1],]"), None);
    }

    #[test]
    fn integers_are_plain() {
        assert_eq!(plain_int("-0"), Some(0));
        assert_eq!(plain_int("12"), Some(12));
        assert_eq!(plain_int("1.0"), None);
        assert_eq!(plain_int("1e3"), None);
        assert_eq!(plain_int("\"1\""), None);
        assert_eq!(plain_int("true"), None);
        assert_eq!(plain_int("9223372036854775808"), None);
    }
}
