//! What a record holds: its call site (static: format string, file, line, section, level) and
//! its arguments by value, encoded into the slot's 40 payload bytes.
//!
//! Payload: a sequence of `tag, value` — integers and floats as 8 bytes, `bool` as 1, `char`
//! as 4, strings as a length byte and their bytes (cut to what fits, at a character boundary).
//! An argument that does not fit at all sets the record's `TRUNCATED` flag (the dump shows
//! `…` in its place).

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};

use crate::layout::PAYLOAD;

pub(crate) const TAG_U64: u8 = 1;
pub(crate) const TAG_I64: u8 = 2;
pub(crate) const TAG_F64: u8 = 3;
pub(crate) const TAG_BOOL: u8 = 4;
pub(crate) const TAG_CHAR: u8 = 5;
pub(crate) const TAG_STR: u8 = 6;

/// How much a record matters, most important first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Level {
    /// Something failed.
    Error = 1,
    /// Something looks wrong.
    Warn = 2,
    /// What the program does, at the grain of requests.
    Info = 3,
    /// Details for whoever debugs it.
    Debug = 4,
    /// Everything.
    Trace = 5,
}

impl Level {
    /// The level's name, upper case, five characters at most.
    pub const fn name(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        }
    }

    pub(crate) fn from_u8(x: u8) -> Option<Level> {
        Some(match x {
            1 => Level::Error,
            2 => Level::Warn,
            3 => Level::Info,
            4 => Level::Debug,
            5 => Level::Trace,
            _ => return None,
        })
    }
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Level, String> {
        match s.to_ascii_lowercase().as_str() {
            "error" => Ok(Level::Error),
            "warn" | "warning" => Ok(Level::Warn),
            "info" => Ok(Level::Info),
            "debug" => Ok(Level::Debug),
            "trace" => Ok(Level::Trace),
            _ => Err(format!(
                "unknown level {s:?} (error, warn, info, debug or trace)"
            )),
        }
    }
}

/// A log section (Arakoon's log sections): a name and the least important level it records,
/// changeable at run time. Declare one as a `static`:
///
/// ```
/// use spindle_recorder::{Level, Section};
/// static NET: Section = Section::new("net", Level::Info);
/// NET.set_level(Level::Debug);
/// assert!(NET.enabled(Level::Debug));
/// ```
pub struct Section {
    name: &'static str,
    level: AtomicU8,
}

impl Section {
    /// A section that records `level` and anything more important.
    pub const fn new(name: &'static str, level: Level) -> Section {
        Section {
            name,
            level: AtomicU8::new(level as u8),
        }
    }

    /// The section's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Record `level` and anything more important from now on.
    pub fn set_level(&self, level: Level) {
        self.level.store(level as u8, Relaxed);
    }

    /// Records nothing from now on (not even errors).
    pub fn silence(&self) {
        self.level.store(0, Relaxed);
    }

    /// The least important level recorded, `None` when silenced.
    pub fn level(&self) -> Option<Level> {
        Level::from_u8(self.level.load(Relaxed))
    }

    /// Whether a record at `level` is kept: one load and a compare, the whole cost of a record
    /// below the section's level.
    #[inline(always)]
    pub fn enabled(&self, level: Level) -> bool {
        level as u8 <= self.level.load(Relaxed)
    }
}

/// A call site of [`record!`](crate::record): written into the recording the first time it
/// records, so that records hold only its number.
pub struct Site {
    pub(crate) section: &'static Section,
    pub(crate) level: Level,
    pub(crate) file: &'static str,
    pub(crate) line: u32,
    pub(crate) fmt: &'static str,
    /// 0 until registered, then its index in the recording's site table plus one.
    pub(crate) id: AtomicU32,
}

impl Site {
    #[doc(hidden)]
    pub const fn new(
        section: &'static Section,
        level: Level,
        file: &'static str,
        line: u32,
        fmt: &'static str,
    ) -> Site {
        Site {
            section,
            level,
            file,
            line,
            fmt,
            id: AtomicU32::new(0),
        }
    }
}

/// A record's arguments, encoded before the record is written.
///
/// The payload is kept as the slot's five words (byte `i` of the payload is byte `i % 8` of
/// word `i / 8`, little-endian), not as bytes: where the arguments' sizes are known at compile
/// time — every [`record!`](crate::record) of numbers — the words are built in registers. A
/// byte buffer of unaligned tagged values read back as words would make every record wait
/// for its stores to reach the cache (a load that spans two stores cannot be forwarded).
pub struct Encoder {
    pub(crate) words: [u64; PAYLOAD / 8],
    pub(crate) len: usize,
    pub(crate) truncated: bool,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    #[doc(hidden)]
    #[inline(always)]
    pub const fn new() -> Encoder {
        Encoder {
            words: [0; PAYLOAD / 8],
            len: 0,
            truncated: false,
        }
    }

    /// Appends a tag and `bytes`, or marks the record truncated if they do not fit.
    #[inline(always)]
    pub fn put(&mut self, tag: u8, bytes: &[u8]) {
        let n = 1 + bytes.len();
        if self.len + n > PAYLOAD {
            self.truncated = true;
            return;
        }
        if bytes.len() <= 8 {
            // Tag and value as one little-endian number of at most 9 bytes, ORed into the
            // (zeroed) words it spans: at most two.
            let mut v = [0u8; 8];
            v[..bytes.len()].copy_from_slice(bytes);
            let x =
                (u128::from(tag) | u128::from(u64::from_le_bytes(v)) << 8) << (self.len % 8 * 8);
            let w = self.len / 8;
            self.words[w] |= x as u64;
            if w + 1 < self.words.len() {
                self.words[w + 1] |= (x >> 64) as u64;
            }
        } else {
            let mut b = self.bytes();
            b[self.len] = tag;
            b[self.len + 1..self.len + n].copy_from_slice(bytes);
            self.set_bytes(b);
        }
        self.len += n;
    }

    /// Appends a string, cut at a character boundary to what fits (a length byte first).
    #[inline]
    pub fn put_str(&mut self, s: &str) {
        let room = PAYLOAD.saturating_sub(self.len + 2);
        if room == 0 && !s.is_empty() || self.len + 2 > PAYLOAD {
            self.truncated = true;
            return;
        }
        let mut k = s.len().min(room).min(255);
        while k > 0 && !s.is_char_boundary(k) {
            k -= 1;
        }
        if k < s.len() {
            self.truncated = true;
        }
        let mut b = self.bytes();
        b[self.len] = TAG_STR;
        b[self.len + 1] = k as u8;
        b[self.len + 2..self.len + 2 + k].copy_from_slice(&s.as_bytes()[..k]);
        self.set_bytes(b);
        self.len += 2 + k;
    }

    /// The payload as bytes.
    pub(crate) fn bytes(&self) -> [u8; PAYLOAD] {
        let mut b = [0u8; PAYLOAD];
        for (k, w) in self.words.iter().enumerate() {
            b[8 * k..8 * k + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn set_bytes(&mut self, b: [u8; PAYLOAD]) {
        for (k, w) in self.words.iter_mut().enumerate() {
            *w = u64::from_le_bytes(b[8 * k..8 * k + 8].try_into().unwrap());
        }
    }

    /// The payload as the slot's five words.
    #[inline(always)]
    pub(crate) fn words(&self) -> [u64; 5] {
        self.words
    }
}

/// A value a record can hold: encoded by value when recorded, formatted only when dumped.
/// Implemented for integers, floats, `bool`, `char` and strings (copied, up to what fits in a
/// record); implement it for a `Copy` type of yours by encoding its fields.
pub trait Encode {
    /// Appends the value to `out`.
    fn encode(&self, out: &mut Encoder);
}

macro_rules! encode_as {
    ($tag:expr, $as:ty: $($t:ty),*) => {$(
        impl Encode for $t {
            #[inline(always)]
            fn encode(&self, out: &mut Encoder) {
                out.put($tag, &(*self as $as).to_le_bytes());
            }
        }
    )*};
}
encode_as!(TAG_U64, u64: u8, u16, u32, u64, usize);
encode_as!(TAG_I64, i64: i8, i16, i32, i64, isize);
encode_as!(TAG_F64, f64: f32, f64);

impl Encode for bool {
    #[inline(always)]
    fn encode(&self, out: &mut Encoder) {
        out.put(TAG_BOOL, &[u8::from(*self)]);
    }
}

impl Encode for char {
    #[inline(always)]
    fn encode(&self, out: &mut Encoder) {
        out.put(TAG_CHAR, &u32::from(*self).to_le_bytes());
    }
}

impl Encode for str {
    #[inline]
    fn encode(&self, out: &mut Encoder) {
        out.put_str(self);
    }
}

impl Encode for String {
    #[inline]
    fn encode(&self, out: &mut Encoder) {
        out.put_str(self);
    }
}

impl<T: Encode + ?Sized> Encode for &T {
    #[inline(always)]
    fn encode(&self, out: &mut Encoder) {
        (**self).encode(out);
    }
}

/// One decoded argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arg<'a> {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Char(char),
    Str(&'a [u8]),
}

/// Decodes the arguments of a payload; stops at the first malformed one (returns `false`
/// then).
pub(crate) fn decode<'a>(payload: &'a [u8], len: usize, mut each: impl FnMut(Arg<'a>)) -> bool {
    let p = &payload[..len.min(payload.len())];
    let mut i = 0;
    while i < p.len() {
        let tag = p[i];
        i += 1;
        let take = |i: usize, n: usize| p.get(i..i + n);
        let arg = match tag {
            TAG_U64 | TAG_I64 | TAG_F64 => {
                let Some(b) = take(i, 8) else { return false };
                i += 8;
                let x = u64::from_le_bytes(b.try_into().unwrap());
                match tag {
                    TAG_U64 => Arg::U64(x),
                    TAG_I64 => Arg::I64(x as i64),
                    _ => Arg::F64(f64::from_bits(x)),
                }
            }
            TAG_BOOL => {
                let Some(b) = take(i, 1) else { return false };
                i += 1;
                Arg::Bool(b[0] != 0)
            }
            TAG_CHAR => {
                let Some(b) = take(i, 4) else { return false };
                i += 4;
                match char::from_u32(u32::from_le_bytes(b.try_into().unwrap())) {
                    Some(c) => Arg::Char(c),
                    None => return false,
                }
            }
            TAG_STR => {
                let Some(&n) = p.get(i) else { return false };
                let Some(b) = take(i + 1, n as usize) else {
                    return false;
                };
                i += 1 + n as usize;
                Arg::Str(b)
            }
            _ => return false,
        };
        each(arg);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payload format written byte by byte, as the module header describes it.
    struct Reference {
        buf: [u8; PAYLOAD],
        len: usize,
        truncated: bool,
    }

    impl Reference {
        fn put(&mut self, tag: u8, bytes: &[u8]) {
            if self.len + 1 + bytes.len() > PAYLOAD {
                self.truncated = true;
                return;
            }
            self.buf[self.len] = tag;
            self.buf[self.len + 1..self.len + 1 + bytes.len()].copy_from_slice(bytes);
            self.len += 1 + bytes.len();
        }
    }

    #[test]
    fn words_hold_the_bytes_of_the_documented_format() {
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut e = Encoder::new();
            let mut r = Reference {
                buf: [0; PAYLOAD],
                len: 0,
                truncated: false,
            };
            for _ in 0..next() % 9 {
                let x = next();
                match x % 6 {
                    0 => {
                        x.encode(&mut e);
                        r.put(TAG_U64, &x.to_le_bytes());
                    }
                    1 => {
                        (x as i32).encode(&mut e);
                        r.put(TAG_I64, &i64::from(x as i32).to_le_bytes());
                    }
                    2 => {
                        (x & 1 == 1).encode(&mut e);
                        r.put(TAG_BOOL, &[(x & 1) as u8]);
                    }
                    3 => {
                        let c = char::from_u32((x % 0xD000) as u32).unwrap();
                        c.encode(&mut e);
                        r.put(TAG_CHAR, &u32::from(c).to_le_bytes());
                    }
                    4 => {
                        f64::from_bits(x).encode(&mut e);
                        r.put(TAG_F64, &x.to_le_bytes());
                    }
                    _ => {
                        // A string that fits: its length byte first.
                        let s = &"abcdefghijklmnop"[..(x % 12) as usize];
                        if r.len + 2 + s.len() <= PAYLOAD {
                            s.encode(&mut e);
                            r.put(TAG_STR, &[&[s.len() as u8], s.as_bytes()].concat());
                        }
                    }
                }
            }
            assert_eq!(e.bytes(), r.buf);
            assert_eq!((e.len, e.truncated), (r.len, r.truncated));
        }
    }
}
