//! Ctrl-C for the commands that measure (`compare`, `slo`, `lab`): the first SIGINT asks the
//! loop to stop at the next pair or run and print the verdict so far (every interval Spindle
//! prints stays valid at any stopping time, so what was measured is worth printing; the lab
//! writes its report); a second one ends the process at once.

use std::sync::atomic::{AtomicBool, Ordering};

/// Exit code after an interruption: 128 + SIGINT, as shells report a process killed by Ctrl-C,
/// so that a CI script cannot mistake a cancelled comparison for a verdict.
pub const INTERRUPTED: u8 = 130;

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_signal: i32) {
    extern "C" {
        fn _exit(code: i32) -> !;
    }
    // Only async-signal-safe work here: an atomic swap, and _exit on the second Ctrl-C.
    if REQUESTED.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe and ends the process without running anything else.
        unsafe { _exit(i32::from(INTERRUPTED)) }
    }
}

/// Routes SIGINT to the flag instead of killing the process.
pub fn install() {
    extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
    }
    const SIGINT: i32 = 2;
    // SAFETY: `signal` is the C library's; the handler only touches an atomic and calls _exit.
    unsafe {
        signal(SIGINT, on_sigint as extern "C" fn(i32) as usize);
    }
}

/// Whether the user pressed Ctrl-C.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
