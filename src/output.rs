//! Printing results: JSON for machines, sentences for people.

use serde::Serialize;

/// Pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("results serialise")
    );
}

/// JSON when asked for, otherwise the human rendering.
pub fn emit<T: Serialize>(json: bool, report: &T, human: impl FnOnce(&T)) {
    if json {
        print_json(report);
    } else {
        human(report);
    }
}
