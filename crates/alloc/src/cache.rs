//! The caches in front of the shared stacks: per CPU on restartable sequences where the
//! kernel and C library allow it, per thread otherwise.
//!
//! # Layout
//! A *slab* per cache holds, for each class, a 32-byte record of four words:
//! - `list[0]`, `list[1]`: two free lists (Bonwick's *loaded* and *previous* magazines), each
//!   one word: the first block's address in the low 48 bits, the list's length in the high
//!   16; the blocks are chained through their first word, which holds the rest of the list
//!   in the same form (the next block, how many follow), so a pop installs it as it is.
//!   Frees go to `list[0]`; allocations take from `list[0]`, else from `list[1]`. (A fixed
//!   loaded list, rather than a selector word, spares both fast paths a dependent load.)
//! - `bump`: a run of never-used blocks carved from the class's span, as (address, count);
//! - `info`: the class's cache capacity in the high 16 bits and its block size in the low 32
//!   ([`info`]), so that the fast paths find both in the record's own cache line, not in
//!   tables of their own. A fresh record holds 0 there, which the fast paths read as full and
//!   without a run: the slow paths (allocation refill, free spill) fill it in first.
//!
//! Per-CPU slabs sit side by side in one `MAP_NORESERVE` reservation, indexed by the thread's
//! `mm_cid` (dense ids, Linux 6.3+) or `cpu_id` from its `struct rseq`.
//!
//! # Operations: every one constant time, every one a single committing store
//! ```text
//! pop(c):       l = list[0], or list[1] if that is empty, else the run (below)
//!               p = l.addr; l = p.link                              (commit)
//!   the run:    w = bump; w.count == 0 or info unset: empty
//!               bump = (w.addr + info.size, w.count - 1)  → w.addr (commit)
//! push(c, p):   w = list[0]; w >= info: full (w.count >= cap(c), or info unset)
//!               p.link = w;  list[0] = (p, w.count + 1)             (commit)
//! swap(c, off, old, new): word[off] == old: word[off] = new        (commit)
//! ```
//! Each runs as a restartable sequence: the kernel restarts it from the top if the thread is
//! preempted, migrated or signalled before the commit, so it acts as if alone on its CPU, and
//! the CPU's record belongs to whichever thread runs there. The index and the record are
//! read inside the sequence. Linearisation point: the commit. `push`'s link store goes into
//! the caller's own block before the commit (rewritten if restarted). `swap` lets the slow
//! paths (in Rust, reading the record without a sequence) change one word only if it still
//! holds what they read: taking a list (swapping it for 0: the taking thread then owns its
//! blocks), installing a list or a batch into an empty list word or a new run into `bump`.
//! A stale read only makes a `swap` fail (a miss, never a lost or doubled block: each list
//! word moves only through these commits, and a taken list is owned by one thread).
//!
//! The two lists make the slow paths rare in every pattern (Bonwick): an allocation that
//! finds `list[0]` empty takes from `list[1]`; a free that finds `list[0]` full moves it to
//! `list[1]` if that is empty (take, then install), and otherwise first hands `list[1]` to
//! the shared stack whole — one CAS, no walk. So at least `cap(c)` operations pass between
//! two visits to the shared stacks, and a visit is O(1).
//!
//! # Which cache a thread uses
//! - **glibc**: glibc registered every thread's area; it is found at `fs:0 + __rseq_offset`
//!   without thread-local storage. A thread glibc could not register (`cpu_id < 0`) gets a
//!   thread cache.
//! - **own**: spindle-sync registers each thread's own area on first use. That first use
//!   may allocate (a thread-local destructor), so it runs under a per-thread guard and the
//!   allocations it makes go straight to the shared stacks.
//! - **thread**: no restartable sequences (or the slab reservation failed): each thread
//!   gets a slab of its own on first use (the same operations without sequences), flushed
//!   to the shared stacks by a `pthread_key` destructor when the thread exits.
//!
//! On glibc's registration, when a thread that has taken a slow path exits, its key
//! destructor hands the two lists of every class in the record it exits on to the shared
//! stacks ([`watch_exit`]): records are indexed by `mm_cid`, and the next thread may get
//! another one.
//!
//! `SPINDLE_ALLOC_CACHE=thread` forces thread caches. During the process's first allocation
//! (the mode being decided) allocations take the shared stacks directly.

use core::cell::Cell;
use core::sync::atomic::Ordering::*;

use spindle_sync::percpu::rseq::{self, Peek};

use crate::classes::{cache_capacity, size_of, CLASSES};
use crate::hot::hot;
use crate::os;

/// Bytes of one class's record in a slab.
pub const RECORD: usize = 32;
/// Byte offsets in a record.
pub const LIST0: usize = 0;
/// See [`LIST0`].
pub const LIST1: usize = 8;
/// See [`LIST0`].
pub const BUMP: usize = 16;
/// See [`LIST0`].
pub const INFO: usize = 24;

/// The `info` word of class `c`'s records: its capacity in the high 16 bits, its block size
/// in the low 32. A list word (address below 2^48, count above) is at or above it exactly
/// when the list is full: at the capacity, a list's address is far above any block size.
pub const fn info(c: usize) -> usize {
    (cache_capacity(c) << 48) | size_of(c)
}
/// Bytes of one slab: a power of two (the index becomes a shift), at least the records.
pub const SLAB_BYTES: usize = (CLASSES * RECORD).next_power_of_two();
/// Per-CPU slabs reserved: `mm_cid`s and CPU numbers at or above this use thread caches.
pub const MAX_INDEX: usize = 1024;

/// The address in a packed (address, count) word.
#[inline(always)]
pub const fn addr(w: usize) -> usize {
    w & ((1 << 48) - 1)
}

/// The count in a packed word.
#[inline(always)]
pub const fn count(w: usize) -> usize {
    w >> 48
}

/// Packs an address and a count.
#[inline(always)]
pub const fn pack(a: usize, n: usize) -> usize {
    a | (n << 48)
}

const UNDECIDED: u8 = 0;
const DECIDING: u8 = 1;
const GLIBC: u8 = 2;
const OWN: u8 = 3;
const THREAD: u8 = 4;

/// What a cache operation did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Done: the block (pop, bump), or 0 (push, swap).
    Done(usize),
    /// Empty (pop, bump), full (push), or changed under us (swap).
    Bounce,
    /// No cache now (the mode is being decided, or this thread is exiting).
    NoCache,
}

/// The cache mode in words, for statistics and the lab.
pub fn mode_name() -> &'static str {
    match hot().mode.load(Relaxed) {
        GLIBC => "per-CPU (rseq, glibc's registration)",
        OWN => "per-CPU (rseq, own registration)",
        THREAD => "per-thread (no restartable sequences)",
        _ => "not decided yet",
    }
}

#[cold]
#[inline(never)]
fn decide() -> u8 {
    if hot()
        .mode
        .compare_exchange(UNDECIDED, DECIDING, Acquire, Acquire)
        .is_err()
    {
        // Another thread (or this one, re-entered) is deciding.
        return hot().mode.load(Acquire);
    }
    if forced_thread_mode() {
        hot().mode.store(THREAD, Release);
        return THREAD;
    }
    let slabs = os::reserve(MAX_INDEX * SLAB_BYTES);
    let p = rseq::registration();
    let mode = if slabs.is_null() {
        THREAD
    } else {
        hot().slabs.store(slabs as usize, Relaxed);
        hot()
            .index_field
            .store(spindle_sync::percpu::index_field(), Relaxed);
        match (p.registration, rseq::glibc_offset()) {
            (rseq::Registration::Glibc, Some(off)) => {
                hot().glibc_offset.store(off, Relaxed);
                if let Ok(off) = i32::try_from(off) {
                    let index = hot().index_field.load(Relaxed);
                    hot()
                        .fast_rseq
                        .store(off as u32 as usize | index << 32, Relaxed);
                    hot().fast_slabs.store(slabs as usize, Release);
                }
                GLIBC
            }
            (rseq::Registration::Own, _) => OWN,
            _ => THREAD,
        }
    };
    hot().mode.store(mode, Release);
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
    /// Whether this thread's exit has been arranged to flush its record's lists (glibc mode).
    static EXIT_WATCHED: Cell<bool> = const { Cell::new(false) };
}

/// Per-CPU caches on glibc's registration: arranges, once per thread, that when it exits the
/// two lists of every class in the record it then runs on go to the shared stacks
/// (`flush_lists`). A slab is indexed by `mm_cid`, and the next thread may well get another
/// id: without this, the blocks the exiting thread freed would sit in a record nobody uses
/// while that thread carves fresh memory. Called from the slow paths, so the fast paths pay
/// nothing; a thread that never leaves them is not watched (it carved nothing, and at most
/// one list per class of its frees stays behind). The own registration is not watched: its
/// thread-local area is gone before key destructors run. Thread caches have their own flush.
pub fn watch_exit() {
    if hot().mode.load(Relaxed) != GLIBC {
        return;
    }
    // Set before the key is set: pthread_setspecific may allocate, and land here again.
    if EXIT_WATCHED.try_with(|w| w.replace(true)).unwrap_or(true) {
        return;
    }
    exit::watch_lists();
}

/// The rseq area of this thread in the current mode, or why there is none.
#[inline(always)]
fn area(mode: u8) -> Result<*mut u8, bool> {
    // Ok(area); Err(true): use the thread slab; Err(false): no cache now.
    match mode {
        GLIBC => {
            let tp: usize;
            // SAFETY: reads the TCB's self pointer at fs:0 (glibc on x86-64).
            #[cfg(target_arch = "x86_64")]
            unsafe {
                core::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp,
                    options(nostack, readonly, preserves_flags));
            }
            // SAFETY: reads the thread pointer register, which glibc's `__rseq_offset` is
            // relative to on AArch64; no memory effects.
            #[cfg(target_arch = "aarch64")]
            unsafe {
                core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp,
                    options(nomem, nostack, preserves_flags));
            }
            Ok(tp.wrapping_add_signed(hot().glibc_offset.load(Relaxed)) as *mut u8)
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

const DONE: usize = 0;
const BOUNCE: usize = 1;
const NO_SLOT: usize = 2;

// The same five sequences for AArch64 (written for its registers and its rseq ABI).
#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
use aarch64::{pop_rseq, pop_rseq_fs, push_rseq, push_rseq_fs, swap_rseq};

/// A restartable sequence on the calling CPU's record of one class: the shared prologue
/// (arm `rseq_cs`, check the registration and the index, find the record in rax), the
/// operation's body (which ends with its commit store, or jumps to 9 for a bounce), the
/// shared epilogue (status in rax: 0 done, 1 bounce, 2 no slot; the last two out of line, so
/// that the fast path falls straight through) and the descriptor and abort handler
/// (signature, then restart from the top).
#[cfg(target_arch = "x86_64")]
macro_rules! rseq_op {
    ($seg:literal $area:expr, $index:expr, $base:expr; $($body:literal),+; $($operands:tt)*) => {{
        let status: usize;
        core::arch::asm!(
            "2:",
            "lea rax, [rip + 3f]",
            concat!("mov qword ptr ", $seg, "[{area} + {cs}], rax"),
            "4:",
            concat!("cmp dword ptr ", $seg, "[{area} + {cpu}], 0"),
            "jl 7f",
            concat!("mov eax, dword ptr ", $seg, "[{area} + {index}]"),
            "cmp rax, {n}",
            "jae 7f",
            "shl rax, {shift}",
            "add rax, {base}",
            $($body),+,
            "5:",
            "xor eax, eax",
            "8:",
            ".pushsection .text.unlikely.spindle_alloc, \"ax\"",
            "7:",
            "mov eax, 2",
            "jmp 8b",
            "9:",
            "mov eax, 1",
            "jmp 8b",
            ".popsection",
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
            area = in(reg) $area,
            index = in(reg) $index,
            base = in(reg) $base,
            n = const MAX_INDEX,
            shift = const SLAB_BYTES.trailing_zeros(),
            cpu = const rseq::CPU_ID,
            cs = const rseq::RSEQ_CS,
            sig = const rseq::SIGNATURE,
            out("rax") status,
            $($operands)*
            options(nostack),
        );
        status
    }};
}

/// Pop: the three branches (`list[0]`, else `list[1]`, else the run of never-used blocks)
/// end at the one commit store, the section's last instruction: r9 the word to write, rcx
/// its new value, rdx the block (r8 holds the mask of a packed word's address). `list[0]` is
/// the fast path, one taken branch to the pop at 22. The run moves to its next block by the
/// block size from `info` (0 there: not filled in yet, a bounce) and one fewer left.
#[cfg(target_arch = "x86_64")]
macro_rules! pop_asm {
    ($seg:literal $area:expr, $index:expr, $base:expr) => {{
        let p: usize;
        let s = rseq_op!($seg $area, $index, $base;
            "mov rcx, qword ptr [rax]",
            "mov r9, rax",
            "mov r8, 0xffffffffffff",
            "test rcx, rcx",
            "jnz 22f",
            // list[0] is empty: list[1].
            "lea r9, [rax + 8]",
            "mov rcx, qword ptr [r9]",
            "test rcx, rcx",
            "jnz 22f",
            // Both lists are empty: the run.
            "lea r9, [rax + 16]",
            "mov rcx, qword ptr [r9]",
            "mov rdx, rcx",
            "shr rdx, 48",
            "jz 9f",
            "mov r10d, dword ptr [rax + 24]",
            "test r10d, r10d",
            "jz 9f",
            "mov rdx, rcx",
            "and rdx, r8",
            "add rcx, r10",
            "mov r10, 0x1000000000000",
            "sub rcx, r10",
            "jmp 21f",
            "22:",
            "mov rdx, rcx",
            "and rdx, r8",
            "mov rcx, qword ptr [rdx]",
            "21:",
            "mov qword ptr [r9], rcx";
            out("r10") _, out("rcx") _, out("rdx") p, out("r8") _, out("r9") _,);
        (s, p)
    }};
}

/// Push: the link store (the list as it was) goes into the caller's block, then the commit:
/// the list word with its count's bits kept, plus `v + 2^48` (one more block, and `v` as the
/// address, since the old word's address bits were masked off).
/// A list is full when its word is at or above the record's `info` (see [`info`]).
#[cfg(target_arch = "x86_64")]
macro_rules! push_asm {
    ($seg:literal $area:expr, $index:expr, $base:expr, $v:expr) => {{
        let v: usize = $v;
        rseq_op!($seg $area, $index, $base;
            "mov rcx, qword ptr [rax]",
            "mov r8, 0xffff000000000000",
            "cmp rcx, qword ptr [rax + 24]",
            "jae 9f",
            "mov qword ptr [{v}], rcx",
            "and r8, rcx",
            "add r8, {one_v}",
            "mov qword ptr [rax], r8";
            v = in(reg) v, one_v = in(reg) v + (1 << 48),
            out("rcx") _, out("r8") _,)
    }};
}

/// # Safety (all of them)
/// `area` is this thread's registered `struct rseq` (or glibc's); `base` is the class's
/// record offset into the per-CPU slabs; blocks in the lists are class blocks (mapped). For
/// the `_fs` forms, `area` is instead the area's offset from the thread pointer (glibc's
/// `__rseq_offset`): the area is reached through the `fs` segment, with no load of the
/// thread pointer first.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pop_rseq(area: *mut u8, index: usize, base: usize) -> (usize, usize) {
    // SAFETY: the module's protocol.
    unsafe { pop_asm!("" area, index, base) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pop_rseq_fs(off: isize, index: usize, base: usize) -> (usize, usize) {
    // SAFETY: as in pop_rseq.
    unsafe { pop_asm!("fs:" off, index, base) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn push_rseq(area: *mut u8, index: usize, base: usize, v: usize) -> usize {
    // SAFETY: as in pop_rseq; v is the caller's block.
    unsafe { push_asm!("" area, index, base, v) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn push_rseq_fs(off: isize, index: usize, base: usize, v: usize) -> usize {
    // SAFETY: as in push_rseq.
    unsafe { push_asm!("fs:" off, index, base, v) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn swap_rseq(
    area: *mut u8,
    index: usize,
    base: usize,
    off: usize,
    old: usize,
    new: usize,
) -> usize {
    // SAFETY: as in pop_rseq; off is a word of the record.
    unsafe {
        rseq_op!("" area, index, base;
            "cmp qword ptr [rax + {off}], {old}",
            "jne 9f",
            "mov qword ptr [rax + {off}], {new}";
            off = in(reg) off, old = in(reg) old, new = in(reg) new,)
    }
}

/// Where this thread's operations go: the per-CPU slabs through `area`, or a thread slab.
enum Target {
    Cpu(*mut u8),
    Thread(usize),
    None,
}

#[inline(always)]
fn target() -> Target {
    match area(hot().mode.load(Acquire)) {
        Ok(a) => Target::Cpu(a),
        Err(true) => thread_slab().map_or(Target::None, Target::Thread),
        Err(false) => Target::None,
    }
}

fn outcome(status: usize, v: usize, retry: impl FnOnce() -> Outcome) -> Outcome {
    match status {
        DONE => Outcome::Done(v),
        BOUNCE => Outcome::Bounce,
        NO_SLOT => retry(),
        _ => unreachable!("status {status}"),
    }
}

/// [`pop`]'s fast path, small enough to inline into `malloc` without making it save
/// registers: a block from this CPU's record, or None for everything else (the record's lists
/// and run are empty, no usable slot, thread caches, the mode undecided), which the caller
/// hands to its cold path. Only where glibc registered the thread's rseq area: it sits at a
/// fixed offset from the thread pointer, reached through `fs`. (Our own registration, the
/// mode for a glibc older than 2.35, is found through a thread-local: in position-independent
/// code that is a call, which would make every `malloc` save registers, so it takes the cold
/// path.)
#[inline(always)]
pub fn pop_fast(c: usize) -> Option<usize> {
    let (slabs, off, index) = fast_config()?;
    // SAFETY: glibc's registered area of this thread at `off`; the slabs' geometry.
    let (s, p) = unsafe { pop_rseq_fs(off, index, slabs + c * RECORD) };
    (s == DONE).then_some(p)
}

/// [`push`]'s fast path: true if `p` went onto this CPU's `list[0]`; false for everything
/// else (the list is full, ...), which the caller hands to its cold path.
#[inline(always)]
pub fn push_fast(c: usize, p: usize) -> bool {
    let Some((slabs, off, index)) = fast_config() else {
        return false;
    };
    // SAFETY: as in pop_fast.
    let s = unsafe { push_rseq_fs(off, index, slabs + c * RECORD, p) };
    s == DONE
}

/// The slabs, glibc's rseq offset and the index field, when the fast path is on: two loads.
#[inline(always)]
fn fast_config() -> Option<(usize, isize, usize)> {
    let slabs = hot().fast_slabs.load(Acquire);
    if slabs == 0 {
        return None;
    }
    let r = hot().fast_rseq.load(Relaxed);
    Some((slabs, r as u32 as i32 as isize, r >> 32))
}

/// Pops a free block of class `c` from this thread's cache: from `list[0]`, else from
/// the other list, else the next block of the run of never-used blocks (freed blocks first:
/// their pages are resident already).
#[inline(always)]
pub fn pop(c: usize) -> Outcome {
    match target() {
        Target::Cpu(a) => {
            let base = hot().slabs.load(Relaxed) + c * RECORD;
            // SAFETY: a registered area of this thread; the slabs' geometry.
            let (s, p) = unsafe { pop_rseq(a, hot().index_field.load(Relaxed), base) };
            outcome(s, p, || on_thread_slab(|r| plain::pop(r, size_of(c)), c))
        }
        Target::Thread(slab) => plain::pop(slab + c * RECORD, size_of(c)),
        Target::None => Outcome::NoCache,
    }
}

/// Pushes a free block of class `c` onto this thread's cache.
#[inline(always)]
pub fn push(c: usize, p: usize) -> Outcome {
    let cap = cache_capacity(c);
    match target() {
        Target::Cpu(a) => {
            let base = hot().slabs.load(Relaxed) + c * RECORD;
            // SAFETY: as in pop.
            let s = unsafe { push_rseq(a, hot().index_field.load(Relaxed), base, p) };
            outcome(s, 0, || on_thread_slab(|r| plain::push(r, p, cap), c))
        }
        Target::Thread(slab) => plain::push(slab + c * RECORD, p, cap),
        Target::None => Outcome::NoCache,
    }
}

/// Replaces word `off` of class `c`'s record with `new` if it still holds `old`.
pub fn swap(c: usize, off: usize, old: usize, new: usize) -> Outcome {
    match target() {
        Target::Cpu(a) => {
            let base = hot().slabs.load(Relaxed) + c * RECORD;
            // SAFETY: as in pop.
            let s = unsafe { swap_rseq(a, hot().index_field.load(Relaxed), base, off, old, new) };
            outcome(s, 0, || {
                on_thread_slab(|r| plain::swap(r, off, old, new), c)
            })
        }
        Target::Thread(slab) => plain::swap(slab + c * RECORD, off, old, new),
        Target::None => Outcome::NoCache,
    }
}

/// The four words of class `c`'s record for this thread now (racy: the slow paths decide
/// on them and commit with [`swap`]); None without a cache.
pub fn read(c: usize) -> Option<[usize; 4]> {
    let r = match target() {
        Target::Cpu(a) => {
            // SAFETY: reads this thread's area (the index field).
            let i = unsafe {
                core::ptr::read_volatile(a.add(hot().index_field.load(Relaxed)) as *const u32)
            };
            // SAFETY: as above.
            let cpu = unsafe { core::ptr::read_volatile(a.add(rseq::CPU_ID) as *const i32) };
            if cpu < 0 || i as usize >= MAX_INDEX {
                thread_slab()? + c * RECORD
            } else {
                hot().slabs.load(Relaxed) + i as usize * SLAB_BYTES + c * RECORD
            }
        }
        Target::Thread(slab) => slab + c * RECORD,
        Target::None => return None,
    };
    // SAFETY: a record in the slabs (racy reads of words other threads on this CPU may be
    // committing; each word is read whole).
    Some(core::array::from_fn(|k| unsafe {
        core::ptr::read_volatile((r + 8 * k) as *const usize)
    }))
}

/// A thread whose CPU slot is unusable (no index, registration failed) uses its own slab.
#[cold]
fn on_thread_slab(op: impl FnOnce(usize) -> Outcome, c: usize) -> Outcome {
    match thread_slab() {
        Some(slab) => op(slab + c * RECORD),
        None => Outcome::NoCache,
    }
}

/// The same operations on a thread's own slab (no other thread touches it).
mod plain {
    use super::*;

    fn word(r: usize, off: usize) -> *mut usize {
        (r + off) as *mut usize
    }

    pub fn pop(r: usize, size: usize) -> Outcome {
        // SAFETY: this thread's slab record; listed blocks are class blocks.
        unsafe {
            let mut l = word(r, LIST0);
            if *l == 0 {
                l = word(r, LIST1);
            }
            let p = addr(*l);
            if p == 0 {
                return bump(r, size);
            }
            *l = *(p as *const usize);
            Outcome::Done(p)
        }
    }

    pub fn push(r: usize, p: usize, cap: usize) -> Outcome {
        // SAFETY: as in pop; p is the caller's block.
        unsafe {
            let l = word(r, LIST0);
            if count(*l) >= cap {
                return Outcome::Bounce;
            }
            *(p as *mut usize) = *l;
            *l = pack(p, count(*l) + 1);
        }
        Outcome::Done(0)
    }

    pub fn bump(r: usize, size: usize) -> Outcome {
        // SAFETY: as in pop.
        unsafe {
            let b = word(r, BUMP);
            if count(*b) == 0 {
                return Outcome::Bounce;
            }
            let p = addr(*b);
            *b = pack(p + size, count(*b) - 1);
            Outcome::Done(p)
        }
    }

    pub fn swap(r: usize, off: usize, old: usize, new: usize) -> Outcome {
        // SAFETY: as in pop.
        unsafe {
            if *word(r, off) != old {
                return Outcome::Bounce;
            }
            *word(r, off) = new;
        }
        Outcome::Done(0)
    }
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
    if !exit::watch(slab) {
        // Nobody would flush it at exit: this thread uses the shared stacks instead.
        // SAFETY: our fresh slab, never used.
        unsafe { os::release(slab as *mut u8, SLAB_BYTES) };
        return None;
    }
    let _ = THREAD_SLAB.try_with(|c| c.set(slab));
    Some(slab)
}

/// Blocks of class `c` held by the per-CPU caches (a racy sum, for statistics).
pub fn cached(c: usize) -> usize {
    let slabs = hot().slabs.load(Relaxed);
    if slabs == 0 {
        return 0;
    }
    // Only indices the process can have used: mm_cids and CPU numbers are below the possible
    // CPUs (reading the untouched pages beyond would make them resident).
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
                .max()
        })
        .map_or(MAX_INDEX, |m| m + 1);
    (0..MAX_INDEX.min(possible))
        .map(|i| {
            let r = slabs + i * SLAB_BYTES + c * RECORD;
            // SAFETY: words of a record in the reservation; racy reads (a statistic).
            let w = |off: usize| unsafe { core::ptr::read_volatile((r + off) as *const usize) };
            count(w(LIST0)) + count(w(LIST1)) + count(w(BUMP))
        })
        .sum()
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
    /// The key whose destructor flushes a thread slab.
    static KEY: AtomicU32 = AtomicU32::new(NO_KEY);
    /// The key whose destructor flushes the lists of the per-CPU record a thread exits on.
    static LISTS_KEY: AtomicU32 = AtomicU32::new(NO_KEY);

    unsafe extern "C" fn flush(slab: *mut c_void) {
        let _ = super::THREAD_SLAB.try_with(|c| c.set(1));
        crate::flush_slab(slab as usize);
        // SAFETY: the slab was this thread's and is no longer referenced.
        unsafe { crate::os::release(slab.cast(), super::SLAB_BYTES) };
    }

    unsafe extern "C" fn flush_lists(_: *mut c_void) {
        crate::flush_lists();
    }

    /// Sets this thread's value of the key in `key` (created on first use, with `dtor`) to
    /// `value` (not null: glibc calls the destructor only for non-null values); false if it
    /// cannot.
    fn set(key: &AtomicU32, dtor: unsafe extern "C" fn(*mut c_void), value: usize) -> bool {
        let mut k = key.load(Acquire);
        if k == NO_KEY {
            let mut new = 0u32;
            // SAFETY: creates a key with our destructor; racing threads may each create one
            // (a few keys wasted, all working).
            if unsafe { pthread_key_create(&mut new, Some(dtor)) } != 0 {
                return false;
            }
            k = match key.compare_exchange(NO_KEY, new, AcqRel, Acquire) {
                Ok(_) => new,
                Err(other) => other,
            };
        }
        // SAFETY: a valid key.
        unsafe { pthread_setspecific(k, value as *const c_void) == 0 }
    }

    /// Arranges for `slab` to be flushed when this thread exits; false if it cannot.
    pub fn watch(slab: usize) -> bool {
        set(&KEY, flush, slab)
    }

    /// Arranges for the lists of the record this thread exits on to be flushed.
    pub fn watch_lists() {
        set(&LISTS_KEY, flush_lists, 1);
    }
}
