//! The tracing layer: fields by value, the message, levels, one site per callsite.
#![cfg(feature = "tracing")]

use spindle_recorder::tracing_layer::RecorderLayer;
use spindle_recorder::{Level, Section};
use tracing_subscriber::prelude::*;

static TRACING: Section = Section::new("tracing", Level::Info);

fn dump() -> String {
    let mut out = Vec::new();
    spindle_recorder::dump(&mut out, usize::MAX).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn events_are_recorded_with_their_fields() {
    let sub = tracing_subscriber::registry().with(RecorderLayer::new(&TRACING));
    tracing::subscriber::with_default(sub, || {
        for i in 0..3u64 {
            tracing::info!(target: "app", user = i, ok = true, ratio = 0.5, name = "ann", "logged in {}", "now");
        }
        tracing::debug!(target: "app", "below the section's level");
        tracing::warn!(target: "db", err = ?std::io::ErrorKind::NotFound, "lookup failed");
        TRACING.set_level(Level::Debug);
        tracing::debug!(target: "app", "kept now");
    });
    let text = dump();
    let lines: Vec<&str> = text.lines().collect();
    let logins: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("logged in now"))
        .collect();
    assert_eq!(logins.len(), 3, "{text}");
    assert!(
        logins[2].ends_with(": logged in now user=2 ok=true ratio=0.5 name=ann"),
        "{text}"
    );
    assert!(logins[0].contains(" INFO  app ["), "{text}");
    assert!(!text.contains("below the section's level"), "{text}");
    assert!(
        text.contains(" WARN  db [") && text.contains("lookup failed err=NotFound"),
        "{text}"
    );
    assert!(
        text.contains(" DEBUG app [") && text.contains("kept now"),
        "{text}"
    );
}
