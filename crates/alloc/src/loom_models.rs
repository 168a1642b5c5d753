//! Loom models of the shared batch stack ([`crate::stack`]): threads pop batches, own their
//! blocks for a while and push them back, while another thread pushes and pops too. Every
//! interleaving (up to a preemption bound) must hand each block to one owner at a time (an
//! ownership flag per block, set on pop and cleared before push, must never be found set),
//! and the stack must end holding every block exactly once. The ABA case the tag guards
//! against is in reach: a popper reads `top` and its link, another thread pops that block and
//! the next and pushes the first back, and the first thread's CAS must then fail.

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use loom::sync::Arc;

use crate::stack::model::Stack;

/// A block: the two link words, as loom atomics (the stack casts addresses to them).
type Block = [AtomicUsize; 2];

fn block() -> Box<Block> {
    Box::new([AtomicUsize::new(0), AtomicUsize::new(0)])
}

fn builder(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b
}

/// `blocks` one-block batches on the stack; `threads` threads each pop one batch, check and
/// mark its owner flag, and push it back; at the end every block is on the stack once.
fn pop_and_push_back(threads: usize, blocks: usize, preemptions: usize) {
    builder(preemptions).check(move || {
        let owned: Arc<Vec<AtomicBool>> =
            Arc::new((0..blocks).map(|_| AtomicBool::new(false)).collect());
        let mem: Arc<Vec<Box<Block>>> = Arc::new((0..blocks).map(|_| block()).collect());
        let addr = |m: &Vec<Box<Block>>, i: usize| &*m[i] as *const Block as usize;
        let stack = Arc::new(Stack::new());
        for i in 0..blocks {
            // SAFETY: the model's blocks live until its end.
            unsafe { stack.push(addr(&mem, i), 1) };
        }
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let (stack, mem, owned) =
                    (Arc::clone(&stack), Arc::clone(&mem), Arc::clone(&owned));
                loom::thread::spawn(move || {
                    // SAFETY: as above.
                    if let Some((p, n)) = unsafe { stack.pop() } {
                        assert_eq!(n, 1);
                        let i = (0..mem.len())
                            .find(|&i| addr(&mem, i) == p)
                            .expect("a model block");
                        assert!(!owned[i].swap(true, AcqRel), "block {i} handed out twice");
                        owned[i].store(false, Release);
                        // SAFETY: as above; the block is ours.
                        unsafe { stack.push(p, 1) };
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let mut seen = vec![false; blocks];
        // SAFETY: as above.
        while let Some((p, _)) = unsafe { stack.pop() } {
            let i = (0..blocks)
                .find(|&i| addr(&mem, i) == p)
                .expect("a model block");
            assert!(!seen[i], "block {i} twice on the stack");
            seen[i] = true;
        }
        assert!(seen.iter().all(|&s| s), "a block was lost");
    });
}

#[test]
fn two_poppers_on_two_blocks() {
    pop_and_push_back(2, 2, 3);
}

#[test]
fn three_poppers_on_two_blocks() {
    pop_and_push_back(3, 2, 1);
}

/// The ABA shape: one thread pops twice and pushes the first block back, while another pops
/// once; without the tag the second thread could install a block that is out.
#[test]
fn pop_pop_push_against_a_pop() {
    builder(3).check(|| {
        let mem: Arc<Vec<Box<Block>>> = Arc::new((0..3).map(|_| block()).collect());
        let addr = |m: &Vec<Box<Block>>, i: usize| &*m[i] as *const Block as usize;
        let stack = Arc::new(Stack::new());
        for i in 0..3 {
            // SAFETY: the model's blocks live until its end.
            unsafe { stack.push(addr(&mem, i), 1) };
        }
        let (s2, m2) = (Arc::clone(&stack), Arc::clone(&mem));
        let t = loom::thread::spawn(move || {
            // SAFETY: as above.
            let a = unsafe { s2.pop() }.map(|x| x.0);
            let b = unsafe { s2.pop() }.map(|x| x.0);
            if let Some(a) = a {
                // SAFETY: as above; a is ours.
                unsafe { s2.push(a, 1) };
            }
            let _ = &m2;
            b
        });
        // SAFETY: as above.
        let mine = unsafe { stack.pop() }.map(|x| x.0);
        let theirs = t.join().unwrap();
        assert!(
            mine.is_none() || mine != theirs,
            "the same block popped by both threads"
        );
        let mut left = 0;
        // SAFETY: as above.
        while let Some((p, _)) = unsafe { stack.pop() } {
            assert!(
                Some(p) != mine && Some(p) != theirs,
                "a popped block is still on the stack"
            );
            left += 1;
        }
        assert_eq!(
            left + usize::from(mine.is_some()) + usize::from(theirs.is_some()),
            3
        );
    });
}
