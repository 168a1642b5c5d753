//! The rendezvous channel (`mpmc::channel(0)`, crossbeam-channel's `bounded(0)`): its
//! documented behaviour, written from crossbeam-channel's documentation, and a stress test
//! under oversubscription (2 to 4 threads per CPU) that counts what must never happen: a value
//! received twice or never, a send that reports success for a value nobody received (or
//! failure for one somebody did), a value dropped twice or leaked, and a stall (every blocking
//! call has a 5 s patience; a healthy run never waits that long unless the machine stops
//! running the process, which `common::Heartbeat` tells). No timing is asserted.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_sync::mpmc::{self, RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError};

mod common;
use common::{per_cpu, time_limit, PerSender, Rng};

const PATIENCE: Duration = Duration::from_secs(5);

/// Polls `f` until it returns `Some` (the partner it needs has not blocked yet), for at most
/// `PATIENCE`.
fn eventually<R>(mut f: impl FnMut() -> Option<R>) -> R {
    let start = Instant::now();
    loop {
        if let Some(r) = f() {
            return r;
        }
        assert!(start.elapsed() < PATIENCE, "the partner never blocked");
        std::thread::sleep(Duration::from_micros(100));
    }
}

#[test]
fn a_rendezvous_holds_nothing() {
    let (tx, rx) = mpmc::channel::<u32>(0);
    assert_eq!(tx.capacity(), Some(0));
    assert_eq!(rx.capacity(), Some(0));
    assert_eq!((tx.len(), rx.len()), (0, 0));
    assert!(tx.is_empty() && rx.is_empty());
    assert!(
        tx.is_full() && rx.is_full(),
        "crossbeam-channel calls a rendezvous full"
    );
    assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(
        tx.send_timeout(2, Duration::from_millis(5)),
        Err(SendTimeoutError::Timeout(2))
    );
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(5)),
        Err(RecvTimeoutError::Timeout)
    );
    assert!(!tx.is_disconnected() && !rx.is_disconnected());
}

#[test]
fn a_send_returns_only_once_its_value_is_received() {
    let (tx, rx) = mpmc::channel::<u32>(0);
    let receiving = Arc::new(AtomicBool::new(false));
    let r = receiving.clone();
    let receiver = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        r.store(true, SeqCst);
        rx.recv()
    });
    tx.send(42).unwrap();
    assert!(
        receiving.load(SeqCst),
        "send returned before any receiver called recv"
    );
    assert_eq!(receiver.join().unwrap(), Ok(42));
}

#[test]
fn try_send_succeeds_when_a_receiver_is_blocked() {
    let (tx, rx) = mpmc::channel::<u32>(0);
    let receiver = std::thread::spawn(move || rx.recv());
    let mut v = 7;
    eventually(|| match tx.try_send(v) {
        Ok(()) => Some(()),
        Err(TrySendError::Full(back)) => {
            v = back;
            None
        }
        Err(e) => panic!("unexpected {e:?}"),
    });
    assert_eq!(receiver.join().unwrap(), Ok(7));
}

#[test]
fn try_recv_succeeds_when_a_sender_is_blocked() {
    let (tx, rx) = mpmc::channel::<u32>(0);
    let sender = std::thread::spawn(move || tx.send(8));
    let got = eventually(|| match rx.try_recv() {
        Ok(v) => Some(v),
        Err(TryRecvError::Empty) => None,
        Err(e) => panic!("unexpected {e:?}"),
    });
    assert_eq!(got, 8);
    assert_eq!(sender.join().unwrap(), Ok(()));
}

#[test]
fn disconnection_wakes_the_blocked_side() {
    // The last receiver goes while a sender is blocked: the sender gets its value back.
    let (tx, rx) = mpmc::channel::<String>(0);
    let sender = std::thread::spawn(move || tx.send("kept".to_string()));
    std::thread::sleep(Duration::from_millis(20));
    drop(rx);
    let err = sender.join().unwrap().unwrap_err();
    assert_eq!(err.into_inner(), "kept");

    // The last sender goes while a receiver is blocked: the receiver learns it.
    let (tx, rx) = mpmc::channel::<u32>(0);
    let receiver = std::thread::spawn(move || rx.recv());
    std::thread::sleep(Duration::from_millis(20));
    let clone = tx.clone();
    drop(tx);
    assert!(!clone.is_disconnected());
    drop(clone);
    assert!(receiver.join().unwrap().is_err());

    // Afterwards every call fails at once, with the value back.
    let (tx, rx) = mpmc::channel::<u32>(0);
    drop(rx);
    assert!(tx.is_disconnected());
    assert_eq!(tx.try_send(1), Err(TrySendError::Disconnected(1)));
    assert_eq!(
        tx.send_timeout(2, Duration::from_secs(1)),
        Err(SendTimeoutError::Disconnected(2))
    );
    assert_eq!(tx.send(3).map_err(|e| e.into_inner()), Err(3));
    let (tx, rx) = mpmc::channel::<u32>(0);
    drop(tx);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)),
        Err(RecvTimeoutError::Disconnected)
    );
    assert_eq!(rx.iter().count(), 0);
}

/// A value that counts its drops.
struct Counted {
    sender: usize,
    seq: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Relaxed);
    }
}

/// Senders and receivers (2 to 4 per CPU together) pass values through one rendezvous with
/// every call form: blocking, timed (short timeouts, which race the partner) and `try_*`.
/// Each value is received at most once, and exactly once if and only if its send reported
/// success; every value is dropped exactly once; no blocking call waits out its patience.
#[test]
fn rendezvous_stress_each_value_once() {
    let threads = per_cpu(3, 4);
    let (senders, receivers) = (threads / 2, threads - threads / 2);
    let per_sender: u64 = 200_000;
    let deadline = Instant::now() + time_limit();
    let (tx, rx) = mpmc::channel::<Counted>(0);
    let drops = Arc::new(AtomicUsize::new(0));
    let stalls = AtomicU64::new(0);
    let heartbeat = common::heartbeat();
    let senders_done = AtomicUsize::new(0);
    // Per sender: the number of values whose send succeeded and the sum of their sequence
    // numbers, and the same for what the receivers got.
    let (sent, got) = (PerSender::new(senders), PerSender::new(senders));
    let made = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for id in 0..senders {
            let (tx, drops, sent, stalls, made, senders_done) =
                (tx.clone(), &drops, &sent, &stalls, &made, &senders_done);
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1));
                for seq in 0..per_sender {
                    if Instant::now() > deadline {
                        break;
                    }
                    made.fetch_add(1, Relaxed);
                    let value = Counted {
                        sender: id,
                        seq,
                        drops: drops.clone(),
                    };
                    let ok = match rng.below(4) {
                        0 => tx.try_send(value).is_ok(),
                        1 => tx
                            .send_timeout(value, Duration::from_micros(rng.below(50)))
                            .is_ok(),
                        // (when the call started, its result)
                        _ => match (Instant::now(), tx.send_timeout(value, PATIENCE)) {
                            (_, Ok(())) => true,
                            (t0, Err(SendTimeoutError::Timeout(_))) => {
                                let what = format!("sender {id}");
                                if !heartbeat.excuses(&what, t0, PATIENCE) {
                                    stalls.fetch_add(1, Relaxed);
                                }
                                false
                            }
                            (_, Err(SendTimeoutError::Disconnected(_))) => false,
                        },
                    };
                    if ok {
                        sent.add(id, seq);
                    }
                }
                senders_done.fetch_add(1, SeqCst);
            });
        }
        drop(tx);
        for id in 0..receivers {
            let (rx, got, stalls, senders_done) = (rx.clone(), &got, &stalls, &senders_done);
            s.spawn(move || {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (id as u64 + 7));
                let take = |v: Counted| {
                    got.add(v.sender, v.seq);
                };
                loop {
                    match rng.below(4) {
                        0 => match rx.try_recv() {
                            Ok(v) => take(v),
                            Err(TryRecvError::Disconnected) => break,
                            Err(TryRecvError::Empty) => std::thread::yield_now(),
                        },
                        1 => match rx.recv_timeout(Duration::from_micros(rng.below(50))) {
                            Ok(v) => take(v),
                            Err(RecvTimeoutError::Disconnected) => break,
                            Err(RecvTimeoutError::Timeout) => {}
                        },
                        _ => match (Instant::now(), rx.recv_timeout(PATIENCE)) {
                            (_, Ok(v)) => take(v),
                            (_, Err(RecvTimeoutError::Disconnected)) => break,
                            // Senders still running never leave a receiver waiting that long.
                            (t0, Err(RecvTimeoutError::Timeout)) => {
                                let what = format!("receiver {id}");
                                if senders_done.load(SeqCst) < senders
                                    && !heartbeat.excuses(&what, t0, PATIENCE)
                                {
                                    stalls.fetch_add(1, Relaxed);
                                }
                            }
                        },
                    }
                }
            });
        }
        drop(rx);
    });
    let mismatches = sent.mismatches(&got);
    let total = sent.total();
    eprintln!(
        "rendezvous stress: {senders} senders, {receivers} receivers, {total} values handed over"
    );
    assert_eq!(mismatches, 0, "values lost, duplicated or misreported");
    assert_eq!(
        stalls.load(Relaxed),
        0,
        "a blocking call waited out its patience"
    );
    assert_eq!(
        drops.load(Relaxed),
        made.load(Relaxed),
        "every value is dropped exactly once"
    );
    assert!(total > 0, "no value was handed over");
}
