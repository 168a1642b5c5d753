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

/// A record's arguments, encoded on the caller's stack before the record is written.
pub struct Encoder {
    pub(crate) buf: [u8; PAYLOAD],
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
            buf: [0; PAYLOAD],
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
        self.buf[self.len] = tag;
        self.buf[self.len + 1..self.len + n].copy_from_slice(bytes);
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
        self.buf[self.len] = TAG_STR;
        self.buf[self.len + 1] = k as u8;
        self.buf[self.len + 2..self.len + 2 + k].copy_from_slice(&s.as_bytes()[..k]);
        self.len += 2 + k;
    }

    /// The payload as the slot's five words.
    #[inline(always)]
    pub(crate) fn words(&self) -> [u64; 5] {
        let mut w = [0u64; 5];
        for (k, x) in w.iter_mut().enumerate() {
            *x = u64::from_le_bytes(self.buf[8 * k..8 * k + 8].try_into().unwrap());
        }
        w
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
