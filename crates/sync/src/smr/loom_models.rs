//! Loom models of both reclamation schemes: a reader protects (pins, or publishes a hazard
//! pointer) and dereferences a shared pointer while a writer swaps in a new node, retires the
//! old one and reclaims. Nodes live in an arena for the whole execution; the "deleter" only
//! sets the node's loom `freed` flag, so a premature free shows as a reader seeing the flag
//! set (loom explores every value a `Relaxed` load may return under the happens-before edges
//! the protocol creates), never as a real use after free. After the threads join, reclaiming
//! must free the old node (liveness).
//!
//! Under loom `fence::light()` and `fence::heavy()` are both `SeqCst` fences, and the prepaid
//! barrier is compiled out, so the collectors use `Barrier::Heavy`.

use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;

use super::epoch::Collector;
use super::hazard::{Domain, HazardPointer};
use super::{AtomicPtr, Barrier};
use crate::primitives::Ordering::*;

struct Node {
    freed: AtomicBool,
}

fn arena() -> Arc<[Node; 2]> {
    Arc::new([
        Node {
            freed: AtomicBool::new(false),
        },
        Node {
            freed: AtomicBool::new(false),
        },
    ])
}

fn node_ptr(arena: &[Node; 2], i: usize) -> *mut Node {
    &arena[i] as *const Node as *mut Node
}

/// Dereference a protected node: it must not have been freed.
fn check(p: *mut Node) {
    // SAFETY: nodes live in the arena for the whole execution.
    let freed = unsafe { (*p).freed.load(Relaxed) };
    assert!(!freed, "the reader saw a node freed under its protection");
}

fn builder(preemption_bound: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemption_bound);
    b.max_branches = 20_000;
    b
}

/// Epochs: the writer swaps, defers the old node, flushes and collects twice while a reader
/// pins, loads and dereferences (twice, in two pinned sections, when `two_sections`).
fn epoch_model(two_sections: bool, preemption_bound: usize) {
    builder(preemption_bound).check(move || {
        let nodes = arena();
        let shared = Arc::new(AtomicPtr::new(node_ptr(&nodes, 0)));
        let collector = Collector::with_barrier(Barrier::Heavy);

        let reader = {
            let (c, shared) = (collector.clone(), shared.clone());
            thread::spawn(move || {
                let h = c.register();
                for _ in 0..if two_sections { 2 } else { 1 } {
                    let g = h.pin();
                    check(shared.load(Acquire));
                    drop(g);
                }
            })
        };

        let h = collector.register();
        {
            let g = h.pin();
            let old = shared.swap(node_ptr(&nodes, 1), AcqRel);
            assert_eq!(old, node_ptr(&nodes, 0));
            let n = nodes.clone();
            g.defer(move || n[0].freed.store(true, Relaxed));
        }
        h.flush();
        collector.collect();
        collector.collect();
        reader.join().unwrap();

        for _ in 0..3 {
            collector.collect();
        }
        assert_eq!(
            collector.pending(),
            0,
            "everything is freed once readers leave"
        );
        assert!(nodes[0].freed.load(Relaxed));
    });
}

#[test]
fn epoch_reader_vs_writer() {
    epoch_model(false, 3);
}

#[test]
fn epoch_reader_two_sections() {
    epoch_model(true, 2);
}

/// Epochs: the reader's guard outlives its handle (the record is released at unpin), and a
/// second handle registered afterwards on the main thread may reuse it.
#[test]
fn epoch_guard_outlives_handle() {
    builder(2).check(|| {
        let nodes = arena();
        let shared = Arc::new(AtomicPtr::new(node_ptr(&nodes, 0)));
        let collector = Collector::with_barrier(Barrier::Heavy);

        let reader = {
            let (c, shared) = (collector.clone(), shared.clone());
            thread::spawn(move || {
                let g = c.register().pin();
                check(shared.load(Acquire));
                drop(g);
            })
        };

        let h = collector.register();
        {
            let g = h.pin();
            let old = shared.swap(node_ptr(&nodes, 1), AcqRel);
            let n = nodes.clone();
            let _ = old;
            g.defer(move || n[0].freed.store(true, Relaxed));
        }
        h.flush();
        collector.collect();
        reader.join().unwrap();
        drop(h);
        let h2 = collector.register();
        h2.flush();
        for _ in 0..3 {
            collector.collect();
        }
        assert_eq!(collector.pending(), 0);
        assert!(nodes[0].freed.load(Relaxed));
    });
}

/// Hazard pointers' deleter: marks the node freed.
unsafe fn mark_freed(n: *mut Node) {
    // SAFETY: nodes live in the arena for the whole execution.
    unsafe { (*n).freed.store(true, Relaxed) };
}

/// Hazard pointers: the writer swaps, retires the old node and reclaims while a reader
/// protects and dereferences (twice, re-protecting, when `twice`).
fn hazard_model(twice: bool, preemption_bound: usize) {
    builder(preemption_bound).check(move || {
        let nodes = arena();
        let shared = Arc::new(AtomicPtr::new(node_ptr(&nodes, 0)));
        let domain = Arc::new(Domain::with_barrier(Barrier::Heavy));

        let reader = {
            let (d, shared) = (domain.clone(), shared.clone());
            thread::spawn(move || {
                let mut hp = HazardPointer::new_in(&d);
                check(hp.protect(&shared));
                if twice {
                    check(hp.protect(&shared));
                }
                hp.reset();
            })
        };

        let old = shared.swap(node_ptr(&nodes, 1), AcqRel);
        // SAFETY: unlinked above, retired once; the deleter only flags the arena node.
        unsafe { domain.retire_with(old, mark_freed) };
        domain.reclaim();
        reader.join().unwrap();

        domain.reclaim();
        assert_eq!(
            domain.pending(),
            0,
            "everything is freed once readers leave"
        );
        assert!(nodes[0].freed.load(Relaxed));
    });
}

#[test]
fn hazard_reader_vs_writer() {
    hazard_model(false, 3);
}

#[test]
fn hazard_reader_reprotects() {
    hazard_model(true, 2);
}

/// Hazard pointers: a reader drops its hazard pointer and takes a new one (slot reuse) while
/// the writer retires and reclaims.
#[test]
fn hazard_slot_reuse() {
    builder(2).check(|| {
        let nodes = arena();
        let shared = Arc::new(AtomicPtr::new(node_ptr(&nodes, 0)));
        let domain = Arc::new(Domain::with_barrier(Barrier::Heavy));

        let reader = {
            let (d, shared) = (domain.clone(), shared.clone());
            thread::spawn(move || {
                drop(HazardPointer::new_in(&d));
                let mut hp = HazardPointer::new_in(&d);
                check(hp.protect(&shared));
            })
        };

        let old = shared.swap(node_ptr(&nodes, 1), AcqRel);
        // SAFETY: unlinked above, retired once.
        unsafe { domain.retire_with(old, mark_freed) };
        domain.reclaim();
        reader.join().unwrap();
        domain.reclaim();
        assert_eq!(domain.pending(), 0);
        assert!(nodes[0].freed.load(Relaxed));
    });
}

/// Epochs with three threads: the writer unlinks with a plain `Release` store (not a locked
/// read-modify-write), defers and flushes, while a third thread advances the epoch. This is
/// the model in which the seal's `fence(SeqCst)` matters: without it the writer may tag its
/// bag with an epoch read before its unlink is visible.
#[test]
fn epoch_plain_store_unlink_third_collector() {
    builder(2).check(|| {
        let nodes = arena();
        let shared = Arc::new(AtomicPtr::new(node_ptr(&nodes, 0)));
        let collector = Collector::with_barrier(Barrier::Heavy);

        let reader = {
            let (c, shared) = (collector.clone(), shared.clone());
            thread::spawn(move || {
                let h = c.register();
                let g = h.pin();
                check(shared.load(Acquire));
                drop(g);
            })
        };
        let advancer = {
            let c = collector.clone();
            thread::spawn(move || {
                c.collect();
                c.collect();
            })
        };

        let h = collector.register();
        {
            let g = h.pin();
            let old = shared.load(Relaxed);
            shared.store(node_ptr(&nodes, 1), Release);
            let n = nodes.clone();
            let _ = old;
            g.defer(move || n[0].freed.store(true, Relaxed));
        }
        h.flush();
        reader.join().unwrap();
        advancer.join().unwrap();
        drop(h);
        for _ in 0..3 {
            collector.collect();
        }
        assert_eq!(collector.pending(), 0);
        assert!(nodes[0].freed.load(Relaxed));
    });
}
