//! `rings`: Spindle's blocking SPSC ring and MPMC channel beside the rings and channels people
//! use — rtrb and crossbeam's `ArrayQueue` (they never block: their users spin), and
//! crossbeam-channel, flume, kanal, std's `sync_channel` and ringbuf-blocking (they block).
//!
//! - **one thread**: ns per push + pop with nobody waiting (capacity 1024).
//! - **stream**: ns per item, producer and consumer on two CPUs, 8- and 64-byte items.
//! - **ping-pong**: ns per round trip through two one-slot rings, on two CPUs and with both
//!   threads pinned to one CPU (crossbeam-channel #1031: a spinning receiver holds the CPU
//!   its sender needs).
//! - **idle consumer**: CPU time of a consumer that waits for one message per millisecond
//!   (its thread CPU clock over the wall time, after a first message), in % of one CPU.
//! - **wake**: ns from a push to the consumer running, the consumer asleep (the push comes
//!   300 µs after it started waiting), against a bare futex wait/wake.
//! - **MPMC**: ns per message with 4 × cores threads, half sending, half receiving.
//!
//! Rings that never block are driven the way their users drive them: retry, with a `pause`
//! between tries and a `sched_yield` every 64 tries.
//!
//! Every rival runs the same measured loops (`send_n`, `recv_n`, `ping_n`, `pong_n`): each in a
//! function of its own that owns its ends and returns at the first error instead of panicking,
//! and that keeps received items alive with an `asm` that touches no memory rather than
//! `black_box`. A landing pad or a memory clobber in the loop would make the compiler keep the
//! ends' fields in memory, and store a ring's cached index after every operation.
//!
//! [`RIVALS`] declares the rings and channels once: id, label, and the function that runs it
//! in each section. A [`Peer`] (the adapter to one crate's API) takes part in every section
//! that its traits allow: the idle and wake sections take those that block, the MPMC section
//! those whose both ends can be cloned ([`Multi`]). The sections below iterate the table, so
//! a new rival is one `impl Peer` and one entry.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use ringbuf_blocking::traits::Split;
use spindle_sync::{futex, mpmc, spsc};

use crate::kit::{median, run_together, CachePadded, Span};
use crate::runner::{Ctx, Experiment};
use crate::spec::{Claim, Info, Metric, Plan, Sample, Section, Variant};
use crate::sys::rdtsc;

pub struct Rings;

/// A ring or channel as the experiment drives it.
trait Peer: 'static {
    type Tx<T: Send + 'static>: Send;
    type Rx<T: Send + 'static>: Send;
    /// Whether `send`/`recv` block (else they spin and yield).
    const BLOCKS: bool;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>);
    /// Send `v`; false if the other side is gone.
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool;
    /// Receive; None if the other side is gone.
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T>;
}

/// Peers whose both ends can be cloned.
trait Multi: Peer {
    fn clone_tx<T: Send + 'static>(tx: &Self::Tx<T>) -> Self::Tx<T>;
    fn clone_rx<T: Send + 'static>(rx: &Self::Rx<T>) -> Self::Rx<T>;
}

/// Retry `f` until it yields a value: `pause`, and `sched_yield` every 64 tries.
#[inline]
fn spin<R>(mut f: impl FnMut() -> Option<R>) -> R {
    let mut tries = 0u32;
    loop {
        if let Some(r) = f() {
            return r;
        }
        tries += 1;
        if tries.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

struct SpindleSpsc;
impl Peer for SpindleSpsc {
    type Tx<T: Send + 'static> = spsc::Producer<T>;
    type Rx<T: Send + 'static> = spsc::Consumer<T>;
    const BLOCKS: bool = true;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        spsc::ring(cap)
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        tx.push(v).is_ok()
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        rx.pop().ok()
    }
}

struct SpindleMpmc;
impl Peer for SpindleMpmc {
    type Tx<T: Send + 'static> = mpmc::Sender<T>;
    type Rx<T: Send + 'static> = mpmc::Receiver<T>;
    const BLOCKS: bool = true;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        mpmc::channel(cap)
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        tx.send(v).is_ok()
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        rx.recv().ok()
    }
}
impl Multi for SpindleMpmc {
    fn clone_tx<T: Send + 'static>(tx: &Self::Tx<T>) -> Self::Tx<T> {
        tx.clone()
    }
    fn clone_rx<T: Send + 'static>(rx: &Self::Rx<T>) -> Self::Rx<T> {
        rx.clone()
    }
}

struct Rtrb;
impl Peer for Rtrb {
    type Tx<T: Send + 'static> = rtrb::Producer<T>;
    type Rx<T: Send + 'static> = rtrb::Consumer<T>;
    const BLOCKS: bool = false;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        rtrb::RingBuffer::new(cap)
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        let mut v = Some(v);
        spin(|| match tx.push(v.take()?) {
            Ok(()) => Some(()),
            Err(rtrb::PushError::Full(back)) => {
                v = Some(back);
                None
            }
        });
        true // rtrb cannot tell: its consumer never leaves while the lab runs
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        Some(spin(|| rx.pop().ok()))
    }
}

struct CrossbeamChannel;
impl Peer for CrossbeamChannel {
    type Tx<T: Send + 'static> = crossbeam_channel::Sender<T>;
    type Rx<T: Send + 'static> = crossbeam_channel::Receiver<T>;
    const BLOCKS: bool = true;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        crossbeam_channel::bounded(cap)
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        tx.send(v).is_ok()
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        rx.recv().ok()
    }
}
impl Multi for CrossbeamChannel {
    fn clone_tx<T: Send + 'static>(tx: &Self::Tx<T>) -> Self::Tx<T> {
        tx.clone()
    }
    fn clone_rx<T: Send + 'static>(rx: &Self::Rx<T>) -> Self::Rx<T> {
        rx.clone()
    }
}

struct CrossbeamArrayQueue;
impl Peer for CrossbeamArrayQueue {
    type Tx<T: Send + 'static> = Arc<ArrayQueue<T>>;
    type Rx<T: Send + 'static> = Arc<ArrayQueue<T>>;
    const BLOCKS: bool = false;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        let q = Arc::new(ArrayQueue::new(cap));
        (q.clone(), q)
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        let mut v = Some(v);
        spin(|| match tx.push(v.take()?) {
            Ok(()) => Some(()),
            Err(back) => {
                v = Some(back);
                None
            }
        });
        true // a queue has no other side to leave
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        Some(spin(|| rx.pop()))
    }
}
impl Multi for CrossbeamArrayQueue {
    fn clone_tx<T: Send + 'static>(tx: &Self::Tx<T>) -> Self::Tx<T> {
        tx.clone()
    }
    fn clone_rx<T: Send + 'static>(rx: &Self::Rx<T>) -> Self::Rx<T> {
        rx.clone()
    }
}

struct Flume;
impl Peer for Flume {
    type Tx<T: Send + 'static> = flume::Sender<T>;
    type Rx<T: Send + 'static> = flume::Receiver<T>;
    const BLOCKS: bool = true;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        flume::bounded(cap)
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        tx.send(v).is_ok()
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        rx.recv().ok()
    }
}
impl Multi for Flume {
    fn clone_tx<T: Send + 'static>(tx: &Self::Tx<T>) -> Self::Tx<T> {
        tx.clone()
    }
    fn clone_rx<T: Send + 'static>(rx: &Self::Rx<T>) -> Self::Rx<T> {
        rx.clone()
    }
}

struct Kanal;
impl Peer for Kanal {
    type Tx<T: Send + 'static> = kanal::Sender<T>;
    type Rx<T: Send + 'static> = kanal::Receiver<T>;
    const BLOCKS: bool = true;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        kanal::bounded(cap)
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        tx.send(v).is_ok()
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        rx.recv().ok()
    }
}
impl Multi for Kanal {
    fn clone_tx<T: Send + 'static>(tx: &Self::Tx<T>) -> Self::Tx<T> {
        tx.clone()
    }
    fn clone_rx<T: Send + 'static>(rx: &Self::Rx<T>) -> Self::Rx<T> {
        rx.clone()
    }
}

struct StdSync;
impl Peer for StdSync {
    type Tx<T: Send + 'static> = std::sync::mpsc::SyncSender<T>;
    type Rx<T: Send + 'static> = std::sync::mpsc::Receiver<T>;
    const BLOCKS: bool = true;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        std::sync::mpsc::sync_channel(cap)
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        tx.send(v).is_ok()
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        rx.recv().ok()
    }
}

struct RingbufBlocking;
impl Peer for RingbufBlocking {
    type Tx<T: Send + 'static> =
        ringbuf_blocking::BlockingProd<Arc<ringbuf_blocking::BlockingHeapRb<T>>>;
    type Rx<T: Send + 'static> =
        ringbuf_blocking::BlockingCons<Arc<ringbuf_blocking::BlockingHeapRb<T>>>;
    const BLOCKS: bool = true;
    fn make<T: Send + 'static>(cap: usize) -> (Self::Tx<T>, Self::Rx<T>) {
        ringbuf_blocking::BlockingHeapRb::<T>::new(cap).split()
    }
    #[inline]
    fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
        tx.push(v).is_ok()
    }
    #[inline]
    fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
        rx.pop().ok()
    }
}

/// Run `a(tx)` and `b(rx)` on two threads (pinned to `pin`'s CPUs), timing both.
fn pair<A: Send, B: Send>(
    tx: A,
    rx: B,
    pin: Option<&[usize]>,
    a: impl Fn(A) + Sync,
    b: impl Fn(B) + Sync,
) -> Span {
    let (tx, rx) = (Mutex::new(Some(tx)), Mutex::new(Some(rx)));
    run_together(2, pin, |i| {
        if i == 0 {
            let tx = tx.lock().unwrap_or_else(|e| e.into_inner()).take();
            a(tx.expect("taken once"));
        } else {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner()).take();
            b(rx.expect("taken once"));
        }
    })
}

const CAPACITY: usize = 1024;

// The measured loops. Each runs in a function of its own that owns its ends (taken by
// value and moved into locals: an argument passed by value lives in the caller's memory, where
// the compiler keeps a handle's fields up to date after every operation) and stops at the first
// error, returning false, which its caller turns into a panic once the loop is over. A panic inside the loop, or a call that may unwind anywhere in the
// function that holds an end, gives that function a landing pad that drops the end, so the end
// must live in memory: a ring that keeps its index in its handle (rtrb, Spindle's spsc) then
// has that index stored to memory on every operation (the compiler must assume the `Release`
// store that publishes an item can make it visible), one store per item more than the ring
// itself does, which streaming between two CPUs pays in full. Every rival runs the same loops.

/// An item the loops send, and keep alive once received as far as the compiler knows
/// (`consume`) without `std::hint::black_box`, whose `asm` clobbers all memory: after it every
/// end that lives in memory counts as read and written, so a ring's handle fields would be
/// stored and reloaded around each receive. `consume` hands each 8-byte word of the item to an
/// empty `asm` that touches no memory instead.
trait Item: Send + Copy + Default + 'static {
    fn consume(self);
}

impl Item for u64 {
    #[inline(always)]
    fn consume(self) {
        // SAFETY: an empty template: it reads the register and does nothing else.
        unsafe {
            std::arch::asm!("/* {0} */", in(reg) self, options(nomem, nostack, preserves_flags))
        };
    }
}

impl Item for [u64; 8] {
    #[inline(always)]
    fn consume(self) {
        for w in self {
            w.consume();
        }
    }
}

/// `n` sends of `item()`; false if the receiver left.
#[inline(never)]
fn send_n<P: Peer, T: Send + 'static>(tx: P::Tx<T>, n: u64, item: impl Fn(u64) -> T) -> bool {
    let mut tx = tx; // a local of this function (see above)
    for i in 0..n {
        if !P::send(&mut tx, item(i)) {
            return false;
        }
    }
    true
}

/// `n` receives; false if the sender left.
#[inline(never)]
fn recv_n<P: Peer, T: Item>(rx: P::Rx<T>, n: u64) -> bool {
    let mut rx = rx; // a local of this function (see above)
    for _ in 0..n {
        match P::recv(&mut rx) {
            Some(v) => v.consume(),
            None => return false,
        }
    }
    true
}

/// The ends a two-ended loop gives back, and whether it ran to the end.
type Ends<P> = (bool, <P as Peer>::Tx<u64>, <P as Peer>::Rx<u64>);

/// `n` times: send, then receive (the reply, or on one thread the item just sent). The ends
/// come back to the caller, which drops them: dropping the first here could unwind while the
/// second is alive, and the landing pad that would drop the second is an escape of its
/// address like any other (see above).
#[inline(never)]
fn ping_n<P: Peer>(tx: P::Tx<u64>, rx: P::Rx<u64>, n: u64) -> Ends<P> {
    let (mut tx, mut rx) = (tx, rx); // locals of this function (see above)
    for i in 0..n {
        if !P::send(&mut tx, i) {
            return (false, tx, rx);
        }
        match P::recv(&mut rx) {
            Some(v) => v.consume(),
            None => return (false, tx, rx),
        }
    }
    (true, tx, rx)
}

/// `n` times: receive, then send it back; the ends come back as from `ping_n`.
#[inline(never)]
fn pong_n<P: Peer>(tx: P::Tx<u64>, rx: P::Rx<u64>, n: u64) -> Ends<P> {
    let (mut tx, mut rx) = (tx, rx); // locals of this function (see above)
    for _ in 0..n {
        let Some(v) = P::recv(&mut rx) else {
            return (false, tx, rx);
        };
        if !P::send(&mut tx, v) {
            return (false, tx, rx);
        }
    }
    (true, tx, rx)
}

/// `n` pushes and pops on one thread, one item in the ring at a time.
fn one_thread<P: Peer>(n: u64) -> Span {
    let (tx, rx) = P::make::<u64>(CAPACITY);
    let mut ends = None;
    let span = crate::kit::time(|| ends = Some(ping_n::<P>(tx, rx, n)));
    assert!(
        ends.is_some_and(|(done, _, _)| done),
        "one_thread: a side of the ring is gone"
    );
    span
}

/// `n` items of type T from one thread to another.
fn stream<P: Peer, T: Item>(n: u64, pin: Option<&[usize]>) -> Span {
    let (tx, rx) = P::make::<T>(CAPACITY);
    pair(
        tx,
        rx,
        pin,
        |tx| {
            assert!(
                send_n::<P, T>(tx, n, |_| T::default()),
                "stream: receiver gone"
            )
        },
        |rx| assert!(recv_n::<P, T>(rx, n), "stream: sender gone"),
    )
}

/// `n` round trips through two one-slot rings.
fn ping_pong<P: Peer>(n: u64, pin: Option<&[usize]>) -> Span {
    let (ping_tx, ping_rx) = P::make::<u64>(1);
    let (pong_tx, pong_rx) = P::make::<u64>(1);
    pair(
        (ping_tx, pong_rx),
        (pong_tx, ping_rx),
        pin,
        |(tx, rx)| assert!(ping_n::<P>(tx, rx, n).0, "ping-pong: partner gone"),
        |(tx, rx)| assert!(pong_n::<P>(tx, rx, n).0, "ping-pong: partner gone"),
    )
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// A consumer waiting for `n` messages sent one per millisecond: its CPU time in % of the
/// wall time, in the steady state: the first of `n + 1` messages is received before the clocks
/// start, for every ring alike. Its wait includes the thread's start and the channel's first
/// use (a new ring's waiter has not yet learnt that its producer is slow), which a long-lived
/// consumer pays once, not per message.
fn idle_consumer<P: Peer>(n: u64, pin: Option<&[usize]>) -> Sample {
    let (tx, rx) = P::make::<u64>(CAPACITY);
    let share = Mutex::new(f64::NAN);
    pair(
        tx,
        rx,
        pin,
        |mut tx| {
            let start = Instant::now();
            for i in 1..=n + 1 {
                let due = start + Duration::from_millis(i);
                if let Some(d) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                assert!(P::send(&mut tx, i), "idle: receiver gone");
            }
        },
        |mut rx| {
            std::hint::black_box(P::recv(&mut rx).expect("idle: sender gone"));
            let (c0, t0) = (thread_cpu(), Instant::now());
            assert!(recv_n::<P, u64>(rx, n), "idle: sender gone");
            let (c1, t1) = (thread_cpu(), Instant::now());
            *share.lock().unwrap_or_else(|e| e.into_inner()) =
                100.0 * (c1 - c0).as_secs_f64() / (t1 - t0).as_secs_f64();
        },
    );
    let cpu = share.into_inner().unwrap_or_else(|e| e.into_inner());
    Sample::new().with("cpu", cpu)
}

/// `n` wakes of a consumer asleep in `recv`: ns from just before the push to the consumer
/// running, per wake.
fn wake<P: Peer>(n: u64, pin: Option<&[usize]>, ticks_per_ns: f64) -> Vec<f64> {
    let (tx, rx) = P::make::<u64>(CAPACITY);
    let waiting = CachePadded(AtomicU64::new(0));
    let latencies = Mutex::new(Vec::new());
    pair(
        tx,
        rx,
        pin,
        |mut tx| {
            for i in 1..=n {
                while waiting.load(Acquire) < i {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_micros(300));
                assert!(P::send(&mut tx, rdtsc()), "wake: receiver gone");
            }
        },
        |mut rx| {
            let mut mine = Vec::with_capacity(n as usize);
            for i in 1..=n {
                waiting.store(i, Release);
                let sent = P::recv(&mut rx).expect("wake: sender gone");
                mine.push(rdtsc().saturating_sub(sent) as f64 / ticks_per_ns);
            }
            *latencies.lock().unwrap_or_else(|e| e.into_inner()) = mine;
        },
    );
    latencies.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// The floor of `wake`: a stamp and a bare futex word.
fn wake_futex(n: u64, pin: Option<&[usize]>, ticks_per_ns: f64) -> Vec<f64> {
    let word = CachePadded(AtomicU32::new(0));
    let stamp = CachePadded(AtomicU64::new(0));
    let waiting = CachePadded(AtomicU64::new(0));
    let latencies = Mutex::new(Vec::new());
    pair(
        (),
        (),
        pin,
        |()| {
            for i in 1..=n {
                while waiting.load(Acquire) < i {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_micros(300));
                stamp.store(rdtsc(), Relaxed);
                word.store(i as u32, Release);
                futex::wake(&word, 1);
            }
        },
        |()| {
            let mut mine = Vec::with_capacity(n as usize);
            for i in 1..=n {
                waiting.store(i, Release);
                loop {
                    let w = word.load(Acquire);
                    if w == i as u32 {
                        break;
                    }
                    futex::wait(&word, w, None);
                }
                mine.push(rdtsc().saturating_sub(stamp.load(Relaxed)) as f64 / ticks_per_ns);
            }
            *latencies.lock().unwrap_or_else(|e| e.into_inner()) = mine;
        },
    );
    latencies.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// `n` messages through one channel, `threads` threads: half send, half receive.
fn many<P: Multi>(n: u64, threads: usize) -> Span {
    let senders = (threads / 2).max(1);
    let receivers = (threads - senders).max(1);
    let (tx, rx) = P::make::<u64>(CAPACITY);
    let txs: Vec<_> = (0..senders)
        .map(|_| Mutex::new(Some(P::clone_tx(&tx))))
        .collect();
    let rxs: Vec<_> = (0..receivers)
        .map(|_| Mutex::new(Some(P::clone_rx(&rx))))
        .collect();
    drop((tx, rx));
    let share = |total: u64, parts: usize, i: usize| {
        total / parts as u64 + u64::from((i as u64) < total % parts as u64)
    };
    run_together(senders + receivers, None, |i| {
        if i < senders {
            let tx = txs[i]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("once");
            assert!(
                send_n::<P, u64>(tx, share(n, senders, i), |v| v),
                "mpmc: receivers gone"
            );
        } else {
            let j = i - senders;
            let rx = rxs[j]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("once");
            assert!(
                recv_n::<P, u64>(rx, share(n, receivers, j)),
                "mpmc: senders gone"
            );
        }
    })
}

/// Two threads' CPUs (None: the scheduler places them).
type Cpus<'a> = Option<&'a [usize]>;

/// `n` items or round trips between two threads on the given CPUs.
type TwoThreads = fn(u64, Cpus) -> Span;

/// `n` wakes of a sleeping consumer, given TSC ticks per ns: every latency in ns.
type Wakes = fn(u64, Cpus, f64) -> Vec<f64>;

/// A ring or channel, and how each section runs it: one entry of [`RIVALS`].
struct Rival {
    /// Variant ids are `<section>-<id>`.
    id: &'static str,
    label: &'static str,
    one_thread: fn(u64) -> Span,
    stream8: TwoThreads,
    stream64: TwoThreads,
    ping_pong: TwoThreads,
    /// The idle and wake sections take only rings that block (None: it spins).
    idle: Option<fn(u64, Cpus) -> Sample>,
    wake: Option<Wakes>,
    /// The MPMC section takes only channels whose both ends can be cloned.
    many: Option<fn(u64, usize) -> Span>,
    many_label: &'static str,
    /// A peer's ids of the guarantees that compare Spindle's spsc with it: ping-pong on one
    /// CPU, and (if it blocks) the idle consumer. None for Spindle's own rings.
    versus: Option<(&'static str, &'static str)>,
}

impl Rival {
    /// `P` in every section a [`Peer`] can run.
    const fn of<P: Peer>(id: &'static str, label: &'static str) -> Rival {
        Rival {
            id,
            label,
            one_thread: one_thread::<P>,
            stream8: stream::<P, u64>,
            stream64: stream::<P, [u64; 8]>,
            ping_pong: ping_pong::<P>,
            idle: if P::BLOCKS {
                Some(idle_consumer::<P>)
            } else {
                None
            },
            wake: if P::BLOCKS { Some(wake::<P>) } else { None },
            many: None,
            many_label: label,
            versus: None,
        }
    }

    /// `P` in every section, the MPMC one included.
    const fn multi<P: Multi>(id: &'static str, label: &'static str) -> Rival {
        let mut r = Rival::of::<P>(id, label);
        r.many = Some(many::<P>);
        r
    }

    /// A peer, with the ids of the guarantees against it (see [`peer!`]).
    const fn versus(mut self, one_cpu: &'static str, idle: &'static str) -> Rival {
        self.versus = Some((one_cpu, idle));
        self
    }

    /// Another label in the MPMC section.
    const fn many_label(mut self, label: &'static str) -> Rival {
        self.many_label = label;
        self
    }
}

/// A peer's entry in [`RIVALS`]: `Rival::of` or `Rival::multi` (`$how`), with the ids of the
/// guarantees that compare Spindle's spsc with it made from its own id.
macro_rules! peer {
    ($how:ident, $P:ty, $id:literal, $label:literal) => {
        Rival::$how::<$P>($id, $label).versus(
            concat!("spsc-one-cpu-vs-", $id),
            concat!("spsc-idle-vs-", $id),
        )
    };
}

/// Every ring and channel, in the order of the report's rows. Adding one is an entry here (and
/// its `impl Peer` above).
const RIVALS: &[Rival] = &[
    Rival::of::<SpindleSpsc>("spsc", "Spindle spsc ring (blocking)"),
    Rival::multi::<SpindleMpmc>("mpmc", "Spindle mpmc channel (blocking)"),
    peer!(of, Rtrb, "rtrb", "rtrb (spins)"),
    peer!(
        multi,
        CrossbeamChannel,
        "crossbeam",
        "crossbeam-channel bounded (blocking)"
    ),
    peer!(
        multi,
        CrossbeamArrayQueue,
        "arrayqueue",
        "crossbeam ArrayQueue (spins)"
    )
    .many_label("crossbeam ArrayQueue (spins, yields)"),
    peer!(multi, Flume, "flume", "flume bounded (blocking)"),
    peer!(multi, Kanal, "kanal", "kanal bounded (blocking)"),
    peer!(of, StdSync, "std", "std sync_channel (blocking)"),
    peer!(
        of,
        RingbufBlocking,
        "ringbuf",
        "ringbuf-blocking (blocking)"
    ),
];

/// Push + pop on one thread, every rival.
fn one_thread_section(plan: &mut Plan<'_>) {
    plan.section(
        Section::per_op(
            "onethread",
            "Push + pop on one thread, nobody waiting",
            "push + pop",
        )
        .baseline("onethread-rtrb"),
    );
    for r in RIVALS {
        plan.variant(Variant::per_op(
            "onethread",
            format!("onethread-{}", r.id),
            r.label,
            r.one_thread,
        ));
    }
}

/// A per-op section of two threads on `cpus`, every rival, each run by `run_of(rival)`.
fn two_thread_section<'a>(
    plan: &mut Plan<'a>,
    section: Section,
    cpus: Cpus<'a>,
    run_of: fn(&Rival) -> TwoThreads,
) {
    let id = section.id;
    plan.section(section);
    for r in RIVALS {
        let run = run_of(r);
        plan.variant(
            Variant::per_op(id, format!("{id}-{}", r.id), r.label, move |n| run(n, cpus))
                .threads(2),
        );
    }
}

/// Streams of 8- and 64-byte items, ping-pong on two CPUs and on one.
fn two_thread_sections<'a>(plan: &mut Plan<'a>, pin: Cpus<'a>, one: Cpus<'a>) {
    let s = |id, title, baseline: &str| Section::per_op(id, title, "item").baseline(baseline);
    two_thread_section(
        plan,
        s(
            "stream8",
            "Stream 8-byte items between two CPUs",
            "stream8-rtrb",
        ),
        pin,
        |r| r.stream8,
    );
    two_thread_section(
        plan,
        s(
            "stream64",
            "Stream 64-byte items between two CPUs",
            "stream64-rtrb",
        ),
        pin,
        |r| r.stream64,
    );
    let s = |id, title, baseline: &str| Section::per_op(id, title, "round trip").baseline(baseline);
    two_thread_section(
        plan,
        s(
            "pingpong",
            "Ping-pong between two CPUs (one-slot rings)",
            "pingpong-crossbeam",
        ),
        pin,
        |r| r.ping_pong,
    );
    two_thread_section(
        plan,
        s(
            "pingpong1",
            "Ping-pong with both threads on one CPU",
            "pingpong1-crossbeam",
        ),
        one,
        |r| r.ping_pong,
    );
}

/// CPU time of a consumer waiting for one message per millisecond, rings that block.
fn idle_section<'a>(plan: &mut Plan<'a>, pin: Cpus<'a>) {
    plan.section(
        Section::new("idle", "A consumer waiting for one message per millisecond")
            .baseline("idle-crossbeam")
            .metric(Metric::ratio("cpu", "consumer CPU time (% of one CPU)")),
    );
    plan.variant(Variant::fixed(
        "idle",
        "idle-bound",
        "1 % of one CPU (the guarantee's bound)",
        || Sample::new().with("cpu", 1.0),
    ));
    for r in RIVALS {
        if let Some(idle) = r.idle {
            plan.variant(
                Variant::fixed("idle", format!("idle-{}", r.id), r.label, move || {
                    idle(20, pin)
                })
                .threads(2),
            );
        }
    }
}

/// Waking a consumer asleep in pop / recv, rings that block, against a bare futex.
fn wake_section<'a>(plan: &mut Plan<'a>, pin: Cpus<'a>, ticks_per_ns: f64) {
    plan.section(
        Section::new("wake", "Wake a consumer asleep in pop / recv")
            .baseline("wake-futex")
            .metric(Metric::time(
                "latency",
                "push to consumer running, median of a run",
            )),
    );
    let latency = |mut l: Vec<f64>| {
        Sample::new()
            .with("latency", median(&mut l))
            .pool("latency", l)
    };
    plan.variant(
        Variant::calibrated(
            "wake",
            "wake-futex",
            "bare futex wait/wake (floor)",
            move |n| latency(wake_futex(n, pin, ticks_per_ns)),
        )
        .threads(2)
        .max_work(10_000),
    );
    for r in RIVALS {
        if let Some(wake) = r.wake {
            plan.variant(
                Variant::calibrated("wake", format!("wake-{}", r.id), r.label, move |n| {
                    latency(wake(n, pin, ticks_per_ns))
                })
                .threads(2)
                .max_work(10_000),
            );
        }
    }
}

/// One entry of [`UNBOUNDED`]: an unbounded channel as a [`Peer`] (`make` ignores the
/// capacity; `$make()` gives the ends, whose `send` and `recv` return `Result`s), with its id,
/// label, 8-byte stream and the id of the guarantee against it.
macro_rules! unbounded {
    ($id:literal, $label:literal, $tx:ident, $rx:ident, $make:path) => {{
        struct P;
        impl Peer for P {
            type Tx<T: Send + 'static> = $tx<T>;
            type Rx<T: Send + 'static> = $rx<T>;
            const BLOCKS: bool = true;
            fn make<T: Send + 'static>(_: usize) -> (Self::Tx<T>, Self::Rx<T>) {
                $make()
            }
            #[inline]
            fn send<T: Send + 'static>(tx: &mut Self::Tx<T>, v: T) -> bool {
                tx.send(v).is_ok()
            }
            #[inline]
            fn recv<T: Send + 'static>(rx: &mut Self::Rx<T>) -> Option<T> {
                rx.recv().ok()
            }
        }
        UnboundedRival {
            id: $id,
            label: $label,
            stream: stream::<P, u64>,
            claim: concat!("unbounded-vs-", $id),
        }
    }};
}

struct UnboundedRival {
    id: &'static str,
    label: &'static str,
    stream: TwoThreads,
    /// The guarantee that compares Spindle's with it (unused for Spindle's own).
    claim: &'static str,
}

use crossbeam_channel::{Receiver as CbRx, Sender as CbTx};
use flume::{Receiver as FlumeRx, Sender as FlumeTx};
use kanal::{Receiver as KanalRx, Sender as KanalTx};
use mpmc::{Receiver as MpmcRx, Sender as MpmcTx};
use std::sync::mpsc::{Receiver as StdRx, Sender as StdTx};

/// The unbounded channels of the `unbounded` section, Spindle's first.
const UNBOUNDED: &[UnboundedRival] = &[
    unbounded!(
        "spindle",
        "Spindle mpmc::unbounded",
        MpmcTx,
        MpmcRx,
        mpmc::unbounded
    ),
    unbounded!(
        "crossbeam",
        "crossbeam-channel unbounded",
        CbTx,
        CbRx,
        crossbeam_channel::unbounded
    ),
    unbounded!(
        "flume",
        "flume unbounded",
        FlumeTx,
        FlumeRx,
        flume::unbounded
    ),
    unbounded!(
        "kanal",
        "kanal unbounded",
        KanalTx,
        KanalRx,
        kanal::unbounded
    ),
    unbounded!(
        "std",
        "std mpsc::channel",
        StdTx,
        StdRx,
        std::sync::mpsc::channel
    ),
];

/// 8-byte items streamed between two CPUs through unbounded channels.
fn unbounded_section<'a>(plan: &mut Plan<'a>, pin: Cpus<'a>) {
    plan.section(
        Section::per_op(
            "unbounded",
            "Stream 8-byte items between two CPUs, unbounded channels",
            "item",
        )
        .baseline("unbounded-crossbeam"),
    );
    for r in UNBOUNDED {
        let run = r.stream;
        plan.variant(
            Variant::per_op(
                "unbounded",
                format!("unbounded-{}", r.id),
                r.label,
                move |n| run(n, pin),
            )
            .threads(2),
        );
    }
}

/// One entry of the `select` section: its variant id, label, and the run — `n` 8-byte items,
/// sent alternately into two bounded channels (`$bounded(capacity)`) by one thread and
/// received by another through the `select!` macro `$select` over both: what waiting on two
/// channels at once costs.
macro_rules! select_rival {
    ($id:literal, $label:literal, $bounded:path, $($select:ident)::+) => {{
        fn run(n: u64, pin: Cpus) -> Span {
            let (a, b) = ($bounded(CAPACITY), $bounded(CAPACITY));
            pair(
                (a.0, b.0),
                (a.1, b.1),
                pin,
                |(a, b)| {
                    let mut sent = 0;
                    while sent < n && (if sent % 2 == 0 { &a } else { &b }).send(sent).is_ok() {
                        sent += 1;
                    }
                    assert_eq!(sent, n, "select: the receiver left");
                },
                |(a, b)| {
                    // Once the sender is done, a drained channel is ready too (disconnected),
                    // as crossbeam-channel's select! says: count the items.
                    let mut got = 0;
                    while got < n {
                        let v = $($select)::+! {
                            recv(a) -> v => v,
                            recv(b) -> v => v,
                        };
                        if let Ok(v) = v {
                            v.consume();
                            got += 1;
                        }
                    }
                },
            )
        }
        ($id, $label, run as TwoThreads)
    }};
}

/// Waiting on two channels at once: Spindle's `select!` against crossbeam-channel's.
fn select_section<'a>(plan: &mut Plan<'a>, pin: Cpus<'a>) {
    plan.section(
        Section::per_op(
            "select",
            "Receive 8-byte items from two channels through select!, sender on another CPU",
            "item",
        )
        .baseline("select-crossbeam"),
    );
    let variants = [
        select_rival!(
            "select-spindle",
            "Spindle mpmc + select!",
            mpmc::channel::<u64>,
            spindle_sync::select
        ),
        select_rival!(
            "select-crossbeam",
            "crossbeam-channel + select!",
            crossbeam_channel::bounded::<u64>,
            crossbeam_channel::select
        ),
    ];
    for (id, label, run) in variants {
        plan.variant(Variant::per_op("select", id, label, move |n| run(n, pin)).threads(2));
    }
}

/// Messages through one channel with `threads` threads, channels with cloneable ends.
fn many_section(plan: &mut Plan<'_>, threads: usize) {
    plan.section(
        Section::per_op(
            "many",
            format!("MPMC: {threads} threads, half sending"),
            "message",
        )
        .baseline("many-crossbeam"),
    );
    for r in RIVALS {
        if let Some(many) = r.many {
            plan.variant(
                Variant::per_op("many", format!("many-{}", r.id), r.many_label, move |n| {
                    many(n, threads)
                })
                .threads(threads),
            );
        }
    }
}

/// Spindle's guarantees; `threads` as in the MPMC section.
fn claims(plan: &mut Plan<'_>, threads: usize) {
    let g = Claim::guarantee;
    plan.claim(
        g(
            "spsc-fast-path",
            "Spindle's spsc push + pop costs at most 1.0 × rtrb's (one thread, nobody waiting)",
        )
        .ratio("onethread-spsc", "onethread-rtrb")
        .at_most(1.0),
    );
    for (s, bytes) in [("stream8", 8), ("stream64", 64)] {
        plan.claim(
            Claim::guarantee(
                if bytes == 8 { "spsc-stream8-vs-rtrb" } else { "spsc-stream64-vs-rtrb" },
                format!("Spindle's spsc streams {bytes}-byte items between two CPUs at least as fast as rtrb"),
            )
            .ratio(format!("{s}-spsc"), format!("{s}-rtrb"))
            .at_most(1.0),
        );
        plan.claim(
            Claim::guarantee(
                if bytes == 8 { "spsc-stream8-vs-crossbeam" } else { "spsc-stream64-vs-crossbeam" },
                format!("Spindle's spsc streams {bytes}-byte items at least 2 × as fast as crossbeam-channel"),
            )
            .ratio(format!("{s}-spsc"), format!("{s}-crossbeam"))
            .at_most(0.5),
        );
    }
    plan.claim(
        g(
            "spsc-pingpong-vs-rtrb",
            "Spindle's spsc ping-pong between two CPUs costs at most 1.0 × rtrb's (which spins)",
        )
        .ratio("pingpong-spsc", "pingpong-rtrb")
        .at_most(1.0),
    );
    // On one CPU a hand-off needs a context switch (microseconds) where two CPUs exchange a
    // cache line (about a hundred nanoseconds), so the two-CPU round trip is no bound for it:
    // the comparison a user makes is with the peers on the same CPU, every one of them.
    for r in RIVALS {
        if let Some((id, _)) = r.versus {
            plan.claim(
                Claim::guarantee(id, format!("Spindle's spsc ping-pong with both threads on one CPU costs at most 1.0 × {}'s", r.id))
                    .ratio("pingpong1-spsc", format!("pingpong1-{}", r.id))
                    .at_most(1.0),
            );
        }
    }
    plan.claim(
        g("spsc-idle", "A consumer waiting on Spindle's spsc for one message per ms burns at most 1 % of a CPU")
            .ratio("idle-spsc", "idle-bound")
            .at_most(1.0),
    );
    for r in RIVALS.iter().filter(|r| r.idle.is_some()) {
        if let Some((_, id)) = r.versus {
            plan.claim(
                Claim::guarantee(id, format!("A consumer waiting on Spindle's spsc for one message per ms burns at most 1.0 × the CPU time of one waiting on {}", r.id))
                    .ratio("idle-spsc", format!("idle-{}", r.id))
                    .at_most(1.0),
            );
        }
    }
    plan.claim(
        g(
            "spsc-wake",
            "Spindle's spsc wakes a sleeping consumer within 1.1 × the bare futex floor",
        )
        .ratio("wake-spsc", "wake-futex")
        .at_most(1.1),
    );
    for r in &UNBOUNDED[1..] {
        plan.claim(
            Claim::guarantee(
                r.claim,
                format!("Spindle's mpmc::unbounded streams 8-byte items between two CPUs at least as fast as {}", r.label),
            )
            .ratio("unbounded-spindle", format!("unbounded-{}", r.id))
            .at_most(1.0),
        );
    }
    plan.claim(
        g(
            "select-vs-crossbeam",
            "Spindle's select! over two channels receives at least as fast as crossbeam-channel's",
        )
        .ratio("select-spindle", "select-crossbeam")
        .at_most(1.0),
    );
    for (id, peer, name) in [
        ("mpmc-vs-crossbeam", "crossbeam", "crossbeam-channel"),
        ("mpmc-vs-kanal", "kanal", "kanal"),
    ] {
        plan.claim(
            Claim::guarantee(
                id,
                format!("Spindle's mpmc moves messages with {threads} threads at least as fast as {name}"),
            )
            .ratio("many-mpmc", format!("many-{peer}"))
            .at_most(1.0),
        );
    }
}

impl Experiment for Rings {
    fn info(&self) -> Info {
        Info {
            name: "rings",
            title: "Rings and channels: fast path, streaming, ping-pong, idle waiting, wake-up, MPMC, unbounded, select, async",
            summary: "Spindle's spsc ring and mpmc channel vs rtrb, crossbeam (channel, ArrayQueue), flume, kanal, std, ringbuf-blocking, tokio mpsc",
            question: "Does a ring that can block cost anything when nobody waits — one thread, two threads streaming, \
                       ping-pong on two CPUs and on one — how much CPU does a waiting consumer burn, how fast does a \
                       sleeping one wake, and how does the MPMC channel hold up with 4 × cores threads?",
            references: &[],
            quick_seconds: 30,
        }
    }

    fn run(&self, ctx: &mut Ctx) -> Result<(), String> {
        let pair_cpus = ctx.cpu_pair();
        let pin = pair_cpus.as_ref().map(|p| &p[..]);
        let one_cpu = [ctx.cpus()[0]; 2];
        let threads = 4 * ctx.cores();
        let mut plan = Plan::new();
        plan.param("capacity", format!("{CAPACITY} slots (ping-pong: 1)"));
        plan.param(
            "two-thread sections",
            match pair_cpus {
                Some([a, b]) => format!("producer on CPU {a}, consumer on CPU {b}"),
                None => "one CPU: the threads time-share it".into(),
            },
        );
        plan.param(
            "one-CPU ping-pong",
            format!("both threads on CPU {}", one_cpu[0]),
        );
        plan.param(
            "MPMC threads",
            format!("{threads} (4 × {} cores), half sending", ctx.cores()),
        );

        one_thread_section(&mut plan);
        two_thread_sections(&mut plan, pin, Some(&one_cpu[..]));
        idle_section(&mut plan, pin);
        wake_section(&mut plan, pin, ctx.machine.tsc_ghz);
        many_section(&mut plan, threads);
        unbounded_section(&mut plan, pin);
        select_section(&mut plan, pin);
        super::rings_async::sections(&mut plan);
        claims(&mut plan, threads);
        plan.note("Rings that never block (rtrb, ArrayQueue) are driven as their users drive them: retry with pause, and sched_yield every 64 tries; in the idle and wake sections they would burn a whole CPU by design, so they are left out there.");
        plan.note("std's sync_channel has one receiver, so it is left out of the MPMC section; so are the single-producer rings.");
        plan.note("The current-thread async sections time a whole channel operation plus a future's poll in a few nanoseconds, so they also time how the compiler inlined each channel's futures into this binary's loops, which can differ between builds of the lab whose channel code is the same (a change elsewhere in the binary moves code between codegen units): a verdict near the bound in these sections can flip between builds for that reason alone.");
        if pair_cpus.is_none() {
            plan.note(
                "This machine gives the lab one CPU: the 'two CPUs' sections time-share it too.",
            );
        }
        ctx.measure(plan)
    }
}
