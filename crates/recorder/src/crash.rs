//! The crash handler: on a panic, or on `SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE` or `SIGABRT`,
//! it writes the last records of every thread to a crash file opened in advance, then lets the
//! process die as it would have.
//!
//! What runs in the signal handler is async-signal-safe: loads from the recording's mapping,
//! buffers on the stack, integers printed by `spindle-fmt`, `write(2)`, `sigaction(2)` and
//! `raise(3)`, `clock_gettime` and `nanosleep`; no allocation and no lock (the scratch and the
//! stack it needs were allocated by [`install_handler`]). One dump at a time: a thread that
//! crashes during another's dump writes a line, waits for that dump to end, then dies.
//! After the dump the handler puts back the action that was there before (Rust's own
//! stack-overflow handler, or the default) and raises the signal again, so the process dies of
//! it — with a core dump where the system makes one.
//!
//! A `SIGKILL` (the OOM killer's signal) cannot be caught; a recording made with
//! [`install`](crate::install) survives it in its file instead.

use std::cell::UnsafeCell;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, Ordering::*};
use std::time::Duration;

use crate::dump::{walk, Line};

/// The signals the handler catches.
pub const SIGNALS: [i32; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// Records per thread the crash file gets (Arakoon dumped its last ~1 000 statements).
pub const LAST: u64 = 1000;

static FD: AtomicI32 = AtomicI32::new(-1);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The thread writing the crash file now (0: none). One dump at a time: a thread that crashes
/// meanwhile writes its head line, waits for the dump to end (at most [`WAIT`]), and only then
/// lets its signal end the process. A dump that ended frees it: a caught panic's dump does not
/// use up a later crash's.
static DUMPING: AtomicU32 = AtomicU32::new(0);
/// The thread whose panic was dumped last: its abort (panic=abort, or a panic while panicking)
/// then writes only its head line instead of the same records again.
static PANICKED: AtomicU32 = AtomicU32::new(0);
const WAIT: Duration = Duration::from_secs(10);

struct OldActions(UnsafeCell<[Option<libc::sigaction>; 5]>);
// SAFETY: written once by `install_handler` before any handler that reads it is installed
// (the `INSTALLED` flag keeps a second call out); read only by the handlers afterwards.
unsafe impl Sync for OldActions {}
static OLD: OldActions = OldActions(UnsafeCell::new([None; 5]));

/// The top of a stack allocated for the dump: a signal handler runs on the crashing thread's
/// alternate stack, a few KiB that the kernel's signal frame already partly fills, so the
/// dump switches to this one (one dump per process, so one stack).
static CRASH_STACK: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
const CRASH_STACK_BYTES: usize = 256 << 10;

/// Opens (creates, truncates) the crash file at `path` and installs the panic hook and the
/// signal handlers. Once per process; the recording is created if none was installed.
pub fn install_handler(path: impl AsRef<Path>) -> io::Result<()> {
    if INSTALLED.swap(true, AcqRel) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the crash handler is already installed",
        ));
    }
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path.as_ref(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    crate::recorder_or_default();
    let stack = Box::leak(vec![0u8; CRASH_STACK_BYTES].into_boxed_slice());
    // SAFETY: one past the end of the allocation, which is never freed.
    CRASH_STACK.store(unsafe { stack.as_mut_ptr().add(stack.len()) }, Release);
    FD.store(std::os::fd::IntoRawFd::into_raw_fd(fd), Release);

    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let tid = gettid();
        let head = format!(
            "spindle-recorder: panic in thread {tid}: {}\n",
            info.to_string().replace('\n', " ")
        );
        write_head(head.as_bytes());
        if dump(tid) {
            PANICKED.store(tid, Release);
        }
        previous(info);
    }));

    for (k, &sig) in SIGNALS.iter().enumerate() {
        // SAFETY: a zeroed sigaction is a valid value to fill in; `handler` has the
        // SA_SIGINFO signature; OLD[k] is read and stored before the handler is installed.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            (*OLD.0.get())[k] = Some(old);
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = handler as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            if libc::sigaction(sig, &act, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

fn gettid() -> u32 {
    rustix::thread::gettid().as_raw_nonzero().get() as u32
}

/// Writes the last records of every thread (from the panic hook, on the thread's own stack),
/// unless a dump is under way: then waits for it to end, which covers these records too.
/// Returns whether this call dumped.
fn dump(tid: u32) -> bool {
    match DUMPING.compare_exchange(0, tid, AcqRel, Acquire) {
        Ok(_) => {
            dump_records();
            DUMPING.store(0, Release);
            true
        }
        Err(t) if t == tid => false, // a panic inside our own dump
        Err(_) => {
            wait_for_dump();
            false
        }
    }
}

/// Sleeps in 1 ms steps until no dump is under way, at most [`WAIT`] (async-signal-safe:
/// clock_gettime and nanosleep).
fn wait_for_dump() {
    let start = std::time::Instant::now();
    while DUMPING.load(Acquire) != 0 && start.elapsed() < WAIT {
        let _ = rustix::thread::nanosleep(&rustix::thread::Timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        });
    }
}

extern "C" fn handler(sig: i32, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // This runs on the thread's alternate stack: a few KiB (Rust gives each thread one) of
    // which the kernel's signal frame already takes much. So the handler keeps almost nothing
    // on it and writes the crash file on a stack of its own, allocated in advance.
    let top = CRASH_STACK.load(Acquire);
    let tid = gettid();
    if sig == libc::SIGABRT && PANICKED.load(Acquire) == tid {
        write_head(b"spindle-recorder: SIGABRT after the panic above\n");
    } else if !top.is_null() {
        if DUMPING.compare_exchange(0, tid, AcqRel, Acquire).is_ok() {
            SIGNAL.store(sig, Relaxed);
            // SAFETY: `top` ends a 256 KiB allocation that only the thread owning DUMPING
            // uses (this one, until it stores 0); `signal_dump` takes nothing.
            unsafe { call_on_stack(top, signal_dump) };
            DUMPING.store(0, Release);
        } else {
            write_head(b"spindle-recorder: a fatal signal in another thread during the dump\n");
            wait_for_dump();
        }
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let sent = info.is_null() || unsafe { (*info).si_code } <= 0;
    let Some(k) = SIGNALS.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: OLD was filled before this handler was installed; sigaction and raise are
    // async-signal-safe.
    unsafe {
        if sent || sig == libc::SIGABRT {
            // Sent (kill, raise, abort): nothing recurs, so raise it again under the default
            // action; it is blocked until this handler returns, and then ends the process.
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            libc::raise(sig);
        } else if let Some(old) = &(*OLD.0.get())[k] {
            // A fault: the instruction runs again on return and faults again, this time
            // meeting the previous action (Rust's stack-overflow report, or the default).
            libc::sigaction(sig, old, std::ptr::null_mut());
        }
    }
}

static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The signal's head line, then the records: on the crash stack, DUMPING held.
extern "C" fn signal_dump() {
    let sig = SIGNAL.load(Relaxed);
    let mut head = Line::new();
    head.push(b"spindle-recorder: fatal signal ");
    head.u64(sig as u64);
    head.push(b" (");
    head.push(match sig {
        libc::SIGSEGV => b"SIGSEGV",
        libc::SIGBUS => b"SIGBUS",
        libc::SIGILL => b"SIGILL",
        libc::SIGFPE => b"SIGFPE",
        libc::SIGABRT => b"SIGABRT",
        _ => b"?",
    });
    head.push(b") in thread ");
    head.u64(u64::from(gettid()));
    head.end();
    write_head(head.bytes());
    dump_records();
}

/// Writes `head` (a line) to the crash file.
fn write_head(head: &[u8]) {
    let fd = FD.load(Acquire);
    if fd >= 0 {
        // SAFETY: the descriptor was opened by `install_handler` and is never closed.
        write_all(unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) }, head);
    }
}

/// Calls `f` with the stack pointer at `top` (aligned down to 16 bytes), then restores it.
///
/// # Safety
/// `top` must end a writable stack region large enough for `f`, which nothing else uses.
#[cfg(target_arch = "x86_64")]
unsafe fn call_on_stack(top: *mut u8, f: extern "C" fn()) {
    // SAFETY: the caller's contract; r12 is callee-saved, so it holds the old stack pointer
    // across the call; every caller-saved register is declared clobbered.
    unsafe {
        std::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "and rsp, -16",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            out("r12") _,
            clobber_abi("C"),
        );
    }
}

/// Calls `f` with the stack pointer at `top` (aligned down to 16 bytes), then restores it.
///
/// # Safety
/// `top` must end a writable stack region large enough for `f`, which nothing else uses.
#[cfg(target_arch = "aarch64")]
unsafe fn call_on_stack(top: *mut u8, f: extern "C" fn()) {
    // SAFETY: the caller's contract; x20 is callee-saved (x19 is reserved to the compiler), so
    // it holds the old stack pointer across the call; every caller-saved register, the link
    // register included, is declared clobbered by `clobber_abi`.
    unsafe {
        std::arch::asm!(
            "mov x20, sp",
            "and sp, {top}, #-16",
            "blr {f}",
            "mov sp, x20",
            top = in(reg) top,
            f = in(reg) f,
            out("x20") _,
            clobber_abi("C"),
        );
    }
}

/// Elsewhere the dump would have to run on the few KiB of the signal stack: it is left out,
/// and the crash file says so.
///
/// # Safety
/// None needed; `unsafe` only to match the other targets' signature.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn call_on_stack(_top: *mut u8, _f: extern "C" fn()) {
    write_head(b"spindle-recorder: no crash dump from a signal handler on this architecture\n");
}

/// The last [`LAST`] records of every thread, to the crash file.
fn dump_records() {
    let fd = FD.load(Acquire);
    if fd < 0 {
        return;
    }
    // SAFETY: the descriptor was opened by `install_handler` and is never closed.
    let fd = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
    let Some(rec) = crate::recorder() else { return };
    let Ok(mut scratch) = rec.crash_scratch.try_lock() else {
        return;
    };
    let (scratch, line) = &mut *scratch;
    let mut n = 0u64;
    let skipped = walk(&rec.view, LAST, scratch, |r| {
        line.clear();
        r.format(line);
        write_all(fd, line.bytes());
        n += 1;
    });
    line.clear();
    line.push(b"spindle-recorder: end of crash dump, ");
    line.u64(n);
    line.push(b" records, ");
    line.u64(skipped.slots);
    line.push(b" slots skipped");
    line.end();
    write_all(fd, line.bytes());
}

fn write_all(fd: rustix::fd::BorrowedFd<'_>, mut b: &[u8]) {
    while !b.is_empty() {
        match rustix::io::write(fd, b) {
            Ok(0) => return,
            Ok(n) => b = &b[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}
