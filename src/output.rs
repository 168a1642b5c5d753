//! Printing results: JSON for machines, sentences for people — without a panic when the
//! output cannot be written.
//!
//! `println!` panics when standard output cannot be written (a full disk, a closed
//! descriptor, an I/O error), which would end a command with exit 101 and lose a verdict
//! already measured. The binary's text goes through `outln!` and `out!` (standard output)
//! and `errln!` and `err!` (standard error) instead. When standard output fails, the text
//! goes to standard error, with one note saying so, and the command ends with exit 4
//! ([`stdout_failed`], read by `main`): the result is still shown, and a script sees that its
//! output is missing. (The JSON documents of `wal`, `recorder` and `alloc replay` are written
//! to standard output directly; a failure there is reported, exit 4.) A closed pipe
//! (`spindle … | head`) ends the program by `SIGPIPE`, as for other tools (see `main`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use serde::Serialize;

/// Set once standard output could not be written: the rest goes to standard error.
static STDOUT_FAILED: AtomicBool = AtomicBool::new(false);

/// Writes `args` to standard output, or, once that has failed, to standard error.
pub fn write_out(args: std::fmt::Arguments<'_>) {
    if !STDOUT_FAILED.load(Relaxed) {
        let mut o = std::io::stdout().lock();
        match o.write_fmt(args).and_then(|()| o.flush()) {
            Ok(()) => return,
            Err(e) => {
                STDOUT_FAILED.store(true, Relaxed);
                write_err(format_args!(
                    "spindle: cannot write to standard output ({e}); the output follows here\n"
                ));
            }
        }
    }
    write_err(args);
}

/// Writes `args` to standard error; nothing more can be done if that fails too.
pub fn write_err(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Whether standard output failed during the command (it then ends with exit 4).
pub fn stdout_failed() -> bool {
    STDOUT_FAILED.load(Relaxed)
}

/// `println!` that survives an unwritable standard output (see the module documentation).
macro_rules! outln {
    () => {
        $crate::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that survives an unwritable standard output.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*))
    };
}

/// `eprintln!` that does not panic when standard error cannot be written.
macro_rules! errln {
    () => {
        $crate::output::write_err(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that does not panic when standard error cannot be written.
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::output::write_err(format_args!($($arg)*))
    };
}

/// Pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) {
    outln!(
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
