//! The zero-capacity flavour of [`mpmc::channel`](crate::mpmc::channel): a *rendezvous*, as
//! crossbeam-channel's `bounded(0)`. A send completes only when a receiver takes its value
//! (and a receive only when a sender hands one over); `try_send` succeeds only when a receiver
//! is already blocked in `recv`, `try_recv` only when a sender is blocked in `send`.
//!
//! # Protocol
//!
//! One lock ([`SpindleLock`]) guards two FIFO queues of blocked operations, `senders` and
//! `receivers`, and a `disconnected` flag. A blocked operation owns a *packet*: a value slot
//! (the sender's value, or room for the receiver's) and a futex word `state`, `WAITING` until
//! a partner or a disconnection settles it (`DONE` or `DISCONNECTED`).
//!
//! ```text
//! send(x):                                       (recv is the mirror image)
//!   lock
//!   disconnected        → unlock; Disconnected(x)
//!   pop a receiver r    → r.value = x; store(r.state, DONE); unlock; wake r; Ok
//!   try_send            → unlock; Full(x)
//!   push own packet p (holding x); unlock
//!   wait until p.state != WAITING or the deadline
//!   DONE → Ok;  DISCONNECTED → Disconnected(p.value)
//!   deadline: lock; p still queued → remove it; unlock; Timeout(p.value)
//!             p gone (settled meanwhile, under the lock) → unlock; as settled
//! ```
//!
//! **Invariants.** A packet is in a queue exactly while its owner is blocked and nobody has
//! settled it; packets leave the queues only under the lock — taken by a partner, drained by
//! the disconnection, or removed by their owner at its deadline — and `state` changes from
//! `WAITING` once, by whoever removed the packet (under the lock, or after releasing it when
//! the value is moved after unlocking: a receive that waits for a select's sender to fill its
//! packet, a select's completion). An owner that finds its packet gone from the queue at its
//! deadline waits for that settling store. So each packet is removed
//! once, and each value has one owner at a time: the sender until a receiver's critical
//! section moves it (out of the sender's packet, or into the receiver's), the receiver after.
//! An owner reads its packet's value only after it saw `state` settled (`Acquire`, pairing
//! with the settling `Release` store, made after the partner wrote or took the value) or after
//! it removed the packet itself.
//!
//! **Why no wake-up is lost.** The owner sleeps in `futex_wait(state, WAITING)`; the settling
//! store comes before the partner's `futex_wake`. Either the store precedes the kernel's
//! comparison (the owner does not sleep) or the owner is queued in the futex before the wake.
//! A spurious return re-reads `state`.
//!
//! **Linearisation points.** A completed send and its receive: the critical section that
//! pairs them. `Full` / `Empty` (the `try_*` forms), `Timeout` and `Disconnected`: the critical
//! section that found no partner, removed the own packet, or saw the flag.
//!
//! **Selects and async sends.** A queue entry may carry a context (`select.rs`): a blocked
//! select's, with the operation's index and an empty packet, or an async send's, with its
//! value. A partner that pops such an entry must first win the context's
//! `CAS(WAITING → index)`; if it loses, it drops the entry and pops the next. It then writes
//! into a receiver's packet and settles it as above; from a sender's packet it takes the
//! value once the packet is `full` (a select's sender fills its packet in its completion,
//! after it was selected). A plain blocked operation whose packet a select's claim popped
//! (settled only by that select's completion) waits for the settling store even past its
//! deadline. `Select::ready` and async receives do not queue: they are on watch lists that
//! each queuing, and the disconnection, wake after the critical section.
//!
//! **Disconnection** (as crossbeam-channel): when the last sender or the last receiver goes,
//! the flag is set and every queued packet settles `DISCONNECTED`: a blocked receiver gets
//! `Disconnected`, a blocked sender its value back.
//!
//! **Orderings.** The lock orders every queue and flag access (its `Acquire`/`Release`); the
//! `state` store and load are `Release`/`Acquire` for the value written or taken before it.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::task::{Poll, Waker};

use crate::futex::Parking;
use crate::lock::SpindleLock;
use crate::primitives::{spin_loop, Arc, AtomicU32, AtomicUsize, Ordering::*};
use crate::select::{Ctx, Observers, Token};
use crate::time::Deadline;

/// A packet's value slot: under loom, loom's cell, so that the models check the ownership
/// argument (every access ordered after the previous one by another thread).
#[cfg(not(loom))]
type ValueCell<T> = UnsafeCell<Option<T>>;
#[cfg(loom)]
type ValueCell<T> = loom::cell::UnsafeCell<Option<T>>;

const WAITING: u32 = 0;
const DONE: u32 = 1;
const DISCONNECTED: u32 = 2;

/// How many times a blocked operation re-reads its packet before it sleeps: a partner that is
/// already running settles it within a few hundred nanoseconds.
#[cfg(not(loom))]
const SPINS: u32 = 64;
#[cfg(loom)]
const SPINS: u32 = 0;

/// Whether an operation may block, and until when (`None`: for ever).
pub(crate) enum Wait {
    No,
    Until(Option<Deadline>),
}

/// Why an operation did not complete; it carries the value back where there is one.
pub(crate) enum Failed<T> {
    /// No partner was waiting (`Wait::No`), or none came before the deadline.
    NoPartner(T),
    Disconnected(T),
}

/// A blocked operation's packet.
pub(crate) struct Packet<T> {
    state: AtomicU32,
    /// A sender's packet: 1 once it holds the value (at once for a plain send; for a select's,
    /// when its owner completes the selected send, which the receiver that popped it waits for).
    full: AtomicU32,
    value: ValueCell<T>,
    parking: Parking,
}

/// An async send waiting in the senders' queue: its task's context and its packet.
pub(crate) struct QueuedSend<T> {
    ctx: Arc<Ctx>,
    packet: Arc<Packet<T>>,
}

/// A queued operation: its packet, and the select it belongs to (its context and the
/// operation's index there), if any.
struct Entry<T> {
    packet: Arc<Packet<T>>,
    select: Option<(Arc<Ctx>, usize)>,
}

impl<T> Entry<T> {
    /// After pairing with this entry, with no lock held: wake its select or task, if any (its
    /// waker is foreign code, which may take the executor's locks).
    fn wake_select(&self) {
        if let Some((ctx, _)) = &self.select {
            ctx.wake();
        }
    }
}

impl<T> Packet<T> {
    fn new(value: Option<T>) -> Arc<Packet<T>> {
        Arc::new(Packet {
            state: AtomicU32::new(WAITING),
            full: AtomicU32::new(u32::from(value.is_some())),
            value: ValueCell::new(value),
            parking: Parking::new(),
        })
    }

    /// Waits until a sender's packet holds its value (see `full`).
    // Under loom `SPINS` is 0.
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    fn wait_full(&self) {
        for _ in 0..SPINS {
            if self.full.load(Acquire) != 0 {
                return;
            }
            spin_loop();
        }
        while self.full.load(Acquire) == 0 {
            self.parking.wait32(&self.full, 0, None);
        }
    }

    /// Waits until the packet is settled (true) or the deadline passes (false).
    // Under loom `SPINS` is 0.
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    fn wait(&self, deadline: Option<Deadline>) -> bool {
        for _ in 0..SPINS {
            if self.state.load(Acquire) != WAITING {
                return true;
            }
            spin_loop();
        }
        loop {
            if self.state.load(Acquire) != WAITING {
                return true;
            }
            if deadline.is_some_and(Deadline::has_passed) {
                return false;
            }
            self.parking.wait32(&self.state, WAITING, deadline);
        }
    }

    /// Settles the packet, once, by whoever removed it from its queue (see the invariants);
    /// the caller wakes its owner with no lock held.
    fn settle(&self, how: u32) {
        self.state.store(how, Release);
    }

    fn wake(&self) {
        self.parking.wake32(&self.state, 1);
    }

    /// The value, by its owner once the packet left the queues (see the invariants).
    ///
    /// # Safety
    /// The caller owns the packet's value: it saw `state` settled, or removed the packet
    /// from its queue itself.
    unsafe fn take(&self) -> Option<T> {
        // SAFETY: the caller's contract: nobody else accesses the value any more.
        unsafe { self.with_value(Option::take) }
    }

    /// Runs `f` on the value slot.
    ///
    /// # Safety
    /// No other thread accesses the slot meanwhile: the caller owns it (see the invariants).
    /// Under loom the access is recorded, and loom fails a model in which it is not ordered
    /// after the previous access by another thread.
    unsafe fn with_value<R>(&self, f: impl FnOnce(&mut Option<T>) -> R) -> R {
        #[cfg(not(loom))]
        {
            // SAFETY: the caller's contract.
            f(unsafe { &mut *self.value.get() })
        }
        #[cfg(loom)]
        {
            // SAFETY: as above.
            self.value.with_mut(|p| f(unsafe { &mut *p }))
        }
    }
}

struct Queues<T> {
    senders: VecDeque<Entry<T>>,
    receivers: VecDeque<Entry<T>>,
    disconnected: bool,
}

/// Pops the first entry whose operation can still be paired: a plain one, or a select's whose
/// context this pairing wins (see `select.rs`); a select's that lost is dropped. The caller
/// wakes a won context (`Entry::wake_select`) after it releases the lock.
fn pop_partner<T>(queue: &mut VecDeque<Entry<T>>) -> Option<Entry<T>> {
    while let Some(e) = queue.pop_front() {
        match &e.select {
            Some((ctx, index)) if !ctx.try_select(*index, false) => continue,
            _ => return Some(e),
        }
    }
    None
}

/// A rendezvous channel's shared state.
pub(crate) struct Chan<T> {
    lock: SpindleLock,
    queues: UnsafeCell<Queues<T>>,
    pub(crate) senders: AtomicUsize,
    pub(crate) receivers: AtomicUsize,
    /// `Select::ready`s waiting for a sender to be queued (they would receive) / a receiver.
    recv_watch: Observers,
    send_watch: Observers,
}

// SAFETY: values move between threads (T: Send); the queues are accessed only under the lock,
// and a packet's value only by its owner (see the invariants).
unsafe impl<T: Send> Send for Chan<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Chan<T> {}
// SAFETY: as above: a packet's value is accessed by one thread at a time.
unsafe impl<T: Send> Send for Packet<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Packet<T> {}

/// The lock held; unlocks when dropped (also if the critical section panics, which only an
/// allocation failure in a queue's `push_back` can make it do).
struct Locked<'a, T> {
    chan: &'a Chan<T>,
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = Queues<T>;
    fn deref(&self) -> &Queues<T> {
        // SAFETY: this guard holds the lock, which guards the queues.
        unsafe { &*self.chan.queues.get() }
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut Queues<T> {
        // SAFETY: as above, and `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.chan.queues.get() }
    }
}

impl<T> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        // SAFETY: this guard locked it.
        unsafe { self.chan.lock.unlock() }
    }
}

impl<T> Chan<T> {
    pub(crate) fn new() -> Chan<T> {
        Chan {
            lock: SpindleLock::new(),
            queues: UnsafeCell::new(Queues {
                senders: VecDeque::new(),
                receivers: VecDeque::new(),
                disconnected: false,
            }),
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
            recv_watch: Observers::new(),
            send_watch: Observers::new(),
        }
    }

    /// An operation was queued on the side `send` says: wake the selects that wait for a
    /// partner of that kind to be ready (`Select::ready`). Called after the lock is released.
    fn queued(&self, send: bool) {
        if send {
            self.recv_watch.notify();
        } else {
            self.send_watch.notify();
        }
    }

    /// The watch list of operation `send`: what waits for a partner of the other kind.
    pub(crate) fn watchers(&self, send: bool) -> &Observers {
        if send {
            &self.send_watch
        } else {
            &self.recv_watch
        }
    }

    /// A `Select::ready` waits for operation `send` to have a partner: on the watch list.
    pub(crate) fn watch(&self, send: bool, ctx: &Arc<Ctx>) {
        if send {
            self.send_watch.add(ctx);
        } else {
            self.recv_watch.add(ctx);
        }
    }

    pub(crate) fn unwatch(&self, send: bool, ctx: &Arc<Ctx>) {
        if send {
            self.send_watch.remove(ctx);
        } else {
            self.recv_watch.remove(ctx);
        }
    }

    fn lock(&self) -> Locked<'_, T> {
        self.lock.lock();
        Locked { chan: self }
    }

    pub(crate) fn is_disconnected(&self) -> bool {
        self.lock().disconnected
    }

    /// Queues `p` in the queue `side` picks (the lock held as `q`), unlocks, and waits until a
    /// partner or the disconnection settles it (true) or the deadline passes; then, under the
    /// lock again, takes it out of the queue (false) unless it was settled meanwhile (true).
    fn block(
        &self,
        mut q: Locked<'_, T>,
        p: &Arc<Packet<T>>,
        deadline: Option<Deadline>,
        send: bool,
    ) -> bool {
        let side: fn(&mut Queues<T>) -> &mut VecDeque<Entry<T>> = if send {
            |q| &mut q.senders
        } else {
            |q| &mut q.receivers
        };
        side(&mut q).push_back(Entry {
            packet: p.clone(),
            select: None,
        });
        drop(q);
        self.queued(send);
        p.wait(deadline) || {
            let mut q = self.lock();
            let queue = side(&mut q);
            match queue.iter().position(|x| Arc::ptr_eq(&x.packet, p)) {
                Some(i) => {
                    queue.remove(i);
                    false
                }
                // Taken by a partner since the deadline passed: settled, or about to be (a
                // select's claim, whose completion follows at once).
                None => {
                    drop(q);
                    p.wait(None)
                }
            }
        }
    }

    pub(crate) fn send(&self, value: T, wait: Wait) -> Result<(), Failed<T>> {
        let mut q = self.lock();
        if q.disconnected {
            return Err(Failed::Disconnected(value));
        }
        if let Some(e) = pop_partner(&mut q.receivers) {
            let r = &e.packet;
            // SAFETY: `r` was queued, so its owner does not read the value before it sees
            // the settling store below.
            unsafe { r.with_value(|v| *v = Some(value)) };
            r.settle(DONE);
            drop(q);
            r.wake();
            e.wake_select();
            return Ok(());
        }
        let Wait::Until(deadline) = wait else {
            return Err(Failed::NoPartner(value));
        };
        let p = Packet::new(Some(value));
        let settled = self.block(q, &p, deadline, true);
        let how = p.state.load(Acquire);
        if settled && how == DONE {
            return Ok(());
        }
        // SAFETY: the packet left the queue unsettled by a receiver (removed above, or
        // drained by the disconnection): its value is ours again.
        let value = unsafe { p.take() }.expect("a sender's packet holds its value");
        Err(if settled {
            Failed::Disconnected(value)
        } else {
            Failed::NoPartner(value)
        })
    }

    pub(crate) fn recv(&self, wait: Wait) -> Result<T, Failed<()>> {
        let mut q = self.lock();
        if let Some(e) = pop_partner(&mut q.senders) {
            drop(q);
            e.wake_select();
            return Ok(Self::take_from_sender(&e.packet));
        }
        if q.disconnected {
            return Err(Failed::Disconnected(()));
        }
        let Wait::Until(deadline) = wait else {
            return Err(Failed::NoPartner(()));
        };
        let p = Packet::new(None);
        let settled = self.block(q, &p, deadline, false);
        if !settled {
            return Err(Failed::NoPartner(()));
        }
        match p.state.load(Acquire) {
            // SAFETY: settled DONE by a sender, which wrote the value before its Release
            // store; nobody touches the packet after settling it.
            DONE => Ok(unsafe { p.take() }.expect("a settled receiver's packet holds a value")),
            _ => Err(Failed::Disconnected(())),
        }
    }

    /// Takes the value of a sender's packet popped from the queue (waiting, for a select's,
    /// until its owner fills it), and settles it `DONE`.
    fn take_from_sender(s: &Packet<T>) -> T {
        s.wait_full();
        // SAFETY: `s` was popped by us: its owner does not touch the value before it sees
        // the settling store below (a select's owner wrote it before `full`, acquired above).
        let value = unsafe { s.take() }.expect("a full sender's packet holds its value");
        s.settle(DONE);
        s.wake();
        value
    }

    /// Sets the flag and settles every blocked operation `DISCONNECTED` (a select's only if
    /// the disconnection wins its context).
    pub(crate) fn disconnect(&self) {
        let mut q = self.lock();
        q.disconnected = true;
        let queues: &mut Queues<T> = &mut q;
        let blocked: Vec<_> = queues
            .senders
            .drain(..)
            .chain(queues.receivers.drain(..))
            .filter(|e| match &e.select {
                Some((ctx, index)) => ctx.try_select(*index, true),
                None => true,
            })
            .collect();
        for e in &blocked {
            e.packet.settle(DISCONNECTED);
        }
        drop(q);
        for e in &blocked {
            e.packet.wake();
            e.wake_select();
        }
        self.recv_watch.notify();
        self.send_watch.notify();
    }

    // Async sends (see `futures.rs`): queued as a blocked sender is, with the task's context
    // as a select's entry carries one, so that the partner that pops it wins the context (and
    // wakes the task) before it takes the value.

    /// Polls an async send: pairs with a queued receiver, or queues the value; `Err` hands it
    /// back if the channel is disconnected.
    pub(crate) fn poll_send(
        &self,
        value: &mut Option<T>,
        queued: &mut Option<QueuedSend<T>>,
        waker: &Waker,
    ) -> Poll<Result<(), T>> {
        if let Some(q) = queued {
            q.ctx.set_waker(waker);
            let Some((_, by_disconnection)) = q.ctx.selection() else {
                return Poll::Pending;
            };
            let q = queued.take().expect("checked above");
            if !by_disconnection {
                // A receiver popped it and takes (or took) the value.
                return Poll::Ready(Ok(()));
            }
            // The disconnection settles the packet just after selecting it.
            q.packet.wait(None);
            // SAFETY: settled DISCONNECTED, out of the queue: the value is ours again.
            let v = unsafe { q.packet.take() }.expect("a sender's packet holds its value");
            return Poll::Ready(Err(v));
        }
        let v = value
            .take()
            .expect("an async send polled after it completed");
        // Made before the lock is taken: cloning the waker is foreign code.
        let ctx = Ctx::for_task(waker);
        let mut q = self.lock();
        if q.disconnected {
            return Poll::Ready(Err(v));
        }
        if let Some(e) = pop_partner(&mut q.receivers) {
            let r = &e.packet;
            // SAFETY: `r` was queued: its owner reads the value only after the settling store.
            unsafe { r.with_value(|x| *x = Some(v)) };
            r.settle(DONE);
            drop(q);
            r.wake();
            e.wake_select();
            return Poll::Ready(Ok(()));
        }
        let packet = Packet::new(Some(v));
        q.senders.push_back(Entry {
            packet: packet.clone(),
            select: Some((ctx.clone(), 0)),
        });
        drop(q);
        self.queued(true);
        *queued = Some(QueuedSend { ctx, packet });
        Poll::Pending
    }

    /// An async send dropped while queued: withdrawn (its value dropped) unless a partner or
    /// the disconnection selected it first (then the receiver has the value, or nobody will).
    pub(crate) fn cancel_send(&self, q: QueuedSend<T>) {
        if q.ctx.close() {
            let mut g = self.lock();
            if let Some(i) = g
                .senders
                .iter()
                .position(|e| Arc::ptr_eq(&e.packet, &q.packet))
            {
                g.senders.remove(i);
            }
        }
    }

    // Select (see `select.rs`). A token's packet is an `Arc<Packet<T>>` turned raw.

    /// A select's try phase: pairs with a queued partner (or finds the channel disconnected).
    pub(crate) fn select_try(&self, send: bool, token: &mut Token) -> bool {
        let mut q = self.lock();
        let partner = if send {
            if q.disconnected {
                token.disconnected = true;
                return true;
            }
            pop_partner(&mut q.receivers)
        } else {
            pop_partner(&mut q.senders)
        };
        match partner {
            Some(e) => {
                drop(q);
                e.wake_select();
                token.ptr = Arc::into_raw(e.packet).cast();
                true
            }
            None if !send && q.disconnected => {
                token.disconnected = true;
                true
            }
            None => false,
        }
    }

    /// A blocking select queues an entry of its own (with an empty packet).
    pub(crate) fn select_register(
        &self,
        send: bool,
        ctx: &Arc<Ctx>,
        index: usize,
        reg: &mut Token,
    ) {
        let mut q = self.lock();
        if q.disconnected {
            return;
        }
        let packet = Packet::new(None);
        reg.ptr = Arc::into_raw(packet.clone()).cast();
        let entry = Entry {
            packet,
            select: Some((ctx.clone(), index)),
        };
        if send {
            q.senders.push_back(entry);
        } else {
            q.receivers.push_back(entry);
        }
        drop(q);
        self.queued(send);
    }

    /// A partner other than `own`'s entries is queued, or the channel is disconnected.
    pub(crate) fn select_ready(&self, send: bool, own: Option<&Arc<Ctx>>) -> bool {
        let q = self.lock();
        let partners = if send { &q.receivers } else { &q.senders };
        let theirs = |e: &&Entry<T>| match (&e.select, own) {
            (Some((c, _)), Some(own)) => !Arc::ptr_eq(c, own),
            _ => true,
        };
        q.disconnected || partners.iter().any(|e| theirs(&e))
    }

    /// Takes a select's entry out of the queue (if no partner popped it); releases its packet
    /// unless the select was `selected` through it.
    pub(crate) fn select_unregister(&self, send: bool, reg: &mut Token, selected: bool) {
        if reg.ptr.is_null() {
            return;
        }
        let packet: *const Packet<T> = reg.ptr.cast();
        {
            let mut q = self.lock();
            let queue = if send {
                &mut q.senders
            } else {
                &mut q.receivers
            };
            if let Some(i) = queue.iter().position(|e| Arc::as_ptr(&e.packet) == packet) {
                queue.remove(i);
            }
        }
        if !selected {
            // SAFETY: `reg.ptr` came from `Arc::into_raw` in `select_register`.
            drop(unsafe { Arc::from_raw(packet) });
            reg.ptr = std::ptr::null();
        }
    }

    /// Completes a selected send.
    pub(crate) fn select_send(&self, token: &mut Token, value: T) -> Result<(), T> {
        let packet = (!token.ptr.is_null())
            // SAFETY: a token's packet came from `Arc::into_raw` of this channel's packet.
            .then(|| unsafe { Arc::from_raw(token.ptr.cast::<Packet<T>>()) });
        token.ptr = std::ptr::null();
        let Some(p) = packet.filter(|_| !token.disconnected) else {
            return Err(value);
        };
        // SAFETY: either a receiver's packet we popped (its owner waits for the settling
        // store), or our own, popped by a receiver that waits for `full`: nobody else touches
        // the value meanwhile.
        unsafe { p.with_value(|v| *v = Some(value)) };
        if token.own {
            p.full.store(1, Release);
            p.parking.wake32(&p.full, u32::MAX);
        } else {
            p.settle(DONE);
            p.wake();
        }
        Ok(())
    }

    /// Completes a selected receive.
    pub(crate) fn select_recv(&self, token: &mut Token) -> Result<T, ()> {
        let packet = (!token.ptr.is_null())
            // SAFETY: as in `select_send`.
            .then(|| unsafe { Arc::from_raw(token.ptr.cast::<Packet<T>>()) });
        token.ptr = std::ptr::null();
        let Some(p) = packet.filter(|_| !token.disconnected) else {
            return Err(());
        };
        if !token.own {
            return Ok(Self::take_from_sender(&p));
        }
        // Our own packet: the sender that selected us writes the value and settles it.
        p.wait(None);
        match p.state.load(Acquire) {
            // SAFETY: settled DONE by the sender after writing the value; nobody touches the
            // packet after settling it.
            DONE => Ok(unsafe { p.take() }.expect("a settled receiver's packet holds a value")),
            _ => Err(()),
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use crate::mpmc::{channel, RecvTimeoutError, SendTimeoutError, TryRecvError};
    use crate::time::Deadline;
    use loom::thread;

    /// A sender and a receiver meet, each possibly first: the value arrives once, and the
    /// futex hand-over loses no wake-up (a lost one is a loom deadlock).
    #[test]
    fn rendezvous_send_meets_recv() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let (tx, rx) = channel::<u32>(0);
            let t = thread::spawn(move || tx.send(7).unwrap());
            assert_eq!(rx.recv(), Ok(7));
            t.join().unwrap();
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        });
    }

    /// A sender whose deadline passes while a receiver arrives: either the receiver gets the
    /// value and the send succeeds, or the send times out with its value back and the
    /// receiver, also out of time, gets nothing — never both, never neither with the value
    /// lost.
    #[test]
    fn rendezvous_timeouts_race_the_partner() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let (tx, rx) = channel::<u32>(0);
            // Kept until the receive is over: the sender's end must not disconnect it.
            let keep = tx.clone();
            let t = thread::spawn(move || {
                match tx.send_deadline(5, Some(Deadline::after(std::time::Duration::ZERO))) {
                    Ok(()) => true,
                    Err(SendTimeoutError::Timeout(5)) => false,
                    Err(e) => panic!("unexpected {e:?}"),
                }
            });
            let got = rx.recv_deadline(Some(Deadline::after(std::time::Duration::ZERO)));
            drop(keep);
            let sent = t.join().unwrap();
            match got {
                Ok(v) => assert!(sent && v == 5),
                Err(RecvTimeoutError::Timeout) => assert!(!sent),
                Err(e) => panic!("unexpected {e:?}"),
            }
        });
    }

    /// The last receiver goes while a sender is blocked: the sender gets its value back.
    #[test]
    fn rendezvous_disconnection_returns_the_value() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let (tx, rx) = channel::<u32>(0);
            let t = thread::spawn(move || tx.send(9));
            drop(rx);
            let r = t.join().unwrap();
            assert_eq!(r.map_err(|e| e.into_inner()), Err(9));
        });
    }
}
