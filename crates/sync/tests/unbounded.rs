//! The unbounded channel (`mpmc::unbounded()`, crossbeam-channel's `unbounded()`): its
//! documented behaviour, written from crossbeam-channel's documentation, and stress tests under
//! oversubscription (4 threads per CPU) that count what must never happen: a value lost,
//! duplicated or out of its sender's order, a value dropped twice or leaked, a false `Empty`,
//! and a stall (every blocking receive has a 5 s patience; a healthy run never waits that long
//! unless the machine stops running the process, which `common::Heartbeat` tells). No timing
//! is asserted.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_sync::mpmc::{self, RecvTimeoutError, SendError, TryRecvError, TrySendError};

mod common;
use common::{per_cpu, time_limit, PerSender, Rng};

const PATIENCE: Duration = Duration::from_secs(5);

/// Counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

#[test]
fn sends_never_block_and_values_come_in_order() {
    let (tx, rx) = mpmc::unbounded::<u32>();
    assert_eq!((tx.capacity(), rx.capacity()), (None, None));
    assert!(rx.is_empty() && !rx.is_full() && !tx.is_full());
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(5)),
        Err(RecvTimeoutError::Timeout)
    );
    // Across many blocks (31 slots each).
    for i in 0..1000 {
        assert_eq!(tx.try_send(i), Ok(()));
        assert_eq!(tx.len(), i as usize + 1);
    }
    assert!(!tx.is_full());
    assert_eq!(tx.send_timeout(1000, Duration::ZERO), Ok(()));
    for i in 0..=1000 {
        assert_eq!(rx.len(), 1001 - i as usize);
        assert_eq!(rx.try_recv(), Ok(i));
    }
    assert!(rx.is_empty());
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
}

#[test]
fn disconnection_like_crossbeam() {
    // Senders gone: receivers take what is left, then fail.
    let (tx, rx) = mpmc::unbounded::<u32>();
    let tx2 = tx.clone();
    tx.send(1).unwrap();
    tx2.send(2).unwrap();
    drop(tx);
    assert!(!rx.is_disconnected());
    drop(tx2);
    assert!(rx.is_disconnected());
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)),
        Err(RecvTimeoutError::Disconnected)
    );
    // Receivers gone: sends fail at once and hand the value back.
    let (tx, rx) = mpmc::unbounded::<u32>();
    drop(rx);
    assert!(tx.is_disconnected());
    assert_eq!(tx.send(3), Err(SendError(3)));
    assert_eq!(tx.try_send(4), Err(TrySendError::Disconnected(4)));
    // A blocked receiver wakes when the last sender goes.
    let (tx, rx) = mpmc::unbounded::<u32>();
    let waiting = std::thread::spawn(move || rx.recv());
    std::thread::sleep(Duration::from_millis(20));
    drop(tx);
    assert!(waiting.join().unwrap().is_err());
}

#[test]
fn each_value_is_dropped_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    // The last receiver drops what is queued at once, senders still alive.
    let (tx, rx) = mpmc::unbounded::<Counted>();
    for _ in 0..100 {
        tx.send(Counted(drops.clone())).unwrap();
    }
    drop(rx.recv().unwrap());
    assert_eq!(drops.load(Relaxed), 1);
    drop(rx);
    assert_eq!(
        drops.load(Relaxed),
        100,
        "queued values dropped with the last receiver"
    );
    match tx.send(Counted(drops.clone())) {
        Err(SendError(v)) => drop(v),
        Ok(()) => panic!("sent to a channel without receivers"),
    }
    assert_eq!(drops.load(Relaxed), 101);
    drop(tx);
    // Values left when the senders go stay for the receivers; the channel drops the rest.
    let (tx, rx) = mpmc::unbounded::<Counted>();
    for _ in 0..70 {
        tx.send(Counted(drops.clone())).unwrap();
    }
    drop(tx);
    for _ in 0..40 {
        drop(rx.recv().unwrap());
    }
    assert_eq!(drops.load(Relaxed), 141);
    drop(rx);
    assert_eq!(drops.load(Relaxed), 171);
}

/// `try_recv` is linearizable (crossbeam-channel's test logic, written anew): each thread
/// `send(0)` then `try_recv()`; every `try_recv` follows a completed send whose value no other
/// thread can take without leaving its own, so none may answer `Empty`, though senders are
/// preempted between claiming an index and writing it.
#[test]
fn try_recv_after_a_completed_send_finds_a_value() {
    let threads = per_cpu(2, 4).min(16);
    let started = Instant::now();
    let false_empty = AtomicU64::new(0);
    let (tx, rx) = mpmc::unbounded::<u64>();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (tx, rx, false_empty) = (tx.clone(), rx.clone(), &false_empty);
            s.spawn(move || {
                for _ in 0..25_000 {
                    if started.elapsed() > time_limit() {
                        break;
                    }
                    tx.send(0).unwrap();
                    if rx.try_recv() == Err(TryRecvError::Empty) {
                        false_empty.fetch_add(1, Relaxed);
                        rx.recv().unwrap();
                    }
                }
            });
        }
    });
    assert!(rx.is_empty());
    assert_eq!(false_empty.load(Relaxed), 0, "try_recv answered Empty");
}

/// 4 threads per CPU, half senders (each sends its sequence 0, 1, 2, … tagged with its id),
/// half receivers mixing `recv`, `recv_timeout` and `try_recv`, on one channel; and one more
/// sender and receiver on a channel of their own, where a timeout cannot be excused by a
/// rival's progress (`common::starved`). Per sender, each receiver sees increasing sequence
/// numbers, and the counts and sums received equal what was sent; every boxed value is
/// dropped once.
#[test]
fn unbounded_stress_each_value_once_in_order() {
    common::heartbeat();
    let threads = per_cpu(4, 8);
    let (senders, receivers) = (threads / 2, threads - threads / 2);
    let per_sender: u64 = if cfg!(debug_assertions) {
        2_000_000
    } else {
        20_000_000
    };
    let started = Instant::now();
    let (stalls, out_of_order) = (AtomicU64::new(0), AtomicU64::new(0));
    // Senders 0..senders on the shared channel, sender `senders` on the pair's.
    let (sent, got) = (PerSender::new(senders + 1), PerSender::new(senders + 1));
    // (channel, its first sender id, senders, receivers); `served`: the receives on each.
    let plan = [
        (
            mpmc::unbounded::<Box<(usize, u64)>>(),
            0,
            senders,
            receivers,
        ),
        (mpmc::unbounded(), senders, 1, 1),
    ];
    let served: Vec<common::Served> = plan.iter().map(|_| Default::default()).collect();
    std::thread::scope(|s| {
        for (((tx, rx), first, n_tx, n_rx), receives) in plan.into_iter().zip(&served) {
            for id in first..first + n_tx {
                let (tx, sent) = (tx.clone(), &sent);
                s.spawn(move || {
                    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1));
                    let mut seq = 0;
                    while seq < per_sender && started.elapsed() < time_limit() {
                        // Bursts, so that receivers both find values and run dry.
                        for _ in 0..(1 + rng.below(64)).min(per_sender - seq) {
                            tx.send(Box::new((id, seq))).unwrap();
                            sent.add(id, seq);
                            seq += 1;
                        }
                        if rng.below(8) == 0 {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            drop(tx);
            for r in 0..n_rx {
                let (rx, got, stalls, out_of_order) = (rx.clone(), &got, &stalls, &out_of_order);
                s.spawn(move || {
                    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((first + r) as u64 + 7));
                    let mut last = vec![None::<u64>; senders + 1];
                    let mut take = |v: Box<(usize, u64)>| {
                        let (id, seq) = *v;
                        if last[id].is_some_and(|l| l >= seq) {
                            out_of_order.fetch_add(1, Relaxed);
                        }
                        last[id] = Some(seq);
                        got.add(id, seq);
                        receives.add();
                    };
                    loop {
                        match rng.below(4) {
                            0 => match rx.try_recv() {
                                Ok(v) => take(v),
                                Err(TryRecvError::Empty) => std::hint::spin_loop(),
                                Err(TryRecvError::Disconnected) => break,
                            },
                            1 => match rx.recv() {
                                Ok(v) => take(v),
                                Err(_) => break,
                            },
                            // (the receives and the time when the call started, its result)
                            _ => {
                                match (receives.now(), Instant::now(), rx.recv_timeout(PATIENCE)) {
                                    (_, _, Ok(v)) => take(v),
                                    (_, _, Err(RecvTimeoutError::Disconnected)) => break,
                                    (before, t0, Err(RecvTimeoutError::Timeout)) => {
                                        let what =
                                            format!("receiver {} of sender {first}'s channel", r);
                                        let served = receives.now() - before;
                                        if !common::starved(&what, t0, PATIENCE, served)
                                            && !common::heartbeat().excuses(&what, t0, PATIENCE)
                                        {
                                            stalls.fetch_add(1, Relaxed);
                                        }
                                    }
                                }
                            }
                        }
                    }
                });
            }
            drop(rx);
        }
    });
    let mismatches = sent.mismatches(&got);
    let total = sent.total();
    eprintln!(
        "unbounded stress: {senders} + 1 senders, {receivers} + 1 receivers, {total} values in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(mismatches, 0, "values lost or duplicated");
    assert_eq!(
        out_of_order.load(Relaxed),
        0,
        "values out of their sender's order"
    );
    assert_eq!(stalls.load(Relaxed), 0, "a receive waited out its patience");
    assert!(total > 0);
}
