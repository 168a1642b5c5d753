//! A `tracing` layer that records instead of formatting (feature `tracing`): an existing program
//! gets a flight recorder by one line.
//!
//! ```
//! use tracing_subscriber::prelude::*;
//! use spindle_recorder::{Level, Section};
//!
//! static TRACING: Section = Section::new("tracing", Level::Info);
//! tracing_subscriber::registry()
//!     .with(spindle_recorder::tracing_layer::RecorderLayer::new(&TRACING))
//!     .init();
//! tracing::info!(user = 42u64, ok = true, "logged in");
//! // dumps as: … INFO  <target> [tid thread] file:line: logged in user=42 ok=true
//! ```
//!
//! Each event's fields are recorded by value: integers, floats, `bool` and strings as they
//! are; the message and any field that `tracing` hands over only as `Debug` (format arguments,
//! `?value`) are formatted into the record's string space (cut to what fits) — `tracing` offers
//! them no other way. Each callsite becomes a recorder site the first time it fires: its target
//! is the section name in the dump, and its format is the message followed by `name={}` per
//! field. The layer's [`Section`] decides which levels are kept; the layer never disables an
//! event for the other layers of the subscriber.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::*};
use std::sync::Mutex;

use tracing_core::field::{Field, Visit};
use tracing_core::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use crate::{Encoder, Level, Section, Site};

/// The layer: `registry().with(RecorderLayer::new(&SECTION))`.
pub struct RecorderLayer {
    section: &'static Section,
}

impl RecorderLayer {
    /// Records the events at or above `section`'s level (changeable at run time).
    pub fn new(section: &'static Section) -> RecorderLayer {
        RecorderLayer { section }
    }
}

fn level_of(l: &tracing_core::Level) -> Level {
    match *l {
        tracing_core::Level::ERROR => Level::Error,
        tracing_core::Level::WARN => Level::Warn,
        tracing_core::Level::INFO => Level::Info,
        tracing_core::Level::DEBUG => Level::Debug,
        _ => Level::Trace,
    }
}

impl<S: Subscriber> Layer<S> for RecorderLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if !self.section.enabled(level_of(meta.level())) {
            return;
        }
        let site = site_for(meta);
        let mut fields = Fields(Encoder::new());
        event.record(&mut fields);
        crate::write(site, &fields.0);
    }
}

/// Encodes an event's fields, in the callsite's order (the site's format names them).
struct Fields(Encoder);

impl Visit for Fields {
    fn record_u64(&mut self, _: &Field, v: u64) {
        crate::Encode::encode(&v, &mut self.0);
    }
    fn record_i64(&mut self, _: &Field, v: i64) {
        crate::Encode::encode(&v, &mut self.0);
    }
    fn record_f64(&mut self, _: &Field, v: f64) {
        crate::Encode::encode(&v, &mut self.0);
    }
    fn record_bool(&mut self, _: &Field, v: bool) {
        crate::Encode::encode(&v, &mut self.0);
    }
    fn record_str(&mut self, _: &Field, v: &str) {
        self.0.put_str(v);
    }
    fn record_debug(&mut self, _: &Field, v: &dyn std::fmt::Debug) {
        // Formatted into a stack buffer no longer than what a record can hold.
        let mut b = Short::default();
        let _ = write!(b, "{v:?}");
        self.0.put_str(b.as_str());
    }
}

/// A string of at most [`crate::PAYLOAD`] bytes; what does not fit is dropped (at a
/// character boundary).
struct Short {
    buf: [u8; crate::PAYLOAD],
    len: usize,
}

impl Default for Short {
    fn default() -> Short {
        Short {
            buf: [0; crate::PAYLOAD],
            len: 0,
        }
    }
}

impl Short {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for Short {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let mut k = s.len().min(self.buf.len() - self.len);
        while k > 0 && !s.is_char_boundary(k) {
            k -= 1;
        }
        self.buf[self.len..self.len + k].copy_from_slice(&s.as_bytes()[..k]);
        self.len += k;
        Ok(())
    }
}

// --- callsite → site ------------------------------------------------------------------------

/// Sites by callsite address: an open-addressing table read with two loads per event, filled
/// under a lock the first time a callsite fires (a map behind the lock when it is full).
const TABLE: usize = 4096;
static KEYS: [AtomicUsize; TABLE] = [const { AtomicUsize::new(0) }; TABLE];
static SITES: [AtomicPtr<Site>; TABLE] = [const { AtomicPtr::new(std::ptr::null_mut()) }; TABLE];
static SLOW: Mutex<Option<HashMap<usize, &'static Site>>> = Mutex::new(None);

fn slot_of(key: usize) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) % TABLE
}

fn site_for(meta: &'static Metadata<'static>) -> &'static Site {
    let key = meta as *const Metadata<'static> as usize;
    let mut i = slot_of(key);
    for _ in 0..TABLE {
        match KEYS[i].load(Acquire) {
            k if k == key => {
                // SAFETY: SITES[i] was stored (a leaked, never freed Site) before KEYS[i]
                // (Release), which this Acquire load read.
                return unsafe { &*SITES[i].load(Relaxed) };
            }
            0 => break,
            _ => i = (i + 1) % TABLE,
        }
    }
    insert(meta, key)
}

#[cold]
fn insert(meta: &'static Metadata<'static>, key: usize) -> &'static Site {
    let mut slow = SLOW.lock().unwrap_or_else(|e| e.into_inner());
    let map = slow.get_or_insert_with(HashMap::new);
    if let Some(site) = map.get(&key) {
        return site;
    }
    let site = new_site(meta);
    map.insert(key, site);
    let mut i = slot_of(key);
    for _ in 0..TABLE {
        if KEYS[i].load(Relaxed) == 0 {
            SITES[i].store(site as *const Site as *mut Site, Relaxed);
            KEYS[i].store(key, Release);
            break;
        }
        i = (i + 1) % TABLE;
    }
    site
}

/// A site for a callsite: the target as the section's name, and the message then each field.
fn new_site(meta: &'static Metadata<'static>) -> &'static Site {
    let mut fmt = String::new();
    for f in meta.fields() {
        if !fmt.is_empty() {
            fmt.push(' ');
        }
        if f.name() == "message" {
            fmt.push_str("{}");
        } else {
            fmt.push_str(f.name());
            fmt.push_str("={}");
        }
    }
    let level = level_of(meta.level());
    let section: &'static Section = Box::leak(Box::new(Section::new(meta.target(), level)));
    Box::leak(Box::new(Site::new(
        section,
        level,
        meta.file().unwrap_or("?"),
        meta.line().unwrap_or(0),
        Box::leak(fmt.into_boxed_str()),
    )))
}
