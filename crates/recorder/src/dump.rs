//! Reading records back and formatting them: the same code for a live dump, the crash handler
//! (no allocation, no lock: only loads from the mapping, stack buffers and `write(2)`) and
//! `spindle recorder dump` on the file of a dead process.
//!
//! Records of all threads come out in time order: a merge of the rings by TSC, each ring
//! already in order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::encode::{decode, Arg, Level};
use crate::layout::{View, FREE, NAME, PAYLOAD, SITE_TEXT, TRUNCATED};

/// A line being built in a fixed buffer; what does not fit is cut (and ends with `…`).
pub(crate) struct Line {
    buf: [u8; Line::CAP],
    len: usize,
    cut: bool,
}

impl Line {
    pub(crate) const CAP: usize = 1024;

    pub(crate) fn new() -> Line {
        Line {
            buf: [0; Line::CAP],
            len: 0,
            cut: false,
        }
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.cut = false;
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub(crate) fn push(&mut self, b: &[u8]) {
        let room = Line::CAP - 4 - self.len; // keeps room for "…\n"
        if b.len() > room {
            self.buf[self.len..self.len + room].copy_from_slice(&b[..room]);
            self.len += room;
            self.cut = true;
        } else {
            self.buf[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
        }
    }

    pub(crate) fn u64(&mut self, x: u64) {
        let mut d = [0u8; spindle_fmt::raw::U64_LEN];
        let n = spindle_fmt::raw::write_u64(&mut d, x);
        self.push(&d[..n]);
    }

    /// `x` with at least `width` digits (zeros in front).
    pub(crate) fn u64_w(&mut self, x: u64, width: usize) {
        let mut d = [0u8; spindle_fmt::raw::U64_LEN];
        let n = spindle_fmt::raw::write_u64(&mut d, x);
        for _ in n..width {
            self.push(b"0");
        }
        self.push(&d[..n]);
    }

    pub(crate) fn i64(&mut self, x: i64) {
        if x < 0 {
            self.push(b"-");
        }
        self.u64(x.unsigned_abs());
    }

    /// A float without allocation: fixed point with up to 6 decimals (trailing zeros cut)
    /// below 1e9 (where that is exact: `x * 1e6` below 2^53), exponent form (`1.5e20`, up to 6
    /// decimals) from there.
    pub(crate) fn f64(&mut self, x: f64) {
        if x.is_nan() {
            return self.push(b"NaN");
        }
        if x.is_sign_negative() {
            self.push(b"-");
        }
        let a = x.abs();
        if a.is_infinite() {
            return self.push(b"inf");
        }
        if a >= 1e9 {
            let mut e = a.log10().floor() as i32;
            let mut m = a / 10f64.powi(e);
            if m >= 10.0 {
                m /= 10.0;
                e += 1;
            }
            self.f64(m);
            self.push(b"e");
            return self.i64(i64::from(e));
        }
        let scaled = (a * 1e6).round() as u64;
        let (int, mut frac) = (scaled / 1_000_000, scaled % 1_000_000);
        self.u64(int);
        self.push(b".");
        if frac == 0 {
            return self.push(b"0");
        }
        let mut width = 6;
        while frac % 10 == 0 {
            frac /= 10;
            width -= 1;
        }
        self.u64_w(frac, width);
    }

    pub(crate) fn char(&mut self, c: char) {
        let mut b = [0u8; 4];
        self.push(c.encode_utf8(&mut b).as_bytes());
    }

    pub(crate) fn arg(&mut self, a: Arg<'_>) {
        match a {
            Arg::U64(x) => self.u64(x),
            Arg::I64(x) => self.i64(x),
            Arg::F64(x) => self.f64(x),
            Arg::Bool(b) => self.push(if b { b"true" } else { b"false" }),
            Arg::Char(c) => self.char(c),
            Arg::Str(s) => self.push(s),
        }
    }

    /// Ends the line: `…` if anything was cut, then a newline.
    pub(crate) fn end(&mut self) {
        if self.cut {
            self.buf[self.len..self.len + 3].copy_from_slice("…".as_bytes());
            self.len += 3;
        }
        self.buf[self.len] = b'\n';
        self.len += 1;
    }

    /// UTC date and time of `ns` since the epoch: `2026-11-24T19:14:11.123456789Z`.
    pub(crate) fn time(&mut self, ns: u64) {
        let secs = ns / 1_000_000_000;
        let (y, m, d) = civil_from_days((secs / 86_400) as i64);
        let s = secs % 86_400;
        self.i64(y);
        self.push(b"-");
        self.u64_w(m, 2);
        self.push(b"-");
        self.u64_w(d, 2);
        self.push(b"T");
        self.u64_w(s / 3600, 2);
        self.push(b":");
        self.u64_w(s / 60 % 60, 2);
        self.push(b":");
        self.u64_w(s % 60, 2);
        self.push(b".");
        self.u64_w(ns % 1_000_000_000, 9);
        self.push(b"Z");
    }
}

/// Year, month, day of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u64, u64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Formats `fmt` with `args` into `out`: `{…}` takes the next argument (its spec is ignored),
/// `{{` and `}}` are braces. A placeholder without an argument prints `{?}`; arguments left
/// over are appended in brackets.
pub(crate) fn message(out: &mut Line, fmt: &[u8], payload: &[u8], len: usize, truncated: bool) {
    let mut args: [Option<Arg<'_>>; PAYLOAD / 2] = [None; PAYLOAD / 2];
    let mut n = 0;
    let whole = decode(payload, len, |a| {
        if n < args.len() {
            args[n] = Some(a);
            n += 1;
        }
    });
    let mut next = 0;
    let mut i = 0;
    while i < fmt.len() {
        match fmt[i] {
            b'{' if fmt.get(i + 1) == Some(&b'{') => {
                out.push(b"{");
                i += 2;
            }
            b'}' if fmt.get(i + 1) == Some(&b'}') => {
                out.push(b"}");
                i += 2;
            }
            b'{' => {
                let close = fmt[i..].iter().position(|&c| c == b'}');
                match close {
                    Some(k) => {
                        match args.get(next).copied().flatten() {
                            Some(a) => out.arg(a),
                            None if truncated || !whole => out.push("…".as_bytes()),
                            None => out.push(b"{?}"),
                        }
                        next += 1;
                        i += k + 1;
                    }
                    None => {
                        out.push(&fmt[i..]);
                        i = fmt.len();
                    }
                }
            }
            _ => {
                let run = fmt[i..]
                    .iter()
                    .position(|&c| c == b'{' || c == b'}')
                    .map_or(fmt.len() - i, |k| k.max(1));
                out.push(&fmt[i..i + run]);
                i += run;
            }
        }
    }
    if next < n {
        out.push(b" [");
        for (k, a) in args[next..n].iter().flatten().enumerate() {
            if k > 0 {
                out.push(b", ");
            }
            out.arg(*a);
        }
        out.push(b"]");
    }
}

/// One record, as the walk hands it out (borrowed from its buffers).
pub(crate) struct RecordRef<'a> {
    pub(crate) seq: u64,
    pub(crate) tsc: u64,
    pub(crate) wall_ns: u64,
    pub(crate) tid: u32,
    pub(crate) thread: &'a [u8],
    pub(crate) level: Option<Level>,
    pub(crate) section: &'a [u8],
    pub(crate) file: &'a [u8],
    pub(crate) line: u32,
    pub(crate) message: &'a [u8],
}

impl RecordRef<'_> {
    /// The record as one text line.
    pub(crate) fn format(&self, out: &mut Line) {
        out.time(self.wall_ns);
        out.push(b" ");
        let level = self.level.map_or("?", |l| l.name());
        out.push(level.as_bytes());
        for _ in level.len()..5 {
            out.push(b" ");
        }
        out.push(b" ");
        out.push(self.section);
        out.push(b" [");
        out.u64(u64::from(self.tid));
        if !self.thread.is_empty() {
            out.push(b" ");
            out.push(self.thread);
        }
        out.push(b"] ");
        out.push(self.file);
        out.push(b":");
        out.u64(u64::from(self.line));
        out.push(b": ");
        out.push(self.message);
        out.end();
    }
}

/// What a walk skipped: slots that did not hold the record expected (never written, damaged,
/// or overwritten while read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Slots skipped.
    pub slots: u64,
}

/// What a walk needs besides the recording, allocated by its caller (the crash handler's in
/// advance: a walk allocates nothing and keeps little on the stack, which in a signal handler
/// is a small alternate stack).
pub(crate) struct Scratch {
    /// Two words per ring.
    cursors: Vec<u64>,
    /// The rings' next records, oldest first: (TSC, ring), one entry per ring at most, so it
    /// never grows past the capacity allocated here.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    site: [u8; SITE_TEXT],
    msg: Line,
}

impl Scratch {
    pub(crate) fn new(rings: usize) -> Box<Scratch> {
        Box::new(Scratch {
            cursors: vec![0; 2 * rings],
            heap: BinaryHeap::with_capacity(rings),
            site: [0; SITE_TEXT],
            msg: Line::new(),
        })
    }
}

/// Calls `each` for the last `last` records of every ring (fewer if a ring holds fewer), in
/// time order.
pub(crate) fn walk(
    view: &View,
    last: u64,
    scratch: &mut Scratch,
    mut each: impl FnMut(&RecordRef<'_>),
) -> Skipped {
    let Scratch {
        cursors,
        heap,
        site,
        msg,
    } = scratch;
    let rings = view.geometry.ring_count as usize;
    let slots = u64::from(view.geometry.ring_slots);
    let half = rings.min(cursors.len() / 2);
    let (next, end) = cursors.split_at_mut(half);
    let rings = next.len();
    for r in 0..rings {
        if view.ring_state(r) == FREE {
            next[r] = 0;
            end[r] = 0;
            continue;
        }
        let h = view.head(r);
        end[r] = h;
        next[r] = h
            .saturating_sub(slots - 1)
            .max(h.saturating_sub(last))
            .max(view.start(r).min(h));
    }
    let mut skipped = Skipped::default();
    // Ring `r`'s next whole record from `next[r]` on (skipping and counting slots that do not
    // hold the record expected), as (TSC, words).
    let mut advance = |r: usize, next: &mut [u64]| -> Option<(u64, [u64; 8])> {
        while next[r] < end[r] {
            match view.read_slot(r, next[r]) {
                Some(w) => return Some((w[1], w)),
                None => {
                    skipped.slots += 1;
                    next[r] += 1;
                }
            }
        }
        None
    };
    heap.clear();
    for r in 0..rings {
        if let Some((tsc, _)) = advance(r, next) {
            heap.push(Reverse((tsc, r)));
        }
    }
    loop {
        // The ring whose next record is oldest: O(log rings) a record, not O(rings), for a
        // crash dump of hundreds of full rings.
        let Some(Reverse((tsc0, r))) = heap.pop() else {
            return skipped;
        };
        // Read again: a live writer may have overwritten it since (then it is skipped, and the
        // ring's next record goes back into the heap at its own time).
        let Some((tsc, w)) = advance(r, next) else {
            continue;
        };
        if tsc != tsc0 {
            heap.push(Reverse((tsc, r)));
            continue;
        }
        next[r] += 1;
        if let Some((tsc, _)) = advance(r, next) {
            heap.push(Reverse((tsc, r)));
        }
        let (tid, name) = view.ring_owner(r);
        let name_len = name.iter().position(|&c| c == 0).unwrap_or(NAME);
        let mut payload = [0u8; PAYLOAD];
        for (k, x) in w[3..8].iter().enumerate() {
            payload[8 * k..8 * k + 8].copy_from_slice(&x.to_le_bytes());
        }
        let id = w[0] as u32;
        let len = (w[0] >> 32) as u8 as usize;
        msg.clear();
        let text = id.checked_sub(1).and_then(|i| view.read_site(i, site));
        let (level, section, file, line) = match &text {
            Some(t) => {
                message(
                    msg,
                    &site[t.fmt.clone()],
                    &payload,
                    len,
                    w[0] & TRUNCATED != 0,
                );
                (
                    Level::from_u8(t.level),
                    &site[t.section.clone()],
                    &site[t.file.clone()],
                    t.line,
                )
            }
            None => {
                msg.push(b"(a call site missing from the recording's table) ");
                message(msg, b"", &payload, len, w[0] & TRUNCATED != 0);
                (None, &b"?"[..], &b"?"[..], 0)
            }
        };
        each(&RecordRef {
            seq: w[2],
            tsc: w[1],
            wall_ns: view.clock.wall_ns(w[1]),
            tid,
            thread: &name[..name_len],
            level,
            section,
            file,
            line,
            message: msg.bytes(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{Encode, Encoder};

    fn fmt(f: &str, args: &[&dyn Encode]) -> String {
        let mut e = Encoder::new();
        for a in args {
            a.encode(&mut e);
        }
        let mut l = Line::new();
        message(&mut l, f.as_bytes(), &e.bytes(), e.len, e.truncated);
        String::from_utf8(l.bytes().to_vec()).unwrap()
    }

    #[test]
    fn messages_format_like_rust_for_the_simple_cases() {
        assert_eq!(fmt("x = {} y = {:?}", &[&7u32, &-3i64]), "x = 7 y = -3");
        assert_eq!(fmt("{{}} {}", &[&true]), "{} true");
        assert_eq!(fmt("{} {}", &[&'é', &"ab"]), "é ab");
        assert_eq!(fmt("{} and {}", &[&1u8]), "1 and {?}");
        assert_eq!(fmt("only", &[&1u8, &2u8]), "only [1, 2]");
        assert_eq!(fmt("{}", &[&1.5f64]), "1.5");
        assert_eq!(fmt("{}", &[&-0.000001f64]), "-0.000001");
        assert_eq!(fmt("{}", &[&2.0f32]), "2.0");
        assert_eq!(fmt("{}", &[&f64::NAN]), "NaN");
        assert_eq!(fmt("{}", &[&1e20f64]), "1.0e20");
        assert_eq!(fmt("{}", &[&2e13f64]), "2.0e13");
        assert_eq!(fmt("{}", &[&-1.5e300f64]), "-1.5e300");
        assert_eq!(fmt("{}", &[&999_999_999.25f64]), "999999999.25");
        assert_eq!(fmt("{}", &[&1_234_567_890.0f64]), "1.234568e9");
        assert_eq!(
            fmt("{} {}", &[&u64::MAX, &i64::MIN]),
            "18446744073709551615 -9223372036854775808"
        );
        // Five u64s do not fit in 40 bytes: the fifth is cut.
        let five = fmt("{} {} {} {} {}", &[&1u64, &2u64, &3u64, &4u64, &5u64]);
        assert_eq!(five, "1 2 3 4 …");
        let long = "x".repeat(100);
        let s = fmt("{}", &[&long.as_str()]);
        assert_eq!(s.len(), 38, "a string is cut to what fits: {s}");
    }

    #[test]
    fn dates_are_utc() {
        let mut l = Line::new();
        l.time(0);
        l.push(b" ");
        l.time(1_764_011_651_123_456_789);
        assert_eq!(
            std::str::from_utf8(l.bytes()).unwrap(),
            "1970-01-01T00:00:00.000000000Z 2025-11-24T19:14:11.123456789Z"
        );
    }
}
