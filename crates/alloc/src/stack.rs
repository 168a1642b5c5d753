//! The shared stack of free batches, one per class (see [`central`](crate::central) for the
//! protocol and its argument). The code is written once, in a macro, and instantiated twice:
//! on the process's atomics with `cmpxchg16b` (x86-64) or an exclusive pair `ldaxp`/`stlxp`
//! (AArch64) ([`Stack`]), and, under `--cfg loom`, on loom's
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
        #[cfg(target_arch = "x86_64")]
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

        /// The pair's compare-and-swap on AArch64: a load-acquire exclusive pair and a
        /// store-release exclusive pair, retried while the store fails spuriously. A successful
        /// `stlxp` proves that nothing wrote the pair since the `ldaxp`, so the two halves
        /// compared were read as one 16-byte value (a torn read could only fail the compare).
        /// Acquire and release are what the protocol needs of it: a batch's links, written
        /// before its push, happen before the pop that reads them (`central`'s "Memory model").
        #[cfg(target_arch = "aarch64")]
        #[inline]
        fn cas_pair(&self, old: (usize, u64), new: (usize, u64)) -> bool {
            let failed: u32;
            // SAFETY: the exclusive pair accesses address the 16-byte aligned pair (`Stack` is
            // `repr(C, align(16))`, `top` then `tag`, little-endian), which lives as long as
            // `&self`. Outputs are `out`, so none shares a register with an input: the
            // status register of `stlxp` differs from its data and address registers, as the
            // architecture requires. `clrex` drops the reservation of a failed compare.
            unsafe {
                core::arch::asm!(
                    "2:",
                    "ldaxp {lo}, {hi}, [{p}]",
                    "cmp {lo}, {old_lo}",
                    "ccmp {hi}, {old_hi}, #0, eq",
                    "b.ne 3f",
                    "stlxp {st:w}, {new_lo}, {new_hi}, [{p}]",
                    "cbnz {st:w}, 2b",
                    "b 4f",
                    "3:",
                    "clrex",
                    "mov {st:w}, #1",
                    "4:",
                    p = in(reg) self as *const Stack,
                    old_lo = in(reg) old.0,
                    old_hi = in(reg) old.1,
                    new_lo = in(reg) new.0,
                    new_hi = in(reg) new.1,
                    lo = out(reg) _,
                    hi = out(reg) _,
                    st = out(reg) failed,
                    options(nostack),
                );
            }
            failed == 0
        }
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "spindle-alloc's shared stacks need a 16-byte compare-and-swap: implemented for x86-64 \
     (cmpxchg16b) and AArch64 (ldaxp/stlxp)"
);

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
