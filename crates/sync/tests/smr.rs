//! Stress tests of safe memory reclamation on real threads, oversubscribed (3 readers and 1
//! writer per CPU, at least 6 and 2): writers replace nodes in a small shared array and retire the
//! old ones; the deleter *poisons* a node and returns it to a recycling pool, from which
//! writers reuse it after a while. Readers dereference what they protected and count a
//! poisoned or inconsistent payload as a use after free; the tests assert zero. Memory is
//! never returned to the allocator while threads run, so a protocol bug shows up as a count,
//! not as undefined behaviour. Payload words are atomics for the same reason.
//!
//! Also checked: all garbage is freed once the threads stop and reclamation is driven; the
//! hazard-pointer domain stays within its documented garbage bound during the run; a stalled
//! epoch reader blocks reclamation (unbounded garbage, as documented) while a stalled hazard
//! pointer holds back only its own node. Two *FSSF window* tests (one reader, one writer that
//! reclaims after every retirement) aim at the store-buffer race the cold side's barrier
//! exists for (the epoch one with a stuffed store buffer); with the barrier removed, both fail
//! on the development VM (see `fssf_window`). No timing is asserted.
//!
//! `SPINDLE_SMR_SCALE` (a positive number, default 1) scales the number of replacements.

#![cfg(not(loom))]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering::*};
use std::sync::Mutex;
use std::time::Duration;

use spindle_sync::prepaid::PrepaidBarrier;
use spindle_sync::smr::epoch::Collector;
use spindle_sync::smr::hazard::{Domain, HazardPointer};
use spindle_sync::smr::Barrier;

mod common;

/// Reader threads: 3 per CPU.
fn readers() -> usize {
    common::per_cpu(3, 6)
}

/// Writer threads: 1 per CPU (4 threads per CPU in all).
fn writers() -> usize {
    common::per_cpu(1, 2)
}

/// Sets `stop` when dropped, also while a panic unwinds out of a test's thread scope (a
/// writer's failed assertion): the readers then leave their loops and the scope can join
/// them, so that the test fails instead of hanging.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

const SLOTS: usize = 8;
const POISON: u64 = 0xDEAD_BEEF_DEAD_BEEF;
/// Freed nodes wait in the pool until this many are there, so a node is reused "a while"
/// after it was freed (long enough for a missed protection to see the reuse).
const REUSE_AFTER: usize = 64;
/// Replacements by all writers together at scale 1.
const REPLACEMENTS: u64 = 2_000_000;

fn scale() -> f64 {
    std::env::var("SPINDLE_SMR_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0)
}

/// Replacements per writer: the total is the same on any number of CPUs.
fn replacements() -> u64 {
    ((REPLACEMENTS as f64 * scale()) as u64 / writers() as u64).max(1)
}

fn check_of(v: u64) -> u64 {
    v.rotate_left(17) ^ 0x5555_AAAA_5555_AAAA
}

struct Node {
    value: AtomicU64,
    check: AtomicU64,
    pool: *const Pool,
}

/// Nodes: a FIFO of freed ones, and every node ever made (freed at the end of the test).
struct Pool {
    free: Mutex<VecDeque<usize>>,
    all: Mutex<Vec<usize>>,
    reused: AtomicU64,
}

impl Pool {
    fn new() -> Pool {
        Pool {
            free: Mutex::new(VecDeque::new()),
            all: Mutex::new(Vec::new()),
            reused: AtomicU64::new(0),
        }
    }

    fn alloc(&self, value: u64) -> *mut Node {
        let recycled = {
            let mut free = self.free.lock().unwrap();
            if free.len() > REUSE_AFTER {
                free.pop_front()
            } else {
                None
            }
        };
        let node = match recycled {
            Some(addr) => {
                self.reused.fetch_add(1, Relaxed);
                addr as *mut Node
            }
            None => {
                let n = Box::into_raw(Box::new(Node {
                    value: AtomicU64::new(0),
                    check: AtomicU64::new(0),
                    pool: self,
                }));
                self.all.lock().unwrap().push(n as usize);
                n
            }
        };
        // SAFETY: a fresh node, or one the reclamation scheme freed (no reader holds it,
        // unless the scheme is broken, which is what the readers count).
        unsafe {
            (*node).value.store(value, Relaxed);
            (*node).check.store(check_of(value), Relaxed);
        }
        node
    }

    fn drain(&self) {
        for addr in self.all.lock().unwrap().drain(..) {
            // SAFETY: made by `Box::into_raw` in `alloc`; no thread runs any more.
            drop(unsafe { Box::from_raw(addr as *mut Node) });
        }
    }
}

/// The deleter: poison the node and return it to its pool.
///
/// # Safety
/// `node` came from `Pool::alloc` and the pool is alive.
unsafe fn poison(node: *mut Node) {
    // SAFETY: forwarded from the caller.
    unsafe {
        (*node).value.store(POISON, Relaxed);
        (*node).check.store(POISON, Relaxed);
        (*(*node).pool)
            .free
            .lock()
            .unwrap()
            .push_back(node as usize);
    }
}

/// A reader's look at a protected node: 1 if it is poisoned or inconsistent, else 0.
fn inspect(node: *mut Node) -> u64 {
    // SAFETY: nodes are never returned to the allocator while threads run.
    let (v, c) = unsafe { ((*node).value.load(Relaxed), (*node).check.load(Relaxed)) };
    u64::from(v == POISON || c == POISON || c != check_of(v))
}

struct Shared {
    slots: Vec<AtomicPtr<Node>>,
    pool: Pool,
    stop: AtomicBool,
    violations: AtomicU64,
    reads: AtomicU64,
}

impl Shared {
    fn new() -> Box<Shared> {
        let s = Box::new(Shared {
            slots: Vec::new(),
            pool: Pool::new(),
            stop: AtomicBool::new(false),
            violations: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        });
        // The pool's address must be stable before nodes point at it: fill after boxing.
        let slots = (0..SLOTS as u64)
            .map(|i| AtomicPtr::new(s.pool.alloc(i)))
            .collect();
        let mut s = s;
        s.slots = slots;
        s
    }

    fn finish(&self) {
        for slot in &self.slots {
            slot.store(std::ptr::null_mut(), Relaxed);
        }
        self.pool.drain();
    }
}

/// A tiny xorshift for slot choices.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn epoch_stress(barrier: Barrier) {
    let shared = Shared::new();
    let collector = Collector::with_barrier(barrier);
    let n = replacements();
    let s = &*shared;
    let peak = AtomicU64::new(0);
    let peak = &peak;
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&s.stop);
        for r in 0..readers() {
            let c = collector.clone();
            scope.spawn(move || {
                let h = c.register();
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (r as u64 + 1);
                let mut reads = 0;
                while !s.stop.load(Relaxed) {
                    let g = h.pin();
                    for _ in 0..4 {
                        let p = s.slots[next(&mut x) as usize % SLOTS].load(Acquire);
                        s.violations.fetch_add(inspect(p), Relaxed);
                        reads += 1;
                    }
                    drop(g);
                }
                s.reads.fetch_add(reads, Relaxed);
            });
        }
        let writers: Vec<_> = (0..writers())
            .map(|w| {
                let c = collector.clone();
                scope.spawn(move || {
                    let h = c.register();
                    let mut x = 0xD1B5_4A32_D192_ED03 ^ (w as u64 + 1);
                    for i in 0..n {
                        let g = h.pin();
                        let fresh = s.pool.alloc((w as u64) << 40 | i);
                        let old = s.slots[next(&mut x) as usize % SLOTS].swap(fresh, AcqRel);
                        let addr = old as usize;
                        // SAFETY: `old` is unlinked and retired once; the pool outlives the
                        // collector's garbage (drained below before the pool is dropped).
                        g.defer(move || unsafe { poison(addr as *mut Node) });
                        if i % 1024 == 0 {
                            peak.fetch_max(c.pending() as u64, Relaxed);
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        s.stop.store(true, Relaxed);
    });
    assert_eq!(
        s.violations.load(Relaxed),
        0,
        "readers saw freed nodes ({} reads)",
        s.reads.load(Relaxed)
    );
    assert!(s.reads.load(Relaxed) > 0);
    eprintln!(
        "epoch {barrier:?} (prepaid source {}): {} reads, {} replacements, {} nodes reused, \
         (advances, heavy fallbacks) {:?}, peak pending {} (sampled), {} pending at the end",
        PrepaidBarrier::global().source().name(),
        s.reads.load(Relaxed),
        n * writers() as u64,
        s.pool.reused.load(Relaxed),
        collector.advance_counts(),
        peak.load(Relaxed),
        collector.pending()
    );
    // Everyone left: driving collection must free everything (prepaid tickets may take up
    // to PREPAID_PATIENCE each, so allow time, but assert no timing).
    let mut rounds = 0;
    while collector.pending() > 0 && rounds < 10_000 {
        collector.collect();
        if collector.pending() > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        rounds += 1;
    }
    assert_eq!(
        collector.pending(),
        0,
        "garbage left after {rounds} collections"
    );
    assert!(
        s.pool.reused.load(Relaxed) > 0,
        "freed nodes were reused for new ones"
    );
    drop(collector);
    shared.finish();
}

#[test]
fn epoch_heavy_no_use_after_free() {
    epoch_stress(Barrier::Heavy);
}

#[test]
fn epoch_prepaid_no_use_after_free() {
    epoch_stress(Barrier::Prepaid);
}

fn hazard_stress(barrier: Barrier) {
    let shared = Shared::new();
    let domain = Domain::with_barrier(barrier);
    let n = replacements();
    let writers = writers();
    let readers = readers();
    let s = &*shared;
    let d = &domain;
    let peak = AtomicU64::new(0);
    let over_bound = AtomicU64::new(0);
    let (peak, over_bound) = (&peak, &over_bound);
    // The bound grows with the domain's slots: it is read once every reader holds its slot
    // (read before, it was the bound of a domain with no readers, which 16 writers on a
    // 16-core Xeon exceeded at once).
    let registered = std::sync::Barrier::new(readers + 1);
    let registered = &registered;
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&s.stop);
        for r in 0..readers {
            scope.spawn(move || {
                let mut hp = HazardPointer::new_in(d);
                registered.wait();
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (r as u64 + 1);
                let mut reads = 0;
                while !s.stop.load(Relaxed) {
                    let p = hp.protect(&s.slots[next(&mut x) as usize % SLOTS]);
                    s.violations.fetch_add(inspect(p), Relaxed);
                    reads += 1;
                    if reads % 8 == 0 {
                        hp.reset();
                    }
                }
                s.reads.fetch_add(reads, Relaxed);
            });
        }
        registered.wait();
        // Computed once: `writers()` asks the OS for the CPU count (cgroup files), too slow for
        // a loop whose writers must keep up with the readers.
        let bound = domain.pending_bound(writers) as u64;
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                scope.spawn(move || {
                    let mut x = 0xD1B5_4A32_D192_ED03 ^ (w as u64 + 1);
                    for i in 0..n {
                        let fresh = s.pool.alloc((w as u64) << 40 | i);
                        let old = s.slots[next(&mut x) as usize % SLOTS].swap(fresh, AcqRel);
                        // SAFETY: unlinked above and retired once; `poison` only needs the
                        // pool, which outlives the domain's garbage.
                        unsafe { d.retire_with(old, poison) };
                        let pending = d.pending() as u64;
                        peak.fetch_max(pending, Relaxed);
                        // The bound is documented for `Heavy`; prepaid batches also wait up
                        // to PREPAID_PATIENCE for their ticket.
                        if barrier == Barrier::Heavy && pending > bound {
                            over_bound.fetch_add(1, Relaxed);
                        }
                    }
                })
            })
            .collect();
        for w in handles {
            w.join().unwrap();
        }
        s.stop.store(true, Relaxed);
    });
    assert_eq!(
        s.violations.load(Relaxed),
        0,
        "readers saw freed nodes ({} reads)",
        s.reads.load(Relaxed)
    );
    assert!(s.reads.load(Relaxed) > 0);
    assert!(domain.slots() >= readers, "a slot for every reader");
    eprintln!(
        "hazard {barrier:?}: {} reads, {} replacements, {} nodes reused, peak pending {} (bound {})",
        s.reads.load(Relaxed),
        n * writers as u64,
        s.pool.reused.load(Relaxed),
        peak.load(Relaxed),
        domain.pending_bound(writers)
    );
    assert_eq!(
        over_bound.load(Relaxed),
        0,
        "pending exceeded the documented bound {} (peak {})",
        domain.pending_bound(writers),
        peak.load(Relaxed)
    );
    let mut rounds = 0;
    while domain.pending() > 0 && rounds < 10_000 {
        domain.reclaim();
        if domain.pending() > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        rounds += 1;
    }
    assert_eq!(domain.pending(), 0, "garbage left after {rounds} reclaims");
    assert!(s.pool.reused.load(Relaxed) > 0);
    drop(domain);
    shared.finish();
}

#[test]
fn hazard_heavy_no_use_after_free() {
    hazard_stress(Barrier::Heavy);
}

#[test]
fn hazard_prepaid_no_use_after_free() {
    hazard_stress(Barrier::Prepaid);
}

/// A reader pinned for the whole run: nothing retired after it pinned can be freed, so the
/// garbage grows with every retirement (the documented, unbounded case of epochs).
#[test]
fn epoch_stalled_reader_blocks_reclamation() {
    let collector = Collector::with_barrier(Barrier::Heavy);
    let stalled = collector.register();
    let pinned = stalled.pin();
    let writer = collector.register();
    let n = 10_000usize;
    for i in 0..n {
        let g = writer.pin();
        // SAFETY: a fresh Box nobody else can reach.
        unsafe { g.defer_destroy(Box::into_raw(Box::new(i))) };
    }
    writer.flush();
    for _ in 0..10 {
        collector.collect();
    }
    assert_eq!(
        collector.pending(),
        n,
        "a pinned reader holds everything back"
    );
    drop(pinned);
    for _ in 0..10 {
        collector.collect();
    }
    assert_eq!(collector.pending(), 0);
    drop((stalled, writer));
}

/// A stalled hazard pointer holds back only the node it protects.
#[test]
fn hazard_stalled_reader_holds_one_node() {
    let domain = Domain::new();
    let shared = AtomicPtr::new(Box::into_raw(Box::new(0usize)));
    let mut stalled = HazardPointer::new_in(&domain);
    let held = stalled.protect(&shared);
    let n = 10_000usize;
    for i in 1..=n {
        let old = shared.swap(Box::into_raw(Box::new(i)), AcqRel);
        // SAFETY: unlinked, from a Box, retired once.
        unsafe { domain.retire(old) };
        // One retiring thread: the documented bound is the threshold itself.
        assert!(domain.pending() <= domain.threshold());
    }
    domain.reclaim();
    assert_eq!(domain.pending(), 1, "only the protected node is left");
    // SAFETY: still protected.
    assert_eq!(unsafe { *held }, 0);
    stalled.reset();
    domain.reclaim();
    assert_eq!(domain.pending(), 0);
    // SAFETY: the last node is still linked; nobody else uses it.
    drop(unsafe { Box::from_raw(shared.load(Acquire)) });
}

/// The default collector and domain, through the thread-local handle, from many threads.
#[test]
fn defaults_work_across_threads() {
    use spindle_sync::smr::epoch;
    let shared = AtomicPtr::new(Box::into_raw(Box::new(0u64)));
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let shared = &shared;
            scope.spawn(move || {
                for i in 0..1000 {
                    let g = epoch::pin();
                    let nested = epoch::pin();
                    assert!(epoch::is_pinned());
                    drop(nested);
                    let old = shared.swap(Box::into_raw(Box::new(t * 10_000 + i)), AcqRel);
                    // SAFETY: unlinked, from a Box, retired once.
                    unsafe { g.defer_destroy(old) };
                }
                let mut hp = HazardPointer::new();
                let mut other = AtomicPtr::new(Box::into_raw(Box::new(7u64)));
                // SAFETY: `other` holds a live Box retired only through the global domain.
                assert_eq!(unsafe { hp.protect_ref(&other) }, Some(&7));
                hp.reset();
                // SAFETY: unlinked (the AtomicPtr is ours and dropped), retired once.
                unsafe { Domain::global().retire(*other.get_mut()) };
            });
        }
    });
    // SAFETY: the last node is still linked; nobody else uses it.
    drop(unsafe { Box::from_raw(shared.load(Acquire)) });
}

/// Reads the hazard-pointer FSSF test makes at scale 1 (the epoch one makes half as many),
/// and a cap on the writer's replacements.
const FSSF_READS: u64 = 2_000_000;
const FSSF_MAX_REPLACEMENTS: u64 = 20_000_000;

/// The FSSF window itself (seed 000): one reader protects the single shared pointer, holds it
/// for a few hundred ns and inspects it, while one writer replaces it, retires the old node
/// and reclaims *after every retirement*, so that a scan follows an unlink as closely as
/// possible. Without the cold side's barrier, a reader's publication can still sit in its
/// store buffer (waiting for the cache line that the scanner just read) when the scan runs:
/// with `fence::heavy()` removed from the hazard domain's reclaim, the hazard test saw 3 to 20
/// freed nodes per 10^6 to 2·10^6 reads on the development VM (2 vCPUs); with it, none. The
/// same mutation of the epoch collector was at first *not* caught (0 in 8·10^6 replacements:
/// the advancer's `xchg` of the epoch gives the reader's store time to drain), so the epoch
/// test stuffs the reader's store buffer before each pin (see [`Stuffing`]): with the
/// barrier removed it saw 133 freed nodes in 10^6 reads; with it, none in three runs. A
/// 12 µs spin in place of the barrier also gave none — the window closes by itself within
/// those 12 µs — so the test catches a scan with no barrier, not one with a slow non-barrier.
/// Needs two CPUs to mean anything; it runs (and must pass) with fewer.
/// `drain` must free every retired node: it runs before the nodes' pool goes away.
fn fssf_window(
    reads: u64,
    protect_and_inspect: impl Fn(&Shared) -> u64 + Sync,
    replace: impl Fn(&Shared, u64) + Sync,
    drain: impl FnOnce(),
) {
    let shared = Shared::new();
    let target = ((reads as f64 * scale()) as u64).max(1);
    let cap = ((FSSF_MAX_REPLACEMENTS as f64 * scale()) as u64).max(1);
    let s = &*shared;
    let (protect_and_inspect, replace) = (&protect_and_inspect, &replace);
    let mut replaced = 0;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut reads = 0;
            while !s.stop.load(Relaxed) {
                s.violations.fetch_add(protect_and_inspect(s), Relaxed);
                reads += 1;
                if reads % 1024 == 0 {
                    s.reads.store(reads, Relaxed);
                }
            }
            s.reads.store(reads, Relaxed);
        });
        let replaced = &mut replaced;
        scope.spawn(move || {
            while s.reads.load(Relaxed) < target && *replaced < cap {
                replace(s, *replaced);
                *replaced += 1;
            }
            s.stop.store(true, Relaxed);
        });
    });
    eprintln!(
        "fssf window: {} reads, {replaced} replacements, {} violations",
        s.reads.load(Relaxed),
        s.violations.load(Relaxed)
    );
    assert_eq!(s.violations.load(Relaxed), 0, "the reader saw freed nodes");
    drain();
    shared.finish();
}

/// Hold a protection for a few hundred ns before inspecting, so that a premature free lands
/// inside it.
fn hold() {
    for _ in 0..64 {
        std::hint::spin_loop();
    }
}

#[test]
fn hazard_fssf_window() {
    let domain = Domain::new();
    let hp = Mutex::new(HazardPointer::new_in(&domain));
    fssf_window(
        FSSF_READS,
        |s| {
            let mut hp = hp.lock().unwrap();
            let p = hp.protect(&s.slots[0]);
            hold();
            inspect(p)
        },
        |s, i| {
            let old = s.slots[0].swap(s.pool.alloc(i), AcqRel);
            // SAFETY: unlinked above and retired once.
            unsafe { domain.retire_with(old, poison) };
            domain.reclaim();
        },
        || {
            hp.lock().unwrap().reset();
            domain.reclaim();
            assert_eq!(domain.pending(), 0);
        },
    );
}

/// Store-buffer stuffing: just before it pins, the reader stores to `STUFF_LINES` cache lines
/// it has not touched for a long while (a cursor sweeping a buffer much larger than the
/// caches), so each store misses. x86 drains stores in order, so the reader's publication
/// then sits in its store buffer behind those misses for a microsecond or more — while its
/// later loads (the epoch re-check, the shared pointer) run ahead. That widens the FSSF
/// window far beyond what a scan preceded by an `xchg` closes by itself.
const STUFF_LINES: usize = 32;
const STUFF_BYTES: usize = 256 << 20;

struct Stuffing {
    buf: Vec<AtomicU64>,
    cursor: std::cell::Cell<usize>,
}

impl Stuffing {
    fn new() -> Stuffing {
        Stuffing {
            buf: (0..STUFF_BYTES / 8).map(|_| AtomicU64::new(0)).collect(),
            cursor: std::cell::Cell::new(0),
        }
    }

    fn stuff(&self) {
        let mut c = self.cursor.get();
        for _ in 0..STUFF_LINES {
            self.buf[c].store(1, Relaxed);
            c = (c + 8) % self.buf.len();
        }
        self.cursor.set(c);
    }
}

// SAFETY: only the reader thread uses a `Stuffing` (the `Cell` is never shared).
unsafe impl Sync for Stuffing {}

#[test]
fn epoch_fssf_window() {
    let collector = Collector::with_barrier(Barrier::Heavy);
    let stuffing = Stuffing::new();
    fssf_window(
        FSSF_READS / 2,
        |s| {
            thread_local! {
                static H: std::cell::RefCell<Option<spindle_sync::smr::epoch::LocalHandle>> =
                    const { std::cell::RefCell::new(None) };
            }
            H.with(|h| {
                let mut h = h.borrow_mut();
                let h = h.get_or_insert_with(|| collector.register());
                stuffing.stuff();
                let g = h.pin();
                let p = s.slots[0].load(Acquire);
                hold();
                let bad = inspect(p);
                drop(g);
                bad
            })
        },
        |s, i| {
            thread_local! {
                static H: std::cell::RefCell<Option<spindle_sync::smr::epoch::LocalHandle>> =
                    const { std::cell::RefCell::new(None) };
            }
            H.with(|h| {
                let mut h = h.borrow_mut();
                let h = h.get_or_insert_with(|| collector.register());
                let g = h.pin();
                let old = s.slots[0].swap(s.pool.alloc(i), AcqRel);
                let addr = old as usize;
                // SAFETY: unlinked above and retired once.
                g.defer(move || unsafe { poison(addr as *mut Node) });
                drop(g);
                h.flush();
                collector.collect();
            });
        },
        || {
            // The test threads have exited, sealing their bags.
            for _ in 0..10 {
                collector.collect();
            }
            assert_eq!(collector.pending(), 0);
        },
    );
}
