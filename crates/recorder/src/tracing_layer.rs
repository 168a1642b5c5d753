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

use std::fmt::Write as _;

use tracing_core::field::{Field, Visit};
use tracing_core::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use crate::callsites::Short;
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
        let key = [meta as *const Metadata<'static> as usize, 0, 0];
        let site = crate::callsites::site(key, || new_site(meta));
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
        let mut b = Short::new();
        let _ = write!(b, "{v:?}");
        self.0.put_str(b.as_str());
    }
}

/// A site for a callsite: the target as the section's name, and the message then each field.
fn new_site(meta: &'static Metadata<'static>) -> Site {
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
    Site::new(
        section,
        level,
        meta.file().unwrap_or("?"),
        meta.line().unwrap_or(0),
        Box::leak(fmt.into_boxed_str()),
    )
}
