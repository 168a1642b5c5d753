//! Async sends and receives on [`mpmc`](crate::mpmc) channels: [`Sender::send_async`],
//! [`Receiver::recv_async`] and, with the `futures-core` feature, [`Receiver::stream`]. The
//! same channel serves sync and async ends at once (as flume's and kanal's do); a sync end's
//! fast path is unchanged — no `lock`ed instruction is added when nobody waits.
//!
//! # Protocol
//!
//! An async operation is a [`Select`](crate::mpmc::Select) of one operation that waits as a
//! *task entry* on the side's observer list (a key and the task's waker, see `Observers`)
//! instead of a context:
//!
//! ```text
//! poll:
//!   try to claim the operation (the select's try phase) → claimed: unwatch; complete it, Ready
//!                                                        → in flight: unwatch; wake own task,
//!                                                          Pending
//!   no entry, or a notification took it, or the task's waker changed:
//!               register: an entry with the waker on the side's observer list, then the
//!               side's waiting flag (a rendezvous: its watch list of tasks wanting a partner,
//!               no flag)
//!   entry still there, same waker: set the flag again
//!   ready already (judged after watching) → wake own task;  Pending
//! drop: unwatch (withdraw the entry unless a notification took it: one load)
//! ```
//!
//! **Why no wake-up is lost**: the argument of a blocked select (`select.rs`): the entry is on
//! the list before the flag is set. An operation of the other side that comes after the watch
//! finds the flag (or the queued partner's watch list) and takes every entry on the list,
//! waking each task once; one that came before is seen by the readiness check, and the task
//! wakes itself to be polled again. A woken task whose operation still cannot proceed
//! registers again, then checks again, as the first time.
//!
//! **Cancellation.** A dropped future loses nothing: a receive claims only inside `poll` and
//! completes there; a watch commits to nothing. The one exception to "claims only in `poll`"
//! is an async send on a rendezvous, which, to meet an async receive (which only watches), is
//! queued with its value as a blocked sender is, with the task's context: the receiver that
//! pops it must win that context first. Dropping it closes the context (`ABORTED`): if that
//! wins, the send is withdrawn and its value dropped; if it loses, a receiver has the value
//! (the send happened) or the disconnection selected it.
//!
//! **In flight.** A claim that finds the other side of its slot in flight (claimed, not yet
//! written: a few instructions, unless that thread was preempted) wakes its own task and
//! returns `Pending`: the executor polls it again. Two waits remain inside `poll`, both for
//! another thread that has already committed: an unbounded receive whose claimed slot's
//! sender has not written it yet (a few instructions), and a receive that pairs with a
//! blocked `select!`'s rendezvous send, which waits for that select to evaluate its message
//! (`select!` evaluates it only once chosen, as crossbeam-channel's does).
//!
//! **Wakers** are foreign code: they are cloned, called and dropped with no lock of the crate
//! held (a rendezvous partner wakes the task it paired with after releasing the channel's
//! lock), so an executor's own locks cannot deadlock with a channel's.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::mpmc::{
    complete_recv, complete_send, Blocked, Flavor, Receiver, RecvError, SendError, Sender,
};
use crate::rendezvous::QueuedSend;
use crate::select::{Attempt, Handle, Token};

/// [`Sender::send_async`]: resolves when the value is in the channel (or, on a rendezvous,
/// handed to a receiver), or hands it back if every receiver is gone.
#[must_use = "futures do nothing unless polled"]
pub struct SendFut<'a, T> {
    tx: &'a Sender<T>,
    value: Option<T>,
    watching: Option<u64>,
    /// Polls that found no room and yielded instead of registering (see `watch`).
    yields: u8,
    /// Withdrawn by `Drop` (which leaves `None`): in a `ManuallyDrop` so that dropping a
    /// completed send is a check of two words, inlined, with no drop glue for the queue entry.
    queued: ManuallyDrop<Option<QueuedSend<T>>>,
}

/// [`Receiver::recv_async`]: resolves to the next value, or to `RecvError` when every sender
/// is gone and the channel is empty.
#[must_use = "futures do nothing unless polled"]
pub struct RecvFut<'a, T> {
    rx: &'a Receiver<T>,
    watching: Option<u64>,
    /// Polls that found nothing and yielded instead of registering (see `watch`).
    yields: u8,
}

// Neither future pins anything: the value is moved, never borrowed across polls.
impl<T> Unpin for SendFut<'_, T> {}
impl<T> Unpin for RecvFut<'_, T> {}

impl<T> Sender<T> {
    /// Sends `value` from async code: waits (without blocking the thread) while the channel is
    /// full. Sync and async ends of one channel work together.
    ///
    /// ```
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let waker = std::task::Waker::noop();
    /// #     let mut cx = std::task::Context::from_waker(waker);
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop {
    /// #         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; }
    /// #         std::thread::yield_now();
    /// #     }
    /// # }
    /// let (tx, rx) = spindle_sync::mpmc::channel::<u32>(1);
    /// let t = std::thread::spawn(move || rx.recv().unwrap() + rx.recv().unwrap());
    /// block_on(async {
    ///     tx.send_async(1).await.unwrap();
    ///     tx.send_async(2).await.unwrap(); // waits for room
    /// });
    /// assert_eq!(t.join().unwrap(), 3);
    /// ```
    #[inline]
    pub fn send_async(&self, value: T) -> SendFut<'_, T> {
        SendFut {
            tx: self,
            value: Some(value),
            watching: None,
            yields: 0,
            queued: ManuallyDrop::new(None),
        }
    }
}

impl<T> Receiver<T> {
    /// Receives from async code: waits (without blocking the thread) while the channel is
    /// empty.
    #[inline]
    pub fn recv_async(&self) -> RecvFut<'_, T> {
        RecvFut {
            rx: self,
            watching: None,
            yields: 0,
        }
    }

    /// The values as a [`Stream`](futures_core::Stream), ending when every sender is gone and
    /// the channel is empty.
    #[cfg(feature = "futures-core")]
    pub fn stream(&self) -> RecvStream<'_, T> {
        RecvStream {
            rx: self,
            watching: None,
            yields: 0,
        }
    }
}

/// [`Receiver::stream`]: the values, as a `futures_core::Stream`.
#[cfg(feature = "futures-core")]
#[must_use = "streams do nothing unless polled"]
pub struct RecvStream<'a, T> {
    rx: &'a Receiver<T>,
    watching: Option<u64>,
    /// As `RecvFut`'s, for the current item.
    yields: u8,
}

#[cfg(feature = "futures-core")]
impl<T> Unpin for RecvStream<'_, T> {}

#[cfg(feature = "futures-core")]
impl<T> futures_core::Stream for RecvStream<'_, T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = &mut *self;
        let r = poll_recv(&this.rx.flavor, &mut this.watching, &mut this.yields, cx);
        if r.is_ready() {
            this.yields = 0;
        }
        r.map(Result::ok)
    }
}

#[cfg(feature = "futures-core")]
impl<T> Drop for RecvStream<'_, T> {
    fn drop(&mut self) {
        unwatch(&self.rx.flavor, false, &mut self.watching);
    }
}

/// Withdraws the task's entry, if it has one a notification did not take.
#[inline]
fn unwatch<T>(flavor: &Flavor<T>, send: bool, watching: &mut Option<u64>) {
    if let Some(key) = watching.take() {
        flavor.unwatch_task(send, key);
    }
}

/// Times an operation that cannot proceed yields (wakes its own task and returns `Pending`)
/// before it registers: see `watch`. Two made the current-thread ping-pong slower (lab
/// `rings`, section `async-pingpong-ct`: a task that yields twice there has waited for a
/// partner that only runs once it registers); one does not, and wins the multi-thread stream.
const YIELDS: u8 = 1;

/// A future's `yields` once a yield did not help (its task registered after it): its
/// completion says nothing of yields.
const MISSED: u8 = YIELDS + 1;

/// An operation completed: if it had yielded and not registered since, the yield helped
/// (`Observers::yield_helped`).
#[inline(always)]
fn completed<T>(flavor: &Flavor<T>, send: bool, yields: u8) {
    if yields != 0 && yields != MISSED {
        if let Some(list) = flavor.task_list(send) {
            list.yield_helped();
        }
    }
}

/// Watches the operation for the task: registers it (an entry with its waker, then the side's
/// flag), or, if its entry still stands with the same waker, sets the flag again; wakes it at
/// once if the operation is ready already.
///
/// The first [`YIELDS`] times, it yields instead: the task wakes itself, and the executor runs
/// the other tasks before polling it again. Registering costs `lock`ed instructions on both
/// sides (the entry and the flag here; the notification and the wake-up in the operation of
/// the other side that finds the flag), where a yield costs the executor's round trip: when
/// the other side runs on another CPU and is about to proceed (the next item of a stream), it
/// usually has by the next poll (lab `rings`, section `async-stream-mt`; figures in
/// `docs/results.md`). A yield is not a spin: a task that still finds nothing registers at its
/// next poll, and the side's next waits register at once (`Observers::should_yield`), more of
/// them after each such miss and fewer after each yield that helped
/// (`Observers::yield_window`), so that a partner that never answers within the executor's
/// round trip costs a yield only once in 64 waits: a ping-pong across two workers (section
/// `async-pingpong-mt`, where a yield on every wait was slower), and the echo task of a
/// current-thread ping-pong, whose partner is the `block_on` future, which the executor polls
/// only once its run queue is empty (section `async-pingpong-ct`; a fixed skip of seven waits
/// cost it a wasted poll every eighth round trip).
#[inline(never)]
fn watch<T>(
    flavor: &Flavor<T>,
    send: bool,
    watching: &mut Option<u64>,
    yields: &mut u8,
    cx: &Context<'_>,
) {
    if watching.is_none() {
        if let Some(list) = flavor.task_list(send) {
            if *yields == YIELDS {
                list.yield_missed();
                *yields = MISSED;
            } else if *yields < YIELDS && list.should_yield() {
                *yields += 1;
                cx.waker().wake_by_ref();
                return;
            }
        }
    }
    let ready = match *watching {
        Some(key) if flavor.renew_task(send, key, cx.waker()) => flavor.rearm_ready(send),
        _ => {
            let (key, ready) = flavor.watch_task(send, cx.waker());
            *watching = key;
            ready
        }
    };
    if ready {
        cx.waker().wake_by_ref();
    }
}

#[inline(never)]
fn poll_recv<T>(
    flavor: &Flavor<T>,
    watching: &mut Option<u64>,
    yields: &mut u8,
    cx: &mut Context<'_>,
) -> Poll<Result<T, RecvError>> {
    // The bounded channel's own receive first: the claim and completion in one, inlined.
    if let Flavor::Array(c) = flavor {
        match c.try_recv() {
            Ok(v) => {
                completed(flavor, false, *yields);
                unwatch(flavor, false, watching);
                return Poll::Ready(Ok(v));
            }
            Err(Blocked::Settled(())) => {
                watch(flavor, false, watching, yields, cx);
                return Poll::Pending;
            }
            // In flight, or disconnected: as below.
            Err(_) => {}
        }
    }
    let mut token = Token::default();
    let claimed = flavor.try_claim(false, &mut token);
    if !matches!(claimed, Attempt::NotReady) {
        unwatch(flavor, false, watching);
    }
    match claimed {
        Attempt::Claimed => {
            completed(flavor, false, *yields);
            Poll::Ready(complete_recv(flavor, &mut token))
        }
        Attempt::InFlight => {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        Attempt::NotReady => {
            watch(flavor, false, watching, yields, cx);
            Poll::Pending
        }
    }
}

impl<T> Future for RecvFut<'_, T> {
    type Output = Result<T, RecvError>;
    /// A value in a bounded channel: the channel's own receive, inlined into the caller (for
    /// a task woken by a notification too, whose entry the notification took: one load says
    /// so, out of line); an empty channel, straight to watching (no second try); the rest out
    /// of line.
    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Flavor::Array(c) = &this.rx.flavor {
            match c.try_recv() {
                Ok(v) => {
                    completed(&this.rx.flavor, false, this.yields);
                    if this.watching.is_some() {
                        this.withdraw();
                    }
                    return Poll::Ready(Ok(v));
                }
                Err(Blocked::Settled(())) => {
                    watch(
                        &this.rx.flavor,
                        false,
                        &mut this.watching,
                        &mut this.yields,
                        cx,
                    );
                    return Poll::Pending;
                }
                Err(_) => {}
            }
        }
        poll_recv(&this.rx.flavor, &mut this.watching, &mut this.yields, cx)
    }
}

impl<T> Drop for RecvFut<'_, T> {
    /// A receive that completed at once (the common case) has nothing to withdraw: a check
    /// of one word, inlined.
    #[inline]
    fn drop(&mut self) {
        if self.watching.is_some() {
            self.withdraw();
        }
    }
}

impl<T> RecvFut<'_, T> {
    #[cold]
    #[inline(never)]
    fn withdraw(&mut self) {
        unwatch(&self.rx.flavor, false, &mut self.watching);
    }
}

impl<T> Future for SendFut<'_, T> {
    type Output = Result<(), SendError<T>>;
    /// Room in a bounded channel, for a future not yet watching: the channel's own send,
    /// inlined into the caller; a full channel, straight to watching (no second try); the rest
    /// out of line.
    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let (Flavor::Array(c), None) = (&self.tx.flavor, self.watching) {
            if let Some(value) = self.value.take() {
                match c.try_send(value) {
                    Ok(()) => {
                        completed(&self.tx.flavor, true, self.yields);
                        return Poll::Ready(Ok(()));
                    }
                    Err(Blocked::Settled(v)) => {
                        let this = &mut *self;
                        this.value = Some(v);
                        watch(
                            &this.tx.flavor,
                            true,
                            &mut this.watching,
                            &mut this.yields,
                            cx,
                        );
                        return Poll::Pending;
                    }
                    Err(Blocked::InFlight(v) | Blocked::Disconnected(v)) => self.value = Some(v),
                }
            }
        }
        self.poll_slow(cx)
    }
}

impl<T> SendFut<'_, T> {
    #[inline(never)]
    fn poll_slow(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SendError<T>>> {
        let this = self;
        let flavor = &this.tx.flavor;
        if let Flavor::Zero(c) = flavor {
            return c
                .poll_send(&mut this.value, &mut this.queued, cx.waker())
                .map_err(SendError);
        }
        // The bounded channel's own send first: the claim and completion in one, inlined.
        if let Flavor::Array(c) = flavor {
            let value = this
                .value
                .take()
                .expect("an async send polled after it completed");
            match c.try_send(value) {
                Ok(()) => {
                    completed(flavor, true, this.yields);
                    unwatch(flavor, true, &mut this.watching);
                    return Poll::Ready(Ok(()));
                }
                Err(Blocked::Settled(v)) => {
                    this.value = Some(v);
                    watch(flavor, true, &mut this.watching, &mut this.yields, cx);
                    return Poll::Pending;
                }
                // In flight, or disconnected: as below.
                Err(Blocked::InFlight(v) | Blocked::Disconnected(v)) => this.value = Some(v),
            }
        }
        let mut token = Token::default();
        let claimed = flavor.try_claim(true, &mut token);
        if !matches!(claimed, Attempt::NotReady) {
            unwatch(flavor, true, &mut this.watching);
        }
        match claimed {
            Attempt::Claimed => {
                completed(flavor, true, this.yields);
                let value = this
                    .value
                    .take()
                    .expect("an async send polled after it completed");
                Poll::Ready(complete_send(flavor, &mut token, value).map_err(SendError))
            }
            Attempt::InFlight => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Attempt::NotReady => {
                watch(flavor, true, &mut this.watching, &mut this.yields, cx);
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for SendFut<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // A send that completed at once (the common case) has nothing to withdraw.
        if self.watching.is_some() || self.queued.is_some() {
            self.withdraw();
        }
    }
}

impl<T> SendFut<'_, T> {
    #[cold]
    #[inline(never)]
    fn withdraw(&mut self) {
        unwatch(&self.tx.flavor, true, &mut self.watching);
        if let (Some(q), Flavor::Zero(c)) = (self.queued.take(), &self.tx.flavor) {
            c.cancel_send(q);
        }
    }
}

impl<T> std::fmt::Debug for SendFut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendFut").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for RecvFut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvFut").finish_non_exhaustive()
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use crate::mpmc::{channel, unbounded};
    use crate::primitives::model;
    use loom::thread;

    /// An async receive waiting on a bounded channel is woken by a sync send (a lost wake-up
    /// is a loom deadlock; the sender's clone is kept so that no disconnection hides one).
    #[test]
    fn async_recv_is_woken_by_a_sync_send() {
        model(|| {
            let (tx, rx) = channel::<u32>(1);
            let _keep = tx.clone();
            let t = thread::spawn(move || tx.send(3).unwrap());
            assert_eq!(loom::future::block_on(rx.recv_async()), Ok(3));
            t.join().unwrap();
        });
    }

    /// Two async receives in a row against two sends from another thread: the first
    /// receive's entry, taken by a notification, is not withdrawn twice, and the second
    /// receive registers anew (the keys and `taken_below` of `Observers`).
    #[test]
    fn async_recv_registers_again_after_a_notification() {
        model(|| {
            let (tx, rx) = channel::<u32>(1);
            let _keep = tx.clone();
            let t = thread::spawn(move || {
                tx.send(1).unwrap();
                tx.send(2).unwrap();
            });
            assert_eq!(loom::future::block_on(rx.recv_async()), Ok(1));
            assert_eq!(loom::future::block_on(rx.recv_async()), Ok(2));
            t.join().unwrap();
        });
    }

    /// An async send waiting on a full bounded channel is woken by the sync receive that makes
    /// room.
    #[test]
    fn async_send_is_woken_by_a_sync_recv() {
        model(|| {
            let (tx, rx) = channel::<u32>(1);
            tx.send(1).unwrap();
            let _keep = rx.clone();
            let t = thread::spawn(move || rx.recv().unwrap());
            loom::future::block_on(tx.send_async(2)).unwrap();
            assert_eq!(t.join().unwrap(), 1);
        });
    }

    /// The same on an unbounded channel.
    #[test]
    fn async_recv_unbounded_is_woken() {
        model(|| {
            let (tx, rx) = unbounded::<u32>();
            let _keep = tx.clone();
            let t = thread::spawn(move || tx.send(4).unwrap());
            assert_eq!(loom::future::block_on(rx.recv_async()), Ok(4));
            t.join().unwrap();
        });
    }

    /// An async send on a rendezvous, queued with its task's context, meets a sync receive.
    #[test]
    fn async_rendezvous_send_meets_sync_recv() {
        model(|| {
            let (tx, rx) = channel::<u32>(0);
            let _keep = rx.clone();
            let t = thread::spawn(move || rx.recv());
            loom::future::block_on(tx.send_async(5)).unwrap();
            assert_eq!(t.join().unwrap(), Ok(5));
        });
    }

    /// An async receive on a rendezvous (watching) meets a sync send (queued).
    #[test]
    fn async_rendezvous_recv_meets_sync_send() {
        model(|| {
            let (tx, rx) = channel::<u32>(0);
            let _keep = tx.clone();
            let t = thread::spawn(move || tx.send(6).unwrap());
            assert_eq!(loom::future::block_on(rx.recv_async()), Ok(6));
            t.join().unwrap();
        });
    }
}
