//! The log adapter: messages with and without arguments, levels, targets as sections.
#![cfg(feature = "log")]

use spindle_recorder::{Level, Section};

static LOG: Section = Section::new("log", Level::Info);

#[test]
fn log_records_are_recorded() {
    spindle_recorder::log_adapter::init(&LOG).unwrap();
    for i in 0..3 {
        log::info!(target: "net", "accepted connection {} from {}", i, "10.0.0.7");
    }
    log::warn!("a static message");
    log::debug!("below the level");
    spindle_recorder::log_adapter::set_level(&LOG, Level::Debug);
    log::debug!("kept now {}", 1.5);
    let mut out = Vec::new();
    spindle_recorder::dump(&mut out, usize::MAX).unwrap();
    let text = String::from_utf8(out).unwrap();
    let accepted: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" INFO  net ["))
        .collect();
    assert_eq!(accepted.len(), 3, "{text}");
    assert!(
        accepted[2].ends_with(": accepted connection 2 from 10.0.0.7"),
        "{text}"
    );
    assert!(
        text.contains(" WARN  log_adapter [") && text.contains(": a static message"),
        "{text}"
    );
    assert!(!text.contains("below the level"), "{text}");
    assert!(text.contains("kept now 1.5"), "{text}");
}
