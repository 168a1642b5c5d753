//! The shared stack of free batches, one per class (see [`central`](crate::central) for the
//! protocol and its argument). The code is written once, in a macro, and instantiated twice:
//! on the process's atomics with `cmpxchg16b` ([`Stack`]), and, under `--cfg loom`, on loom's
//! atomics with the pair's compare-and-swap under a loom mutex, for the models in
//! `loom_models.rs` (loom cannot run inline assembly; the models check the protocol over the
//! locked pair, with the readers' loads of `top`, `tag` and the links outside it, as in the
//! real code).

macro_rules! batch_stack {
    ($($seg:ident)::+ $(, $lock:ident : $lock_ty:ty)?) => {
        use $($seg)::+::{AtomicU64, AtomicUsize, Ordering::*};

        /// `(top, tag)`, 16 bytes, compared and swapped together.
        #[repr(C, align(16))]
        pub struct Stack {
            top: AtomicUsize,
            tag: AtomicU64,
            $($lock: $lock_ty,)?
        }

        /// A block's link word `word` (0: the next block of its batch; 1: the next batch and
        /// the batch's length).
        ///
        /// # Safety
        /// `p` is a block of at least two words that stays mapped (the region's blocks: for
        /// the process's life).
        #[inline(always)]
        pub unsafe fn link<'a>(p: usize, word: usize) -> &'a AtomicUsize {
            // SAFETY: the caller's contract; the words are accessed atomically because a
            // stale pop may read them while their owner writes (the ABA argument).
            unsafe { &*(p as *const AtomicUsize).add(word) }
        }

        impl Stack {
            /// Pushes a batch: `first` and the blocks chained from it, `n` in all (at most
            /// 65 535).
            ///
            /// # Safety
            /// The batch's blocks belong to the caller and satisfy [`link`]'s contract.
            pub unsafe fn push(&self, first: usize, n: usize) {
                loop {
                    let (tag, top) = (self.tag.load(Acquire), self.top.load(Acquire));
                    // SAFETY: first is the caller's block.
                    unsafe { link(first, 1) }.store(top | (n << 48), Relaxed);
                    if self.cas_pair((top, tag), (first, tag.wrapping_add(1))) {
                        return;
                    }
                }
            }

            /// Pops a batch: its first block and its length.
            ///
            /// # Safety
            /// Every block ever pushed satisfies [`link`]'s contract.
            pub unsafe fn pop(&self) -> Option<(usize, usize)> {
                loop {
                    let (tag, top) = (self.tag.load(Acquire), self.top.load(Acquire));
                    if top == 0 {
                        return None;
                    }
                    // SAFETY: top was pushed (possibly popped since: still mapped).
                    let w = unsafe { link(top, 1) }.load(Relaxed);
                    let (next, n) = (w & ((1 << 48) - 1), w >> 48);
                    if self.cas_pair((top, tag), (next, tag.wrapping_add(1))) {
                        return Some((top, n));
                    }
                }
            }
        }
    };
}

mod hw {
    batch_stack!(core::sync::atomic);

    impl Stack {
        /// An empty stack.
        pub const fn new() -> Self {
            Stack {
                top: AtomicUsize::new(0),
                tag: AtomicU64::new(0),
            }
        }

        /// The `cmpxchg16b` on the pair.
        #[inline]
        fn cas_pair(&self, old: (usize, u64), new: (usize, u64)) -> bool {
            let ok: u8;
            // SAFETY: `lock cmpxchg16b` on the 16-byte aligned pair: compares rdx:rax with it
            // and, if equal, stores rcx:rbx and sets ZF. rbx may not be an asm operand, so the
            // new low word travels in another register and is swapped in and out around the
            // instruction; the address is pinned to rsi (a `reg` operand could be given rbx,
            // which the swap changes), and the flag is read after rbx is restored (`mov` keeps
            // the flags; `ok` may itself be bl).
            unsafe {
                core::arch::asm!(
                    "xchg rbx, {lo}",
                    "lock cmpxchg16b xmmword ptr [rsi]",
                    "mov rbx, {lo}",
                    "sete {ok}",
                    in("rsi") self as *const Stack,
                    lo = inout(reg) new.0 => _,
                    ok = out(reg_byte) ok,
                    inout("rax") old.0 => _,
                    inout("rdx") old.1 => _,
                    in("rcx") new.1,
                    options(nostack),
                );
            }
            ok != 0
        }
    }
}

impl Default for hw::Stack {
    fn default() -> Self {
        Self::new()
    }
}

pub use hw::{link, Stack};

#[cfg(loom)]
pub(crate) mod model {
    batch_stack!(loom::sync::atomic, lock: loom::sync::Mutex<()>);

    impl Stack {
        /// An empty stack.
        pub fn new() -> Self {
            Stack {
                top: AtomicUsize::new(0),
                tag: AtomicU64::new(0),
                lock: loom::sync::Mutex::new(()),
            }
        }

        /// The pair's compare-and-swap, under the lock (loom has no `cmpxchg16b`).
        fn cas_pair(&self, old: (usize, u64), new: (usize, u64)) -> bool {
            let _g = self.lock.lock().unwrap();
            if self.top.load(SeqCst) != old.0 || self.tag.load(SeqCst) != old.1 {
                return false;
            }
            self.top.store(new.0, SeqCst);
            self.tag.store(new.1, SeqCst);
            true
        }
    }
}
