//! Per-CPU data on restartable sequences: a counter whose `add` is one unlocked `add` to memory
//! (no atomic instruction), and per-CPU stacks of words with push and pop committed by one
//! store, as tcmalloc's per-CPU caches do.
//!
//! ```
//! use spindle_sync::percpu::PerCpuCounter;
//!
//! let hits = PerCpuCounter::new();
//! std::thread::scope(|s| {
//!     for _ in 0..4 {
//!         s.spawn(|| (0..1000).for_each(|_| hits.add(1)));
//!     }
//! });
//! assert_eq!(hits.sum(), 4000);
//! ```
//!
//! [`registration`] says which registration of the thread's `struct rseq` is live (glibc's,
//! our own, or none: see the [`rseq`] module), [`aborts`] how many critical sections the
//! kernel has restarted.
//!
//! # Protocol
//!
//! **Words.** Each thread has a `struct rseq` registered with the kernel; the kernel writes
//! into it the CPU the thread runs on (`cpu_id`) and, since Linux 6.3, a concurrency id
//! (`mm_cid`: a small number no other running thread of the process holds at the same time,
//! dense in `0..min(CPUs, threads)`). We index per-CPU data by `mm_cid` where the kernel
//! maintains it, else by `cpu_id`: call it the *slot index*. Each slot (a counter word, or a
//! stack: a length word and its array) lives on cache lines of its own. Threads that cannot
//! run restartable sequences use separate *fallback shards*, indexed by a per-thread number
//! and updated with atomic read-modify-writes (the counter) or under a mutex (the stacks):
//! rseq and fallback code never write the same words, so mixing them is safe.
//!
//! **Critical section.** An operation stores the address of its descriptor (`struct
//! rseq_cs`: start, length, abort address) into the thread's `rseq_cs` word, then, between
//! `start` and the commit: reads the slot index, checks it against the number of slots
//! (the stacks: outside, leave and take the fallback) or masks it with their power-of-two
//! count (the counter), reads the slot's words, and ends with one instruction that writes
//! memory (the commit): the counter's unlocked `add` to its slot (on AArch64, a load/store
//! architecture, the slot's load and add, then its `str`), or the stack's plain store of its
//! new length. The kernel cannot stop a thread half-way through one instruction. The
//! descriptor lives in
//! section `__rseq_cs`; the abort handler, in `__rseq_failure`, is preceded by the 4-byte
//! signature the registration declared (glibc's: `0x53053053` behind a `ud1` opcode on x86-64,
//! `brk #0x45e0` on AArch64, so that the bytes never run as a useful instruction), counts the
//! abort and restarts from the store of the descriptor address (the kernel clears `rseq_cs`
//! when it aborts).
//!
//! **What aborts.** The kernel checks, whenever it is about to return to a thread that was
//! preempted, migrated, or is being sent a signal, whether the thread's instruction pointer
//! lies in `[start, commit]`. If it does, it does not resume there: it jumps to the abort
//! handler. So a section that reaches its commit ran, from its first load to that
//! commit, without any other thread running on its CPU in between, and without a signal
//! handler running on its own thread.
//!
//! **Why one instruction commits.** Invariant: *only a thread currently holding slot index i
//! writes slot i, and it writes it only with the commit of an uninterrupted section.* A thread
//! holds index i while it runs on CPU i (or holds concurrency id i); no two running threads
//! hold the same index. A section's loads of slot i and its commit therefore happen with no
//! other write to slot i in between: another writer would have to run on the same CPU (or
//! hold the same id), which requires switching this thread out, which aborts the section. So
//! the read-modify-write is atomic with respect to every other writer, without a `lock` prefix.
//! A stack's push also writes the array element *above* the length before committing the new
//! length; an aborted push leaves that element written but above the length, where nothing
//! reads it. Ids and CPUs change hands only through a context switch, which is a full barrier
//! on x86-64 (the run-queue lock's `lock`ed instructions) and on arm64 (`__switch_to` issues
//! `dsb ish`, and `smp_mb__after_spinlock` is `smp_mb` there, as `membarrier` requires): the
//! previous holder's stores are visible to the next holder.
//!
//! **What a preempted section sees.** Nothing: it never resumes. It is restarted from the
//! beginning, possibly on another CPU, reading the slot index again; its earlier loads and its
//! uncommitted stores (a push's array element) are discarded or harmless. A commit either
//! happened (the operation took effect once) or did not (none of it is visible).
//!
//! **Orderings.** Commits are plain stores (a `mov`, or the store half of an unlocked `add`;
//! on AArch64 an `str`): on x86-TSO they are release stores; no reader relies on that: slots
//! are `AtomicU64`s that readers load with `Relaxed` ordering; an aligned 8-byte store is
//! single-copy atomic (on both architectures), so
//! [`PerCpuCounter::sum`] never sees a torn word. `sum` is not a
//! snapshot: with adds in flight it returns a value between the total of adds that finished
//! before it began and the total of those that began before it ended (for non-negative adds);
//! when no add runs concurrently it is exact. The stacks promise nothing about order between
//! CPUs: a pop sees only the stack of the slot it runs on.
//!
//! **Not in loom.** A restartable sequence is an interaction with the kernel's scheduler that
//! loom cannot express, and the fallbacks are one `fetch_add` and a mutex. Instead,
//! `tests/percpu.rs` checks exact totals after 10^9 adds from 4 × CPUs threads while another
//! thread moves them between CPUs and a signal storm forces aborts, under both registrations.
//!
//! # Fallback
//!
//! Not x86-64 or AArch64 Linux, a kernel without rseq (before 4.18), an emulator without it
//! (`qemu-aarch64` answers `ENOSYS`), a seccomp filter that refuses the call, or a thread the
//! kernel would not register: operations take the fallback shards,
//! correct and roughly as fast as an uncontended atomic read-modify-write.

pub mod rseq;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use crate::primitives::CachePadded;
pub use rseq::{registration, Process, Registration};

static ABORTS: AtomicU64 = AtomicU64::new(0);

/// Critical sections the kernel aborted (and we restarted), process-wide, since it started.
pub fn aborts() -> u64 {
    ABORTS.load(Relaxed)
}

#[cold]
#[inline(never)]
fn record_aborts(n: usize) {
    ABORTS.fetch_add(n as u64, Relaxed);
}

/// The byte offset of the slot index in `struct rseq` for this process: `mm_cid` where the
/// kernel maintains it (dense ids), `cpu_id` otherwise.
pub fn index_field() -> usize {
    if registration().mm_cid {
        rseq::MM_CID
    } else {
        rseq::CPU_ID
    }
}

/// How many slot indices the kernel can hand out, as the kernel says it (`nr_cpu_ids`: CPUs the
/// system may ever bring online; concurrency ids are below that too); None where
/// `/sys/devices/system/cpu/possible` cannot be read (a sandbox without `/sys`).
fn possible_cpus_from_kernel() -> Option<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
                .max()
        })
        .map(|m| m + 1)
}

/// How many slots to make: the kernel's count, or, where it cannot be read, the CPUs this
/// process may run on (then not a bound on the indices: users must check them).
fn possible_cpus() -> usize {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    possible_cpus_from_kernel().unwrap_or(online).max(online)
}

/// A small per-thread number for the fallback shards.
fn thread_shard(shards: usize) -> usize {
    use std::cell::Cell;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static ID: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    let id = ID
        .try_with(|c| {
            if c.get() == usize::MAX {
                c.set(NEXT.fetch_add(1, Relaxed));
            }
            c.get()
        })
        .unwrap_or(0);
    id % shards
}

/// A counter split into one word per CPU: [`add`](Self::add) is a restartable sequence that
/// commits with one plain read-modify-write; [`sum`](Self::sum) reads every word.
///
/// Where restartable sequences are unavailable, `add` is a relaxed `fetch_add` on a word
/// chosen by thread (see the [module](self) documentation).
pub struct PerCpuCounter {
    /// A power-of-two number of slots, at least the possible CPUs (empty when `by` is
    /// [`Index::None`]).
    cpus: Box<[CachePadded<AtomicU64>]>,
    shards: Box<[CachePadded<AtomicU64>]>,
    by: Index,
}

/// Which field of `struct rseq` a counter's slot index comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Index {
    /// No restartable sequences: always the fallback.
    None,
    MmCid,
    CpuId,
}

impl Index {
    fn of(field: usize) -> Self {
        if registration().registration == Registration::Unavailable {
            Index::None
        } else if field == rseq::MM_CID {
            Index::MmCid
        } else {
            Index::CpuId
        }
    }
}

impl Default for PerCpuCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for PerCpuCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerCpuCounter")
            .field("sum", &self.sum())
            .finish()
    }
}

impl PerCpuCounter {
    /// A counter at zero, with a word per possible CPU.
    pub fn new() -> Self {
        Self::build(Index::of(index_field()))
    }

    /// A counter indexed by CPU number even where the kernel offers `mm_cid` (what kernels
    /// before 6.3 get): for comparison and for testing that path.
    pub fn by_cpu_id() -> Self {
        Self::build(Index::of(rseq::CPU_ID))
    }

    /// A counter that always takes the fallback (relaxed atomics sharded by thread), whatever
    /// the kernel offers: for comparison and for testing the fallback.
    pub fn sharded() -> Self {
        Self::build(Index::None)
    }

    fn build(by: Index) -> Self {
        let n = possible_cpus();
        // The section masks the slot index instead of checking it, which is only right when
        // the slots cover every index the kernel can hand out: without the kernel's count
        // (no `/sys`), two CPUs could share a slot and lose adds, so take the fallback.
        let by = match possible_cpus_from_kernel() {
            Some(_) => by,
            None => Index::None,
        };
        let words = |k| (0..k).map(|_| CachePadded(AtomicU64::new(0))).collect();
        PerCpuCounter {
            // A power of two, so that the section can mask the slot index instead of
            // checking it (see `add_rseq`).
            cpus: if by == Index::None {
                words(0)
            } else {
                words(n.next_power_of_two())
            },
            shards: words(n),
            by,
        }
    }

    /// Adds `v` (wrapping).
    #[inline]
    pub fn add(&self, v: u64) {
        if self.by != Index::None {
            if let Some(area) = rseq::area() {
                // SAFETY: `area` is this thread's registered `struct rseq`; `cpus` holds a
                // power-of-two number of 128-byte slots, and the section masks the index.
                // Adding 1 (counting events, the usual call) commits with an immediate
                // operand: see `add_rseq` for why that is faster on some cores.
                unsafe {
                    match (self.by == Index::MmCid, v == 1) {
                        (true, true) => add_rseq::<{ rseq::MM_CID }, true>(area, &self.cpus, v),
                        (true, false) => add_rseq::<{ rseq::MM_CID }, false>(area, &self.cpus, v),
                        (false, true) => add_rseq::<{ rseq::CPU_ID }, true>(area, &self.cpus, v),
                        (false, false) => add_rseq::<{ rseq::CPU_ID }, false>(area, &self.cpus, v),
                    }
                }
                return;
            }
        }
        self.add_fallback(v);
    }

    #[cold]
    #[inline(never)]
    fn add_fallback(&self, v: u64) {
        self.shards[thread_shard(self.shards.len())].fetch_add(v, Relaxed);
    }

    /// The total of every add (wrapping); exact when no add runs concurrently.
    pub fn sum(&self) -> u64 {
        self.cpus
            .iter()
            .chain(self.shards.iter())
            .fold(0u64, |s, w| s.wrapping_add(w.load(Relaxed)))
    }

    /// Whether adds from this thread run as restartable sequences.
    pub fn uses_rseq(&self) -> bool {
        self.by != Index::None && rseq::area().is_some()
    }
}

/// The counter's critical section, reading the slot index at byte `FIELD` of `struct rseq`;
/// with `ONE`, it adds 1 as an immediate operand and ignores `v`.
///
/// Written for the fewest instructions on the path that commits (on the Zen 4 guest where it
/// was first tuned, a loop of adds was bound by instructions issued), and so that the commit
/// can be executed without waiting for store forwarding. The index field is a constant
/// displacement (no register carries it); the index is masked rather than checked (the
/// kernel keeps `cpu_id` and `mm_cid` below the possible CPUs, which `cpus.len()`, a power of
/// two, covers; the mask only makes a broken kernel lose counts instead of writing out of
/// bounds; without the kernel's count of possible CPUs the counter never gets here); the
/// commit is one `add` to memory (an instruction the kernel cannot split: preempted before
/// it, the section restarts; after it, the add happened once), and the abort handler counts
/// aborts itself, so nothing is tested after the section.
///
/// The commit's form matters on Intel cores that rename memory (seen on a 2-vCPU Xeon guest of
/// the Sapphire/Emerald Rapids generation; the lab's `percpu` experiment measures it per
/// machine). There a loop of `add qword ptr [reg], 1` runs without waiting for the previous
/// add's store; with a register operand (`add [reg], reg`) or an indexed address
/// (`add [base + index], 1`) every add waits for the previous one's store to forward. So the
/// slot's address is formed in a register first, and an add of 1 uses an immediate.
///
/// # Safety
/// `area` must be this thread's registered `struct rseq`, and `cpus.len()` a power of two.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
unsafe fn add_rseq<const FIELD: usize, const ONE: bool>(
    area: *mut u8,
    cpus: &[CachePadded<AtomicU64>],
    v: u64,
) {
    const _: () = assert!(std::mem::size_of::<CachePadded<AtomicU64>>() == 128);
    debug_assert!(cpus.len().is_power_of_two() && cpus.len() <= 1 << 32);
    // The section, with the commit's operand (`{v}`) given by the caller: an immediate 1 or a
    // register.
    macro_rules! section {
        ($($v:tt)+) => {
            core::arch::asm!(
                "2:",
                "lea rax, [rip + 3f]",
                "mov qword ptr [{area} + {cs}], rax",
                "4:",
                "mov eax, dword ptr [{area} + {field}]",
                "and eax, {mask:e}",
                "shl rax, 7",
                "add rax, {base}",
                "add qword ptr [rax], {v}",
                "5:",
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
                "lock inc qword ptr [rip + {aborts}]",
                "jmp 2b",
                ".popsection",
                area = in(reg) area,
                mask = in(reg) cpus.len() - 1,
                base = in(reg) cpus.as_ptr(),
                v = $($v)+,
                field = const FIELD,
                cs = const rseq::RSEQ_CS,
                sig = const rseq::SIGNATURE,
                // A rip-relative reference: right in executables and cdylibs (PIE or not,
                // static or not); a Rust `dylib` build of this crate (`-C prefer-dynamic`)
                // would need the address passed in a register instead.
                aborts = sym ABORTS,
                out("rax") _,
                options(nostack),
            )
        };
    }
    // SAFETY: the protocol in the module documentation. rax holds the descriptor address,
    // then the slot's address. The only memory written is this thread's `rseq_cs` word, one
    // slot (an AtomicU64, updated by one aligned `add`, which no other thread writes while
    // the section runs: a relaxed atomic update), whose index the mask keeps inside `cpus`,
    // and, on abort, `ABORTS` (a `lock`ed increment, i.e. a relaxed `fetch_add`). The abort
    // handler restarts from label 2.
    unsafe {
        if ONE {
            section!(const 1)
        } else {
            section!(in(reg) v)
        }
    }
}

/// The counter's critical section on AArch64: the same protocol as the x86-64 one above, for
/// a load/store architecture. The slot's address is formed first (the index masked, shifted
/// by 7 for the 128-byte slots, added to the base); then a load of the slot, an add (an
/// immediate 1, or `v`) and one `str`, the commit: preempted before the `str`, the section
/// restarts and nothing it did is visible, so the three act as one read-modify-write. The
/// descriptor's address comes from `adrp`/`add`; the abort handler, after the signature as an
/// instruction word (`.inst`), counts the abort with an exclusive-pair increment of `ABORTS`
/// (a relaxed `fetch_add`; no LSE atomics assumed) and restarts.
///
/// # Safety
/// As for the x86-64 form: `area` must be this thread's registered `struct rseq`, and
/// `cpus.len()` a power of two.
#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
#[inline(always)]
unsafe fn add_rseq<const FIELD: usize, const ONE: bool>(
    area: *mut u8,
    cpus: &[CachePadded<AtomicU64>],
    v: u64,
) {
    const _: () = assert!(std::mem::size_of::<CachePadded<AtomicU64>>() == 128);
    debug_assert!(cpus.len().is_power_of_two() && cpus.len() <= 1 << 32);
    macro_rules! section {
        ($add:literal $(, $v:tt)*) => {
            core::arch::asm!(
                "2:",
                "adrp {slot}, 3f",
                "add {slot}, {slot}, :lo12:3f",
                "str {slot}, [{area}, #{cs}]",
                "4:",
                "ldr {slot:w}, [{area}, #{field}]",
                "and {slot}, {slot}, {mask}",
                "add {slot}, {base}, {slot}, lsl #7",
                "ldr {x}, [{slot}]",
                $add,
                "str {x}, [{slot}]",
                "5:",
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "3:",
                ".long 0, 0",
                ".quad 4b, 5b - 4b, 6f",
                ".popsection",
                ".pushsection __rseq_failure, \"ax\"",
                ".inst {sig}",
                "6:",
                "adrp {slot}, {aborts}",
                "add {slot}, {slot}, :lo12:{aborts}",
                "10:",
                "ldxr {x}, [{slot}]",
                "add {x}, {x}, #1",
                "stxr {st:w}, {x}, [{slot}]",
                "cbnz {st:w}, 10b",
                "b 2b",
                ".popsection",
                area = in(reg) area,
                mask = in(reg) cpus.len() - 1,
                base = in(reg) cpus.as_ptr(),
                $($v = in(reg) v,)*
                slot = out(reg) _,
                x = out(reg) _,
                st = out(reg) _,
                field = const FIELD,
                cs = const rseq::RSEQ_CS,
                sig = const rseq::SIGNATURE,
                // A pc-relative reference: right in executables and cdylibs, as on x86-64.
                aborts = sym ABORTS,
                options(nostack),
            )
        };
    }
    // SAFETY: the protocol in the module documentation. The only memory written is this
    // thread's `rseq_cs` word, one slot (an AtomicU64, whose load and store no other thread's
    // write can come between: a relaxed atomic update), whose index the mask keeps inside
    // `cpus`, and, on abort, `ABORTS` (an exclusive-pair increment: a relaxed `fetch_add`).
    unsafe {
        if ONE {
            section!("add {x}, {x}, #1")
        } else {
            section!("add {x}, {x}, {v}", v)
        }
    }
}

#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
)))]
#[inline(always)]
unsafe fn add_rseq<const FIELD: usize, const ONE: bool>(
    _: *mut u8,
    _: &[CachePadded<AtomicU64>],
    _: u64,
) {
    unreachable!("no restartable sequences on this target")
}

/// Per-CPU bounded stacks of words (a free list per CPU, as tcmalloc's per-CPU slabs are):
/// [`try_push`](Self::try_push) and [`try_pop`](Self::try_pop) are restartable sequences that
/// commit by storing the stack's new length.
///
/// A pop sees only the stack of the CPU (or concurrency id) it runs on: it may answer `None`
/// while other CPUs' stacks hold words, and a push may be refused while they have room. Use
/// it as a cache in front of a shared structure. Where restartable sequences are unavailable,
/// operations take stacks chosen by thread, each under a mutex.
pub struct PerCpuSlots {
    /// `cpus` stacks of `stride` bytes, each starting on a cache line of its own: a length
    /// word, then `capacity` words.
    stacks: Box<[Line]>,
    cpus: usize,
    capacity: usize,
    stride: usize,
    fallback: Box<[CachePadded<Mutex<Vec<usize>>>]>,
    index: usize,
}

impl std::fmt::Debug for PerCpuSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerCpuSlots")
            .field("cpus", &self.cpus)
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// 128 bytes of words, so that every stack starts on lines of its own.
#[repr(C, align(128))]
struct Line([AtomicU64; 16]);

/// Why a push or pop returned without doing its work through rseq.
const DONE: usize = 0;
const FULL_OR_EMPTY: usize = 1;
#[allow(dead_code)] // written by the sections' assembly (`mov eax, 2`, `mov {st}, #2`)
const NO_SLOT: usize = 2;

impl PerCpuSlots {
    /// Stacks of `capacity` words for each possible CPU.
    pub fn new(capacity: usize) -> Self {
        let index = if registration().registration == Registration::Unavailable {
            0
        } else {
            index_field()
        };
        Self::build(capacity, index)
    }

    /// Stacks indexed by CPU number even where the kernel offers `mm_cid` (for testing).
    pub fn by_cpu_id(capacity: usize) -> Self {
        let index = if registration().registration == Registration::Unavailable {
            0
        } else {
            rseq::CPU_ID
        };
        Self::build(capacity, index)
    }

    /// Stacks that always take the fallback (mutexes chosen by thread).
    pub fn locked(capacity: usize) -> Self {
        Self::build(capacity, 0)
    }

    fn build(capacity: usize, index: usize) -> Self {
        let n = possible_cpus();
        let cpus = if index == 0 { 0 } else { n };
        // Words per stack: the length and the array, rounded up to whole 128-byte lines.
        let words = (1 + capacity).div_ceil(16) * 16;
        PerCpuSlots {
            stacks: (0..cpus * words / 16)
                .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            cpus,
            capacity,
            stride: words * 8,
            fallback: (0..n)
                .map(|_| CachePadded(Mutex::new(Vec::with_capacity(capacity))))
                .collect(),
            index,
        }
    }

    /// Pushes `v` on this CPU's stack; gives it back if that stack is full.
    #[inline]
    pub fn try_push(&self, v: usize) -> Result<(), usize> {
        if self.index != 0 {
            if let Some(area) = rseq::area() {
                // SAFETY: this thread's area; the geometry is `stacks`' own.
                match unsafe { self.push_rseq(area, v) } {
                    DONE => return Ok(()),
                    FULL_OR_EMPTY => return Err(v),
                    _ => {}
                }
            }
        }
        self.push_fallback(v)
    }

    /// Pops the word on top of this CPU's stack, if there is one.
    #[inline]
    pub fn try_pop(&self) -> Option<usize> {
        if self.index != 0 {
            if let Some(area) = rseq::area() {
                // SAFETY: as in try_push.
                match unsafe { self.pop_rseq(area) } {
                    (DONE, v) => return Some(v),
                    (FULL_OR_EMPTY, _) => return None,
                    _ => {}
                }
            }
        }
        self.pop_fallback()
    }

    /// Takes every word out of every stack.
    pub fn drain(&mut self) -> Vec<usize> {
        let mut out = Vec::new();
        let lines = self.stride / 128;
        for cpu in 0..self.cpus {
            let stack = self.stacks[cpu * lines..(cpu + 1) * lines]
                .iter()
                .flat_map(|l| l.0.iter())
                .collect::<Vec<_>>();
            let len = stack[0].swap(0, Relaxed) as usize;
            out.extend(stack[1..=len].iter().map(|w| w.load(Relaxed) as usize));
        }
        for shard in self.fallback.iter() {
            out.append(&mut shard.lock().unwrap_or_else(|e| e.into_inner()));
        }
        out
    }

    #[cold]
    #[inline(never)]
    fn push_fallback(&self, v: usize) -> Result<(), usize> {
        let shard = &self.fallback[thread_shard(self.fallback.len())];
        let mut stack = shard.lock().unwrap_or_else(|e| e.into_inner());
        if stack.len() < self.capacity {
            stack.push(v);
            Ok(())
        } else {
            Err(v)
        }
    }

    #[cold]
    #[inline(never)]
    fn pop_fallback(&self) -> Option<usize> {
        let shard = &self.fallback[thread_shard(self.fallback.len())];
        shard.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// # Safety
    /// `area` must be this thread's registered `struct rseq`.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[inline(always)]
    unsafe fn push_rseq(&self, area: *mut u8, v: usize) -> usize {
        let status: usize;
        let mut aborts: usize = 0;
        // SAFETY: the module's protocol. rax: descriptor address, then the stack's address,
        // then the status; rcx: the stack's length. Writes: `rseq_cs`; the array word at the
        // length (inside the stack, since length < capacity), not visible until the commit
        // stores length + 1. The index is checked against `cpus`.
        unsafe {
            core::arch::asm!(
                "2:",
                "lea rax, [rip + 3f]",
                "mov qword ptr [{area} + {cs}], rax",
                "4:",
                "mov eax, dword ptr [{area} + {index}]",
                "cmp rax, {n}",
                "jae 7f",
                "imul rax, {stride}",
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
                "inc {aborts}",
                "jmp 2b",
                ".popsection",
                area = in(reg) area,
                index = in(reg) self.index,
                n = in(reg) self.cpus,
                stride = in(reg) self.stride,
                base = in(reg) self.stacks.as_ptr(),
                cap = in(reg) self.capacity,
                v = in(reg) v,
                aborts = inout(reg) aborts,
                cs = const rseq::RSEQ_CS,
                sig = const rseq::SIGNATURE,
                out("rax") status,
                out("rcx") _,
                options(nostack),
            );
        }
        if aborts != 0 {
            record_aborts(aborts);
        }
        status
    }

    /// # Safety
    /// `area` must be this thread's registered `struct rseq`.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[inline(always)]
    unsafe fn pop_rseq(&self, area: *mut u8) -> (usize, usize) {
        let status: usize;
        let value: usize;
        let mut aborts: usize = 0;
        // SAFETY: the module's protocol. rax: descriptor address, then the stack's address,
        // then the status; rcx: the length; rdx: the top word. The only writes are
        // `rseq_cs` and the commit, which stores length − 1 after reading the top word.
        unsafe {
            core::arch::asm!(
                "2:",
                "lea rax, [rip + 3f]",
                "mov qword ptr [{area} + {cs}], rax",
                "4:",
                "mov eax, dword ptr [{area} + {index}]",
                "cmp rax, {n}",
                "jae 7f",
                "imul rax, {stride}",
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
                "inc {aborts}",
                "jmp 2b",
                ".popsection",
                area = in(reg) area,
                index = in(reg) self.index,
                n = in(reg) self.cpus,
                stride = in(reg) self.stride,
                base = in(reg) self.stacks.as_ptr(),
                aborts = inout(reg) aborts,
                cs = const rseq::RSEQ_CS,
                sig = const rseq::SIGNATURE,
                out("rax") status,
                out("rcx") _,
                out("rdx") value,
                options(nostack),
            );
        }
        if aborts != 0 {
            record_aborts(aborts);
        }
        (status, value)
    }

    /// The push's section on AArch64, as on x86-64: the element above the length is written
    /// first (into the stack, invisible until the commit), then the commit stores the new
    /// length. Status 0 done, 1 full, 2 no slot; aborts are counted in a register and recorded
    /// after the section.
    ///
    /// # Safety
    /// `area` must be this thread's registered `struct rseq`.
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    #[inline(always)]
    unsafe fn push_rseq(&self, area: *mut u8, v: usize) -> usize {
        let status: usize;
        let mut aborts: usize = 0;
        // SAFETY: the module's protocol. `stack`: the stack's address; `len`: its length. The
        // writes are `rseq_cs`, the array word above the length (inside the stack, since
        // length < capacity) and the commit, the new length. The index is checked against
        // `cpus`.
        unsafe {
            core::arch::asm!(
                "2:",
                "adrp {stack}, 3f",
                "add {stack}, {stack}, :lo12:3f",
                "str {stack}, [{area}, #{cs}]",
                "4:",
                "ldr {stack:w}, [{area}, {index}]",
                "cmp {stack}, {n}",
                "b.hs 7f",
                "mul {stack}, {stack}, {stride}",
                "add {stack}, {stack}, {base}",
                "ldr {len}, [{stack}]",
                "cmp {len}, {cap}",
                "b.hs 9f",
                "add {len}, {len}, #1",
                "str {v}, [{stack}, {len}, lsl #3]",
                "str {len}, [{stack}]",
                "5:",
                "mov {st}, #0",
                "b 8f",
                "7:",
                "mov {st}, #2",
                "b 8f",
                "9:",
                "mov {st}, #1",
                "8:",
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "3:",
                ".long 0, 0",
                ".quad 4b, 5b - 4b, 6f",
                ".popsection",
                ".pushsection __rseq_failure, \"ax\"",
                ".inst {sig}",
                "6:",
                "add {aborts}, {aborts}, #1",
                "b 2b",
                ".popsection",
                area = in(reg) area,
                index = in(reg) self.index,
                n = in(reg) self.cpus,
                stride = in(reg) self.stride,
                base = in(reg) self.stacks.as_ptr(),
                cap = in(reg) self.capacity,
                v = in(reg) v,
                aborts = inout(reg) aborts,
                stack = out(reg) _,
                len = out(reg) _,
                st = out(reg) status,
                cs = const rseq::RSEQ_CS,
                sig = const rseq::SIGNATURE,
                options(nostack),
            );
        }
        if aborts != 0 {
            record_aborts(aborts);
        }
        status
    }

    /// The pop's section on AArch64: reads the top word, then commits the length less one.
    ///
    /// # Safety
    /// `area` must be this thread's registered `struct rseq`.
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    #[inline(always)]
    unsafe fn pop_rseq(&self, area: *mut u8) -> (usize, usize) {
        let status: usize;
        let value: usize;
        let mut aborts: usize = 0;
        // SAFETY: the module's protocol. The only writes are `rseq_cs` and the commit, which
        // stores length − 1 after reading the top word.
        unsafe {
            core::arch::asm!(
                "2:",
                "adrp {stack}, 3f",
                "add {stack}, {stack}, :lo12:3f",
                "str {stack}, [{area}, #{cs}]",
                "4:",
                "ldr {stack:w}, [{area}, {index}]",
                "cmp {stack}, {n}",
                "b.hs 7f",
                "mul {stack}, {stack}, {stride}",
                "add {stack}, {stack}, {base}",
                "ldr {len}, [{stack}]",
                "cbz {len}, 9f",
                "ldr {val}, [{stack}, {len}, lsl #3]",
                "sub {len}, {len}, #1",
                "str {len}, [{stack}]",
                "5:",
                "mov {st}, #0",
                "b 8f",
                "7:",
                "mov {st}, #2",
                "b 8f",
                "9:",
                "mov {st}, #1",
                "8:",
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "3:",
                ".long 0, 0",
                ".quad 4b, 5b - 4b, 6f",
                ".popsection",
                ".pushsection __rseq_failure, \"ax\"",
                ".inst {sig}",
                "6:",
                "add {aborts}, {aborts}, #1",
                "b 2b",
                ".popsection",
                area = in(reg) area,
                index = in(reg) self.index,
                n = in(reg) self.cpus,
                stride = in(reg) self.stride,
                base = in(reg) self.stacks.as_ptr(),
                aborts = inout(reg) aborts,
                stack = out(reg) _,
                len = out(reg) _,
                val = out(reg) value,
                st = out(reg) status,
                cs = const rseq::RSEQ_CS,
                sig = const rseq::SIGNATURE,
                options(nostack),
            );
        }
        if aborts != 0 {
            record_aborts(aborts);
        }
        (status, value)
    }

    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    )))]
    unsafe fn push_rseq(&self, _: *mut u8, _: usize) -> usize {
        NO_SLOT
    }

    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    )))]
    unsafe fn pop_rseq(&self, _: *mut u8) -> (usize, usize) {
        (NO_SLOT, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percpu_counter_counts_on_one_thread() {
        let c = PerCpuCounter::new();
        for _ in 0..1000 {
            c.add(3);
        }
        assert_eq!(c.sum(), 3000);
        let s = PerCpuCounter::sharded();
        s.add(5);
        assert_eq!(s.sum(), 5);
        assert!(!s.uses_rseq());
    }

    #[test]
    fn percpu_slots_push_pop_on_one_thread() {
        for mut slots in [PerCpuSlots::new(4), PerCpuSlots::locked(4)] {
            assert_eq!(slots.try_pop(), None);
            // Pinned or not, a thread that does not move sees its own stack; it may move, so
            // only the totals are checked.
            let mut pushed = 0;
            for v in 1..=3 {
                if slots.try_push(v).is_ok() {
                    pushed += 1;
                }
            }
            let mut popped = Vec::new();
            while let Some(v) = slots.try_pop() {
                popped.push(v);
            }
            let mut rest = slots.drain();
            rest.extend(popped);
            rest.sort();
            assert_eq!(rest.len(), pushed);
            assert!(rest.iter().all(|v| (1..=3).contains(v)));
        }
    }

    #[test]
    fn percpu_registration_is_decided() {
        let p = registration();
        assert!(!p.describe().is_empty());
        if p.registration == Registration::Unavailable {
            assert!(p.reason.is_some());
        }
    }
}
