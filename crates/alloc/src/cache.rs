//! The caches in front of the shared stacks: per CPU on restartable sequences where the
//! kernel and C library allow it, per thread otherwise.
//!
//! # Layout
//! One *slab* per cache: for each class, 128 words — the stack's length, then
//! [`SLOTS`](crate::classes::SLOTS) block addresses. Per-CPU slabs sit side by side in one
//! `MAP_NORESERVE` reservation, indexed by the thread's `mm_cid` (dense ids, Linux 6.3+) or
//! `cpu_id` from its `struct rseq`; pages of CPUs and classes never used are never touched.
//!
//! # Per-CPU operations (rseq)
//! ```text
//! pop(c):     i = index; i ≥ MAX_INDEX or cpu_id < 0: no slot
//!             s = slab(i) + c; n = s.len; n == 0: empty
//!             p = s.slot[n-1]; s.len = n - 1            (commit: the length store)
//! push(c, p): … n = s.len; n ≥ cap(c): full
//!             s.slot[n] = p; s.len = n + 1             (commit: the length store)
//! ```
//! The kernel restarts a sequence from the top if the thread is preempted, migrated or
//! signalled before its commit, so each runs as if alone on its CPU: the stack is owned by
//! whichever thread runs there. A push's slot store above the length is invisible until the
//! commit. Linearisation point: the commit store. The index and the slab are read inside the
//! sequence, so a migration before the commit restarts it on the new CPU's slab.
//!
//! # Which cache a thread uses
//! - **glibc**: glibc registered every thread's area; it is found at `fs:0 + __rseq_offset`
//!   without thread-local storage. A thread glibc could not register (`cpu_id < 0`) gets a
//!   thread cache.
//! - **own**: spindle-sync registers each thread's own area on first use. That first use
//!   may allocate (a thread-local destructor), so it runs under a per-thread guard and the
//!   allocations it makes go straight to the shared stacks.
//! - **thread**: no restartable sequences (or the slab reservation failed): each thread
//!   gets a slab of its own on first use, flushed to the shared stacks by a `pthread_key`
//!   destructor when the thread exits.
//!
//! `SPINDLE_ALLOC_CACHE=thread` forces thread caches. During the process's first allocation (the mode being decided) allocations take the
//! shared stacks directly.

use core::cell::Cell;
use core::sync::atomic::{AtomicIsize, AtomicU8, AtomicUsize, Ordering::*};

use spindle_sync::percpu::rseq::{self, Peek};

use crate::classes::{cache_capacity, CLASSES};
use crate::os;

/// Bytes of one class's stack in a slab (the length and the slots).
pub const CLASS_BYTES: usize = 128 * 8;
/// Bytes of one slab.
pub const SLAB_BYTES: usize = CLASSES * CLASS_BYTES;
/// Per-CPU slabs reserved: `mm_cid`s and CPU numbers at or above this use thread caches.
pub const MAX_INDEX: usize = 1024;

const UNDECIDED: u8 = 0;
const DECIDING: u8 = 1;
const GLIBC: u8 = 2;
const OWN: u8 = 3;
const THREAD: u8 = 4;

static MODE: AtomicU8 = AtomicU8::new(UNDECIDED);
static GLIBC_OFFSET: AtomicIsize = AtomicIsize::new(0);
static INDEX_FIELD: AtomicUsize = AtomicUsize::new(rseq::CPU_ID);
static SLABS: AtomicUsize = AtomicUsize::new(0);

/// What a cache operation did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Done: the popped block (0 for a push).
    Done(usize),
    /// The cache's stack is empty (pop) or full (push).
    Bounce,
    /// No cache now (the mode is being decided, or this thread is exiting).
    NoCache,
}

/// The cache mode in words, for statistics and the lab.
pub fn mode_name() -> &'static str {
    match MODE.load(Relaxed) {
        GLIBC => "per-CPU (rseq, glibc's registration)",
        OWN => "per-CPU (rseq, own registration)",
        THREAD => "per-thread (no restartable sequences)",
        _ => "not decided yet",
    }
}

#[cold]
#[inline(never)]
fn decide() -> u8 {
    if MODE
        .compare_exchange(UNDECIDED, DECIDING, Acquire, Acquire)
        .is_err()
    {
        // Another thread (or this one, re-entered) is deciding.
        return MODE.load(Acquire);
    }
    if forced_thread_mode() {
        MODE.store(THREAD, Release);
        return THREAD;
    }
    let slabs = os::reserve(MAX_INDEX * SLAB_BYTES);
    let p = rseq::registration();
    let mode = if slabs.is_null() {
        THREAD
    } else {
        SLABS.store(slabs as usize, Relaxed);
        INDEX_FIELD.store(spindle_sync::percpu::index_field(), Relaxed);
        match (p.registration, rseq::glibc_offset()) {
            (rseq::Registration::Glibc, Some(off)) => {
                GLIBC_OFFSET.store(off, Relaxed);
                GLIBC
            }
            (rseq::Registration::Own, _) => OWN,
            _ => THREAD,
        }
    };
    MODE.store(mode, Release);
    mode
}

/// `SPINDLE_ALLOC_CACHE=thread` in the environment: per-thread caches even where rseq works
/// (to compare, or to test the fallback).
fn forced_thread_mode() -> bool {
    extern "C" {
        fn getenv(name: *const core::ffi::c_char) -> *const core::ffi::c_char;
    }
    // SAFETY: getenv reads the environment without allocating; the string is copied at once.
    let v = unsafe { getenv(c"SPINDLE_ALLOC_CACHE".as_ptr()) };
    // SAFETY: a NUL-terminated string from getenv.
    !v.is_null() && unsafe { core::ffi::CStr::from_ptr(v) }.to_bytes() == b"thread"
}

thread_local! {
    /// This thread's own slab (thread mode, or a thread that has no rseq): 0 none yet,
    /// 1 exiting or being set up (no cache), else the slab.
    static THREAD_SLAB: Cell<usize> = const { Cell::new(0) };
    /// Set while this thread's rseq area is being registered (own mode).
    static REGISTERING: Cell<bool> = const { Cell::new(false) };
}

/// The rseq area of this thread in the current mode, or why there is none.
#[inline(always)]
fn area(mode: u8) -> Result<*mut u8, bool> {
    // Ok(area); Err(true): use the thread slab; Err(false): no cache now.
    match mode {
        GLIBC => {
            let tp: usize;
            // SAFETY: reads the TCB's self pointer at fs:0 (glibc on x86-64).
            unsafe {
                core::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp,
                    options(nostack, readonly, preserves_flags));
            }
            Ok(tp.wrapping_add_signed(GLIBC_OFFSET.load(Relaxed)) as *mut u8)
        }
        OWN => match rseq::peek_area() {
            Peek::Ready(a) => Ok(a),
            Peek::Fallback => Err(true),
            Peek::Untried => register(),
        },
        THREAD => Err(true),
        _ => {
            let m = decide();
            if m == DECIDING || m == UNDECIDED {
                Err(false)
            } else {
                area(m)
            }
        }
    }
}

#[cold]
#[inline(never)]
fn register() -> Result<*mut u8, bool> {
    let busy = REGISTERING.try_with(|r| r.replace(true)).unwrap_or(true);
    if busy {
        return Err(false);
    }
    let a = rseq::area();
    let _ = REGISTERING.try_with(|r| r.set(false));
    a.ok_or(true)
}

/// Pops a free block of class `c` from this thread's cache.
#[inline(always)]
pub fn pop(c: usize) -> Outcome {
    match area(MODE.load(Acquire)) {
        Ok(a) => {
            let base = SLABS.load(Relaxed) + c * CLASS_BYTES;
            // SAFETY: a registered area of this thread; the slabs' geometry.
            match unsafe { pop_rseq(a, base, INDEX_FIELD.load(Relaxed)) } {
                (DONE, p) => Outcome::Done(p),
                (BOUNCE, _) => Outcome::Bounce,
                _ => thread_pop(c),
            }
        }
        Err(true) => thread_pop(c),
        Err(false) => Outcome::NoCache,
    }
}

/// Pushes a free block of class `c` onto this thread's cache.
#[inline(always)]
pub fn push(c: usize, p: usize) -> Outcome {
    match area(MODE.load(Acquire)) {
        Ok(a) => {
            let base = SLABS.load(Relaxed) + c * CLASS_BYTES;
            let cap = cache_capacity(c);
            // SAFETY: as in pop.
            match unsafe { push_rseq(a, base, INDEX_FIELD.load(Relaxed), p, cap) } {
                DONE => Outcome::Done(0),
                BOUNCE => Outcome::Bounce,
                _ => thread_push(c, p),
            }
        }
        Err(true) => thread_push(c, p),
        Err(false) => Outcome::NoCache,
    }
}

const DONE: usize = 0;
const BOUNCE: usize = 1;
#[allow(dead_code)] // written by the sections' assembly (`mov eax, 2`)
const NO_SLOT: usize = 2;

/// # Safety
/// `area` must be this thread's registered (or glibc's) `struct rseq`; `base` the class's
/// offset into the per-CPU slabs.
#[inline(always)]
unsafe fn pop_rseq(area: *mut u8, base: usize, index: usize) -> (usize, usize) {
    let (status, value): (usize, usize);
    // SAFETY: the module's protocol: a restartable sequence whose only write is the commit
    // (the length); rax holds the descriptor, then the stack's address, then the status.
    unsafe {
        core::arch::asm!(
            "2:",
            "lea rax, [rip + 3f]",
            "mov qword ptr [{area} + {cs}], rax",
            "4:",
            "mov eax, dword ptr [{area} + {cpu}]",
            "test eax, eax",
            "js 7f",
            "mov eax, dword ptr [{area} + {index}]",
            "cmp rax, {n}",
            "jae 7f",
            "imul rax, rax, {stride}",
            "add rax, {base}",
            "mov rcx, qword ptr [rax]",
            "test rcx, rcx",
            "jz 9f",
            "mov rdx, qword ptr [rax + 8*rcx]",
            "sub rcx, 1",
            "mov qword ptr [rax], rcx",
            "5:",
            "xor eax, eax",
            "jmp 8f",
            "7:",
            "mov eax, 2",
            "jmp 8f",
            "9:",
            "mov eax, 1",
            "8:",
            ".pushsection __rseq_cs, \"aw\"",
            ".balign 32",
            "3:",
            ".long 0, 0",
            ".quad 4b, 5b - 4b, 6f",
            ".popsection",
            ".pushsection __rseq_failure, \"ax\"",
            ".byte 0x0f, 0xb9, 0x3d",
            ".long {sig}",
            "6:",
            "jmp 2b",
            ".popsection",
            area = in(reg) area,
            index = in(reg) index,
            base = in(reg) base,
            n = const MAX_INDEX,
            stride = const SLAB_BYTES,
            cpu = const rseq::CPU_ID,
            cs = const rseq::RSEQ_CS,
            sig = const rseq::SIGNATURE,
            out("rax") status,
            out("rcx") _,
            out("rdx") value,
            options(nostack),
        );
    }
    (status, value)
}

/// # Safety
/// As for [`pop_rseq`]; `cap` at most `SLOTS`.
#[inline(always)]
unsafe fn push_rseq(area: *mut u8, base: usize, index: usize, v: usize, cap: usize) -> usize {
    let status: usize;
    // SAFETY: as in pop_rseq; the slot store lies above the length, inside the class's
    // stack (length < cap <= SLOTS), and is not visible until the commit.
    unsafe {
        core::arch::asm!(
            "2:",
            "lea rax, [rip + 3f]",
            "mov qword ptr [{area} + {cs}], rax",
            "4:",
            "mov eax, dword ptr [{area} + {cpu}]",
            "test eax, eax",
            "js 7f",
            "mov eax, dword ptr [{area} + {index}]",
            "cmp rax, {n}",
            "jae 7f",
            "imul rax, rax, {stride}",
            "add rax, {base}",
            "mov rcx, qword ptr [rax]",
            "cmp rcx, {cap}",
            "jae 9f",
            "mov qword ptr [rax + 8*rcx + 8], {v}",
            "add rcx, 1",
            "mov qword ptr [rax], rcx",
            "5:",
            "xor eax, eax",
            "jmp 8f",
            "7:",
            "mov eax, 2",
            "jmp 8f",
            "9:",
            "mov eax, 1",
            "8:",
            ".pushsection __rseq_cs, \"aw\"",
            ".balign 32",
            "3:",
            ".long 0, 0",
            ".quad 4b, 5b - 4b, 6f",
            ".popsection",
            ".pushsection __rseq_failure, \"ax\"",
            ".byte 0x0f, 0xb9, 0x3d",
            ".long {sig}",
            "6:",
            "jmp 2b",
            ".popsection",
            area = in(reg) area,
            index = in(reg) index,
            base = in(reg) base,
            v = in(reg) v,
            cap = in(reg) cap,
            n = const MAX_INDEX,
            stride = const SLAB_BYTES,
            cpu = const rseq::CPU_ID,
            cs = const rseq::RSEQ_CS,
            sig = const rseq::SIGNATURE,
            out("rax") status,
            out("rcx") _,
            options(nostack),
        );
    }
    status
}

/// This thread's slab, made on first use; None while it cannot have one.
#[inline]
fn thread_slab() -> Option<usize> {
    match THREAD_SLAB.try_with(Cell::get) {
        Ok(0) => make_thread_slab(),
        Ok(1) | Err(_) => None,
        Ok(s) => Some(s),
    }
}

#[cold]
#[inline(never)]
fn make_thread_slab() -> Option<usize> {
    THREAD_SLAB.try_with(|c| c.set(1)).ok()?;
    let slab = os::reserve(SLAB_BYTES) as usize;
    if slab == 0 {
        return None; // stays 1: this thread uses the shared stacks
    }
    exit::watch(slab);
    let _ = THREAD_SLAB.try_with(|c| c.set(slab));
    Some(slab)
}

fn stack(slab: usize, c: usize) -> *mut usize {
    (slab + c * CLASS_BYTES) as *mut usize
}

#[cold]
fn thread_pop(c: usize) -> Outcome {
    let Some(slab) = thread_slab() else {
        return Outcome::NoCache;
    };
    let s = stack(slab, c);
    // SAFETY: this thread's own slab; the length is at most SLOTS.
    unsafe {
        let n = *s;
        if n == 0 {
            return Outcome::Bounce;
        }
        *s = n - 1;
        Outcome::Done(*s.add(n))
    }
}

#[cold]
fn thread_push(c: usize, p: usize) -> Outcome {
    let Some(slab) = thread_slab() else {
        return Outcome::NoCache;
    };
    let s = stack(slab, c);
    // SAFETY: as in thread_pop.
    unsafe {
        let n = *s;
        if n >= cache_capacity(c) {
            return Outcome::Bounce;
        }
        *s.add(n + 1) = p;
        *s = n + 1;
    }
    Outcome::Done(0)
}

/// Blocks of class `c` sitting in the per-CPU caches (a racy sum, for statistics).
pub fn cached(c: usize) -> usize {
    let slabs = SLABS.load(Relaxed);
    if slabs == 0 {
        return 0;
    }
    let mut n = 0;
    // Only indices the process can have used: mm_cids are below the thread count, CPU
    // numbers below the CPUs; reading untouched pages would fault them in, so stop at the
    // possible CPUs.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for i in 0..MAX_INDEX.min(cpus.next_power_of_two() * 4) {
        // SAFETY: a length word in the reservation; a racy read of a stack another CPU
        // may be changing (a statistic).
        n += unsafe { core::ptr::read_volatile(stack(slabs + i * SLAB_BYTES, c)) };
    }
    n
}

/// Flushing a thread's slab when it exits (thread mode).
mod exit {
    use core::ffi::c_void;
    use core::sync::atomic::{AtomicU32, Ordering::*};

    extern "C" {
        fn pthread_key_create(
            key: *mut u32,
            dtor: Option<unsafe extern "C" fn(*mut c_void)>,
        ) -> i32;
        fn pthread_setspecific(key: u32, value: *const c_void) -> i32;
    }

    const NO_KEY: u32 = u32::MAX;
    static KEY: AtomicU32 = AtomicU32::new(NO_KEY);

    unsafe extern "C" fn flush(slab: *mut c_void) {
        let _ = super::THREAD_SLAB.try_with(|c| c.set(1));
        crate::flush_slab(slab as usize);
        // SAFETY: the slab was this thread's and is no longer referenced.
        unsafe { crate::os::release(slab.cast(), super::SLAB_BYTES) };
    }

    /// Arranges for `slab` to be flushed when this thread exits.
    pub fn watch(slab: usize) {
        let mut key = KEY.load(Acquire);
        if key == NO_KEY {
            let mut k = 0u32;
            // SAFETY: creates a key with our destructor; racing threads may each create one
            // (a few keys wasted, all working).
            if unsafe { pthread_key_create(&mut k, Some(flush)) } != 0 {
                return;
            }
            key = match KEY.compare_exchange(NO_KEY, k, AcqRel, Acquire) {
                Ok(_) => k,
                Err(other) => other,
            };
        }
        // SAFETY: a valid key; the value is this thread's slab.
        unsafe { pthread_setspecific(key, slab as *const c_void) };
    }
}
