//! Async sends and receives (`send_async`, `recv_async`, `stream`) on every flavour, driven by a
//! minimal executor written here (a thread that parks until its waker unparks it): sync and
//! async ends together, a rendezvous between two futures of one thread, cancellation, and an
//! oversubscribed stress test (4 threads per CPU) that counts values lost or duplicated and
//! stalls (a task not woken within 5 s; excused only if `common::Heartbeat` saw the process
//! frozen). No timing is asserted.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use spindle_sync::mpmc::{self, Receiver, RecvError, SendError, Sender, TryRecvError};

mod common;
use common::{chan, per_cpu, time_limit, PerSender, Rng, FLAVOURS};

const PATIENCE: Duration = Duration::from_secs(5);

/// Wakes by unparking its thread, and counts the wakes.
struct ThreadWaker {
    thread: std::thread::Thread,
    woken: AtomicU64,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.fetch_add(1, SeqCst);
        self.thread.unpark();
    }
}

/// Polls the futures (all of one output type) until every one is ready, parking between rounds
/// until a waker fires. Counts the parks that ran out of patience with no wake: stalls, unless
/// the heartbeat saw the process frozen.
fn block_on_all<F: Future>(futures: Vec<F>, stalls: &AtomicU64) -> Vec<F::Output> {
    let waker_arc = Arc::new(ThreadWaker {
        thread: std::thread::current(),
        woken: AtomicU64::new(0),
    });
    let waker = Waker::from(waker_arc.clone());
    let mut cx = Context::from_waker(&waker);
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    loop {
        let seen = waker_arc.woken.load(SeqCst);
        for (f, o) in futures.iter_mut().zip(&mut out) {
            if o.is_none() {
                if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                    *o = Some(v);
                }
            }
        }
        if out.iter().all(Option::is_some) {
            return out.into_iter().map(Option::unwrap).collect();
        }
        let t0 = Instant::now();
        while waker_arc.woken.load(SeqCst) == seen {
            std::thread::park_timeout(PATIENCE);
            if waker_arc.woken.load(SeqCst) == seen && t0.elapsed() >= PATIENCE {
                if !common::heartbeat().excuses("async task", t0, PATIENCE) {
                    stalls.fetch_add(1, Relaxed);
                }
                break;
            }
        }
    }
}

fn block_on<F: Future>(f: F) -> F::Output {
    let stalls = AtomicU64::new(0);
    let v = block_on_all(vec![f], &stalls).pop().unwrap();
    assert_eq!(stalls.load(Relaxed), 0, "a task was never woken");
    v
}

#[test]
fn async_ends_meet_sync_ends_on_every_flavour() {
    for cap in FLAVOURS {
        // Async sender, sync receiver.
        let (tx, rx) = chan::<u32>(cap);
        std::thread::scope(|s| {
            let r = s.spawn(|| (0..100).map(|_| rx.recv().unwrap()).sum::<u32>());
            block_on(async {
                for i in 0..100 {
                    tx.send_async(i).await.unwrap();
                }
            });
            assert_eq!(r.join().unwrap(), 99 * 100 / 2, "{cap:?}");
        });
        // Sync sender, async receiver.
        let (tx, rx) = chan::<u32>(cap);
        std::thread::scope(|s| {
            s.spawn(|| (0..100).for_each(|i| tx.send(i).unwrap()));
            let sum = block_on(async {
                let mut sum = 0;
                for _ in 0..100 {
                    sum += rx.recv_async().await.unwrap();
                }
                sum
            });
            assert_eq!(sum, 99 * 100 / 2, "{cap:?}");
        });
    }
}

/// Two futures of one thread: an async send and an async receive meet, on every flavour
/// (on a rendezvous, the queued async send and the watching async receive).
#[test]
fn two_futures_of_one_thread_meet() {
    for cap in FLAVOURS {
        let (tx, rx) = chan::<u32>(cap);
        let stalls = AtomicU64::new(0);
        let sender = async {
            for i in 0..50 {
                tx.send_async(i).await.unwrap();
            }
            0
        };
        let receiver = async {
            let mut sum = 0;
            for _ in 0..50 {
                sum += rx.recv_async().await.unwrap();
            }
            sum
        };
        let futures: Vec<std::pin::Pin<Box<dyn Future<Output = u32>>>> =
            vec![Box::pin(receiver), Box::pin(sender)];
        let out = block_on_all(futures, &stalls);
        assert_eq!(out, [49 * 50 / 2, 0], "{cap:?}");
        assert_eq!(stalls.load(Relaxed), 0, "{cap:?}");
    }
}

#[test]
fn async_disconnection_like_sync() {
    for cap in FLAVOURS {
        let (tx, rx) = chan::<u32>(cap);
        drop(rx);
        assert_eq!(block_on(tx.send_async(3)), Err(SendError(3)), "{cap:?}");
        let (tx, rx) = chan::<u32>(cap);
        if cap != Some(0) {
            tx.send(1).unwrap();
        }
        drop(tx);
        if cap != Some(0) {
            assert_eq!(block_on(rx.recv_async()), Ok(1), "{cap:?}");
        }
        assert_eq!(block_on(rx.recv_async()), Err(RecvError), "{cap:?}");
        // Disconnection while waiting.
        let (tx, rx) = chan::<u32>(cap);
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                drop(tx);
            });
            assert_eq!(block_on(rx.recv_async()), Err(RecvError), "{cap:?}");
        });
        // A rendezvous send queued when the receivers go gets its value back.
        if cap == Some(0) {
            let (tx, rx) = chan::<String>(cap);
            std::thread::scope(|s| {
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(10));
                    drop(rx);
                });
                let r = block_on(tx.send_async("back".to_string()));
                assert_eq!(r.map_err(|e| e.into_inner()), Err("back".to_string()));
            });
        }
    }
}

/// A dropped future loses nothing: a pending receive takes nothing; a queued rendezvous send is
/// withdrawn; a pending send on a full channel leaves it as it was.
#[test]
fn dropped_futures_lose_nothing() {
    let noop = Waker::noop();
    let mut cx = Context::from_waker(noop);
    for cap in FLAVOURS {
        let (tx, rx) = chan::<u32>(cap);
        {
            let mut f = pin!(rx.recv_async());
            assert!(f.as_mut().poll(&mut cx).is_pending(), "{cap:?}");
        }
        if cap == Some(0) {
            {
                let mut f = pin!(tx.send_async(5));
                assert!(f.as_mut().poll(&mut cx).is_pending());
            }
            // Withdrawn: no sender is queued any more.
            assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        } else if let Some(n) = cap {
            for i in 0..n as u32 {
                tx.send(i).unwrap();
            }
            {
                let mut f = pin!(tx.send_async(99));
                assert!(f.as_mut().poll(&mut cx).is_pending(), "{cap:?}");
            }
            assert_eq!(rx.len(), n);
            assert_eq!(rx.try_recv(), Ok(0));
        }
        tx.send_timeout(7, Duration::ZERO).ok();
    }
}

/// Wakers run with no lock of the channel held. An executor whose waker takes its run-queue
/// mutex, and which drops a queued rendezvous send while holding that mutex (the drop takes the
/// channel's lock), must not deadlock with a receiver that pairs with another queued send of
/// the same task and wakes it.
#[test]
fn a_waker_taking_the_executors_lock_cannot_deadlock_a_channel() {
    struct QueueWaker(Arc<std::sync::Mutex<Vec<u32>>>);
    impl Wake for QueueWaker {
        fn wake(self: Arc<Self>) {
            self.0.lock().unwrap().push(1);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.lock().unwrap().push(1);
        }
    }
    let queue = Arc::new(std::sync::Mutex::new(Vec::new()));
    let waker = Waker::from(Arc::new(QueueWaker(queue.clone())));
    let mut cx = Context::from_waker(&waker);
    let (tx, rx) = mpmc::channel::<u32>(0);
    let tx: &'static Sender<u32> = Box::leak(Box::new(tx));
    let mut first = Box::pin(tx.send_async(2)); // queued first: the receiver pairs with it
    let mut second = Box::pin(tx.send_async(1));
    assert!(first.as_mut().poll(&mut cx).is_pending());
    assert!(second.as_mut().poll(&mut cx).is_pending());
    let executor = std::thread::spawn(move || {
        let _run_queue = queue.lock().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(second); // withdraws it: takes the channel's lock
        drop(first);
    });
    std::thread::sleep(Duration::from_millis(30));
    let receiver = std::thread::spawn(move || rx.recv_timeout(PATIENCE));
    let t0 = Instant::now();
    while !(executor.is_finished() && receiver.is_finished()) {
        assert!(
            t0.elapsed() < PATIENCE,
            "deadlock: a waker ran under the channel's lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    executor.join().unwrap();
    assert_eq!(receiver.join().unwrap(), Ok(2));
}

/// A pending future dropped by another thread-local's destructor, after the crate's own
/// thread-local is gone, does not abort the process.
#[test]
fn a_future_dropped_at_thread_exit_is_fine() {
    use std::cell::RefCell;
    type Held = RefCell<Option<std::pin::Pin<Box<mpmc::RecvFut<'static, u32>>>>>;
    thread_local! {
        static HOLDER: Held = const { RefCell::new(None) };
    }
    let (tx, rx) = mpmc::channel::<u32>(1);
    let rx: &'static Receiver<u32> = Box::leak(Box::new(rx));
    std::thread::spawn(move || {
        HOLDER.with(|_| ()); // registered first, so destroyed after the crate's
        let mut f = Box::pin(rx.recv_async());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(f.as_mut().poll(&mut cx).is_pending());
        HOLDER.with(|h| *h.borrow_mut() = Some(f));
    })
    .join()
    .unwrap();
    tx.send(1).unwrap();
    assert_eq!(rx.try_recv(), Ok(1));
}

#[cfg(feature = "futures-core")]
#[test]
fn the_receiver_is_a_stream() {
    use futures_core::Stream;
    let (tx, rx) = mpmc::channel::<u32>(4);
    std::thread::scope(|s| {
        s.spawn(move || (1..=10).for_each(|i| tx.send(i).unwrap()));
        let sum = block_on(async {
            let mut stream = pin!(rx.stream());
            let mut sum = 0;
            while let Some(v) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
                sum += v;
            }
            sum
        });
        assert_eq!(sum, 55);
    });
}

/// Async and sync senders and receivers on one channel of each flavour, across threads each
/// running its own executor with several tasks: every value arrives exactly once.
/// A wait that cannot proceed yields once (its task is woken at once, before anything is
/// sent) and registers when polled again; after that miss, the side's next wait registers at
/// once, and the one after yields again (the window of `Observers`: one wait after a first
/// miss). Nothing wakes a registered task but the send.
#[test]
fn a_wait_yields_once_then_registers_and_a_miss_skips_the_next_yield() {
    let (tx, rx) = mpmc::channel::<u32>(1);
    let count = Arc::new(ThreadWaker {
        thread: std::thread::current(),
        woken: AtomicU64::new(0),
    });
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    let woken = || count.woken.load(SeqCst);

    let mut first = pin!(rx.recv_async());
    assert!(first.as_mut().poll(&mut cx).is_pending());
    assert_eq!(
        woken(),
        1,
        "the first wait yields: its task is woken at once"
    );
    assert!(first.as_mut().poll(&mut cx).is_pending());
    assert_eq!(woken(), 1, "polled again, it registers and is not woken");
    tx.send(1).unwrap();
    assert_eq!(woken(), 2, "the send wakes the registered task");
    assert_eq!(first.as_mut().poll(&mut cx), Poll::Ready(Ok(1)));

    let mut second = pin!(rx.recv_async());
    assert!(second.as_mut().poll(&mut cx).is_pending());
    assert_eq!(
        woken(),
        2,
        "after a missed yield the next wait registers at once"
    );
    tx.send(2).unwrap();
    assert_eq!(woken(), 3);
    assert_eq!(second.as_mut().poll(&mut cx), Poll::Ready(Ok(2)));

    let mut third = pin!(rx.recv_async());
    assert!(third.as_mut().poll(&mut cx).is_pending());
    assert_eq!(
        woken(),
        4,
        "the window was one wait: the next one yields again"
    );
    tx.send(3).unwrap();
    assert_eq!(third.as_mut().poll(&mut cx), Poll::Ready(Ok(3)));
    assert_eq!(
        woken(),
        4,
        "a yield that helped leaves nothing registered to wake"
    );
}

#[test]
fn async_stress_each_value_once() {
    common::heartbeat();
    let threads = per_cpu(4, 8);
    let per_sender: u64 = if cfg!(debug_assertions) {
        5_000
    } else {
        50_000
    };
    for cap in FLAVOURS {
        let started = Instant::now();
        let (senders, receivers) = (threads / 2, threads - threads / 2);
        let stalls = AtomicU64::new(0);
        let (sent, got) = (PerSender::new(senders * 2), PerSender::new(senders * 2));
        let (tx, rx) = chan::<(usize, u64)>(cap);
        std::thread::scope(|s| {
            for id in 0..senders {
                let (tx, sent, stalls) = (tx.clone(), &sent, &stalls);
                s.spawn(move || {
                    if id % 2 == 0 {
                        // Sync, as a control.
                        for seq in 0..per_sender {
                            if started.elapsed() > time_limit() {
                                break;
                            }
                            tx.send((id * 2, seq)).unwrap();
                            sent.add(id * 2, seq);
                        }
                        return;
                    }
                    // Two async tasks on this thread.
                    let task = |task: usize| {
                        let tx = &tx;
                        async move {
                            let who = id * 2 + task;
                            for seq in 0..per_sender / 2 {
                                if started.elapsed() > time_limit() {
                                    break;
                                }
                                tx.send_async((who, seq)).await.unwrap();
                                sent.add(who, seq);
                            }
                        }
                    };
                    block_on_all(vec![task(0), task(1)], stalls);
                });
            }
            drop(tx);
            for r in 0..receivers {
                let (rx, got, stalls) = (rx.clone(), &got, &stalls);
                s.spawn(move || {
                    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (r as u64 + 7));
                    if r % 2 == 0 {
                        while let Ok((id, seq)) = rx.recv() {
                            got.add(id, seq);
                            if rng.below(64) == 0 {
                                std::thread::yield_now();
                            }
                        }
                        return;
                    }
                    let task = || {
                        let rx = &rx;
                        async move {
                            while let Ok((id, seq)) = rx.recv_async().await {
                                got.add(id, seq);
                            }
                        }
                    };
                    block_on_all(vec![task(), task()], stalls);
                });
            }
        });
        let mismatched = sent.mismatches(&got);
        eprintln!(
            "async stress {cap:?}: {senders} sender threads, {receivers} receiver threads, {} values",
            sent.total()
        );
        assert_eq!(mismatched, 0, "{cap:?}: values lost or duplicated");
        assert_eq!(stalls.load(Relaxed), 0, "{cap:?}: tasks never woken");
    }
}
