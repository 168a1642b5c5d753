//! `mpmc::Select` and `select!` (crossbeam-channel's): their documented behaviour, written from
//! crossbeam-channel's documentation, over every flavour (bounded, rendezvous, unbounded), and
//! a stress test under oversubscription (4 threads per CPU) that counts what must never
//! happen: a value lost or duplicated, a select completing two operations, and a stall (every
//! select has a 5 s patience, excused only if `common::Heartbeat` saw the process frozen or
//! other consumers received meanwhile, see `common::starved`; a select alone on its side is
//! checked by the tests of a blocked select being woken, and by the loom models). No timing is
//! asserted.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};

use spindle_sync::mpmc::{
    self, ReadyTimeoutError, RecvError, Select, SendError, TryReadyError, TryRecvError,
    TrySelectError,
};
use spindle_sync::{select, select_biased};

mod common;
use common::{chan, per_cpu, time_limit, PerSender, Rng, FLAVOURS};

const PATIENCE: Duration = Duration::from_secs(5);

#[test]
fn select_receives_from_the_ready_channel() {
    for cap in [Some(1), Some(8), None] {
        let (_tx1, rx1) = chan::<u32>(cap);
        let (tx2, rx2) = chan::<u32>(cap);
        tx2.send(42).unwrap();
        let mut sel = Select::new();
        let i1 = sel.recv(&rx1);
        let i2 = sel.recv(&rx2);
        assert_eq!((i1, i2), (0, 1));
        let oper = sel.select();
        assert_eq!(oper.index(), i2);
        assert_eq!(oper.recv(&rx2), Ok(42));
        assert!(sel.try_select().is_err(), "{cap:?}: both empty now");
    }
}

#[test]
fn select_sends_where_there_is_room() {
    let (tx1, _rx1) = mpmc::channel::<u32>(1);
    tx1.send(0).unwrap(); // full
    let (tx2, rx2) = mpmc::channel::<u32>(1);
    let mut sel = Select::new();
    sel.send(&tx1);
    let i2 = sel.send(&tx2);
    let oper = sel.select_timeout(PATIENCE).expect("tx2 has room");
    assert_eq!(oper.index(), i2);
    assert_eq!(oper.send(&tx2, 5), Ok(()));
    assert_eq!(rx2.try_recv(), Ok(5));
    // An unbounded channel always has room.
    let (tx3, rx3) = mpmc::unbounded::<u32>();
    let mut sel = Select::new();
    sel.send(&tx1);
    let i3 = sel.send(&tx3);
    let oper = sel.try_select().unwrap();
    assert_eq!(oper.index(), i3);
    oper.send(&tx3, 6).unwrap();
    assert_eq!(rx3.try_recv(), Ok(6));
}

#[test]
fn try_select_and_timeouts_when_nothing_is_ready() {
    for cap in FLAVOURS {
        let (_tx, rx) = chan::<u32>(cap);
        let mut sel = Select::new();
        sel.recv(&rx);
        assert_eq!(sel.try_select().map(|_| ()), Err(TrySelectError), "{cap:?}");
        let t0 = Instant::now();
        assert!(sel.select_timeout(Duration::from_millis(20)).is_err());
        assert!(t0.elapsed() >= Duration::from_millis(20), "{cap:?}");
    }
    // No operations: try_select fails, a timed select times out.
    let mut sel = Select::new();
    assert!(sel.try_select().is_err());
    assert!(sel.select_timeout(Duration::from_millis(5)).is_err());
}

#[test]
fn a_blocked_select_is_woken_by_each_flavour() {
    for cap in FLAVOURS {
        let (_tx1, rx1) = chan::<u32>(cap);
        let (tx2, rx2) = chan::<u32>(cap);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                tx2.send(9).unwrap();
            });
            let mut sel = Select::new();
            sel.recv(&rx1);
            let i2 = sel.recv(&rx2);
            let oper = sel.select_timeout(PATIENCE).expect("woken by the send");
            assert_eq!(oper.index(), i2, "{cap:?}");
            assert_eq!(oper.recv(&rx2), Ok(9), "{cap:?}");
        });
    }
}

#[test]
fn a_blocked_select_send_is_woken_by_room() {
    for cap in [Some(0), Some(1)] {
        let (tx1, rx1) = chan::<u32>(cap);
        if cap == Some(1) {
            tx1.send(1).unwrap();
        }
        let (tx2, _rx2) = mpmc::channel::<u32>(1);
        tx2.send(0).unwrap(); // full, stays full
        std::thread::scope(|s| {
            let r = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                let mut got = vec![rx1.recv_timeout(PATIENCE).unwrap()];
                if cap == Some(1) {
                    got.push(rx1.recv_timeout(PATIENCE).unwrap());
                }
                got
            });
            let mut sel = Select::new();
            let i1 = sel.send(&tx1);
            sel.send(&tx2);
            let oper = sel.select_timeout(PATIENCE).expect("woken by the receive");
            assert_eq!(oper.index(), i1);
            assert_eq!(oper.send(&tx1, 7), Ok(()));
            let got = r.join().unwrap();
            assert_eq!(got.last(), Some(&7), "{cap:?}");
        });
    }
}

/// A rendezvous pairs a select with a plain blocked partner, and two selects with each other.
#[test]
fn rendezvous_pairs_selects_with_partners_and_with_selects() {
    let (tx, rx) = mpmc::channel::<u32>(0);
    std::thread::scope(|s| {
        s.spawn(|| tx.send(3).unwrap());
        let mut sel = Select::new();
        sel.recv(&rx);
        let oper = sel.select_timeout(PATIENCE).expect("a sender comes");
        assert_eq!(oper.recv(&rx), Ok(3));
    });
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(rx.recv_timeout(PATIENCE), Ok(4)));
        let mut sel = Select::new();
        sel.send(&tx);
        let oper = sel.select_timeout(PATIENCE).expect("a receiver comes");
        assert_eq!(oper.send(&tx, 4), Ok(()));
    });
    for round in 0..200u32 {
        std::thread::scope(|s| {
            s.spawn(|| {
                let got = select! {
                    recv(rx) -> v => v.unwrap(),
                    default(PATIENCE) => panic!("round {round}: no sender"),
                };
                assert_eq!(got, round);
            });
            select! {
                send(tx, round) -> r => r.unwrap(),
                default(PATIENCE) => panic!("round {round}: no receiver"),
            }
        });
    }
    // A select does not pair with itself.
    let mut sel = Select::new();
    sel.send(&tx);
    sel.recv(&rx);
    assert!(sel.select_timeout(Duration::from_millis(10)).is_err());
}

#[test]
fn disconnection_selects_the_operation_with_an_error() {
    for cap in FLAVOURS {
        let (tx, rx) = chan::<u32>(cap);
        let (_tx2, rx2) = chan::<u32>(cap);
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                drop(tx);
            });
            let mut sel = Select::new();
            let i = sel.recv(&rx);
            sel.recv(&rx2);
            let oper = sel.select_timeout(PATIENCE).expect("the disconnection");
            assert_eq!(oper.index(), i, "{cap:?}");
            assert_eq!(oper.recv(&rx), Err(RecvError), "{cap:?}");
        });
        let (tx, rx) = chan::<u32>(cap);
        drop(rx);
        let mut sel = Select::new();
        sel.send(&tx);
        let oper = sel.try_select().expect("a disconnected channel is ready");
        assert_eq!(oper.send(&tx, 8), Err(SendError(8)), "{cap:?}");
    }
}

/// Values queued before the disconnection are still received through a select.
#[test]
fn select_drains_before_reporting_disconnection() {
    for cap in [Some(4), None] {
        let (tx, rx) = chan::<u32>(cap);
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        drop(tx);
        let mut got = Vec::new();
        loop {
            let mut sel = Select::new();
            sel.recv(&rx);
            match sel.select().recv(&rx) {
                Ok(v) => got.push(v),
                Err(RecvError) => break,
            }
        }
        assert_eq!(got, [1, 2]);
    }
}

#[test]
fn removed_operations_are_not_selected() {
    let (tx1, rx1) = mpmc::channel::<u32>(1);
    let (tx2, rx2) = mpmc::channel::<u32>(1);
    tx1.send(1).unwrap();
    tx2.send(2).unwrap();
    let mut sel = Select::new();
    let i1 = sel.recv(&rx1);
    let i2 = sel.recv(&rx2);
    sel.remove(i1);
    for _ in 0..2 {
        let oper = sel.try_select().unwrap();
        assert_eq!(oper.index(), i2);
        assert_eq!(oper.recv(&rx2), Ok(2));
        tx2.send(2).unwrap();
    }
}

/// More operations than a selection keeps in place (it spills to the heap): each is reached,
/// also after removals across that boundary.
#[test]
fn many_operations_and_removals() {
    let chans: Vec<_> = (0..9).map(|_| mpmc::channel::<usize>(1)).collect();
    let mut sel = Select::new();
    let indices: Vec<_> = chans.iter().map(|(_, rx)| sel.recv(rx)).collect();
    assert_eq!(indices, (0..9).collect::<Vec<_>>());
    for k in [0, 5, 8] {
        sel.remove(indices[k]);
    }
    for (k, (tx, rx)) in chans.iter().enumerate() {
        tx.send(k).unwrap();
        match sel.try_select() {
            Ok(oper) => {
                assert!(
                    ![0, 5, 8].contains(&k),
                    "removed operation {k} was selected"
                );
                assert_eq!(oper.index(), indices[k]);
                assert_eq!(oper.recv(rx), Ok(k));
            }
            Err(TrySelectError) => {
                assert!([0, 5, 8].contains(&k), "operation {k} was not selected");
                assert_eq!(rx.try_recv(), Ok(k));
            }
        }
    }
}

/// `ready` reports an operation that could proceed, without performing it.
#[test]
fn ready_reports_without_performing() {
    for cap in FLAVOURS {
        let (tx, rx) = chan::<u32>(cap);
        let (_tx2, rx2) = chan::<u32>(cap);
        let mut sel = Select::new();
        let i = sel.recv(&rx);
        sel.recv(&rx2);
        assert_eq!(sel.try_ready(), Err(TryReadyError), "{cap:?}");
        assert_eq!(
            sel.ready_timeout(Duration::from_millis(10)),
            Err(ReadyTimeoutError),
            "{cap:?}"
        );
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                tx.send(1).unwrap();
            });
            assert_eq!(sel.ready_timeout(PATIENCE), Ok(i), "{cap:?}");
            // Nothing was taken: the value is still there (or its sender still waits).
            assert_eq!(rx.recv_timeout(PATIENCE), Ok(1), "{cap:?}");
        });
        drop(tx);
        assert_eq!(
            sel.try_ready(),
            Ok(i),
            "{cap:?}: a disconnected channel is ready"
        );
    }
    // A send is ready where there is room, or a receiver waits (rendezvous).
    let (tx, rx) = mpmc::channel::<u32>(0);
    let mut sel = Select::new();
    let i = sel.send(&tx);
    assert_eq!(sel.try_ready(), Err(TryReadyError));
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(rx.recv_timeout(PATIENCE), Ok(2)));
        assert_eq!(sel.ready_timeout(PATIENCE), Ok(i));
        tx.send(2).unwrap();
    });
}

/// Two always-ready receivers are both chosen: the try phase starts at a random operation.
#[test]
fn ready_operations_are_chosen_fairly() {
    let (tx1, rx1) = mpmc::unbounded::<u32>();
    let (tx2, rx2) = mpmc::unbounded::<u32>();
    let mut counts = [0u32; 2];
    for _ in 0..1000 {
        tx1.send(1).unwrap();
        tx2.send(2).unwrap();
        select! {
            recv(rx1) -> v => { assert_eq!(v, Ok(1)); counts[0] += 1 }
            recv(rx2) -> v => { assert_eq!(v, Ok(2)); counts[1] += 1 }
        }
    }
    assert!(counts.iter().all(|&c| c > 300), "{counts:?}");
}

/// A biased selection (`Select::new_biased`, `select_biased!`) takes the first ready
/// operation in the order added, every time, over every flavour: in `select`, `try_select`
/// and `ready`; and a later one when the earlier ones are not ready.
#[test]
fn biased_selections_take_the_first_ready_in_order() {
    for cap in FLAVOURS {
        // A rendezvous is ready only with a partner blocked on the other side: give each a
        // sender that waits (here, bounded and unbounded ones are filled directly).
        let (tx1, rx1) = chan::<u32>(cap);
        let (tx2, rx2) = chan::<u32>(cap);
        std::thread::scope(|s| {
            for _ in 0..100 {
                let senders = [(&tx1, 1), (&tx2, 2)].map(|(tx, v)| {
                    if cap == Some(0) {
                        Some(s.spawn(move || tx.send(v).unwrap()))
                    } else {
                        tx.send(v).unwrap();
                        None
                    }
                });
                if cap == Some(0) {
                    // Until both partners are queued, and each receiver is ready.
                    let ready = |rx: &mpmc::Receiver<u32>| {
                        let mut sel = Select::new();
                        sel.recv(rx);
                        sel.try_ready().is_ok()
                    };
                    while !(ready(&rx1) && ready(&rx2)) {
                        std::thread::yield_now();
                    }
                }
                let mut sel = Select::new_biased();
                sel.recv(&rx1);
                sel.recv(&rx2);
                assert_eq!(sel.ready(), 0, "{cap:?}");
                let oper = sel.select();
                assert_eq!(oper.index(), 0, "{cap:?}");
                assert_eq!(oper.recv(&rx1), Ok(1));
                // Only the second is ready now.
                let got = select_biased! {
                    recv(rx1) -> v => (1, v),
                    recv(rx2) -> v => (2, v),
                };
                assert_eq!(got, (2, Ok(2)), "{cap:?}");
                for h in senders.into_iter().flatten() {
                    h.join().unwrap();
                }
            }
        });
        // Both ready again: the macro's first arm wins every time.
        if cap != Some(0) {
            for _ in 0..100 {
                tx1.send(1).unwrap();
                tx2.send(2).unwrap();
                let first = select_biased! {
                    recv(rx1) -> v => v == Ok(1),
                    recv(rx2) -> _ => false,
                    default => panic!("both are ready"),
                };
                assert!(first, "{cap:?}");
                assert_eq!(rx2.try_recv(), Ok(2));
            }
        }
    }
}

/// The `*_deadline` methods take a `std::time::Instant`, as crossbeam-channel's do, as well
/// as a `Deadline` or `None`: a passed instant times out at once, a later one waits, and a
/// value or room already there is taken whatever the deadline.
#[test]
fn deadlines_take_instants_as_crossbeams_do() {
    for cap in FLAVOURS {
        let (tx, rx) = chan::<u32>(cap);
        let past = Instant::now();
        assert_eq!(rx.recv_deadline(past), Err(mpmc::RecvTimeoutError::Timeout));
        let t0 = Instant::now();
        let soon = t0 + Duration::from_millis(20);
        assert_eq!(rx.recv_deadline(soon), Err(mpmc::RecvTimeoutError::Timeout));
        assert!(
            t0.elapsed() >= Duration::from_millis(20),
            "{cap:?}: woke early"
        );
        let mut sel = Select::new();
        sel.recv(&rx);
        assert!(sel.select_deadline(past).is_err());
        assert_eq!(sel.ready_deadline(past), Err(ReadyTimeoutError));
        if cap != Some(0) {
            tx.send_deadline(7, past).unwrap();
            assert_eq!(sel.ready_deadline(past), Ok(0));
            assert_eq!(rx.recv_deadline(past), Ok(7));
            tx.send_deadline(8, None).unwrap();
            assert_eq!(rx.recv_deadline(spindle_sync::Deadline::now()), Ok(8));
        } else {
            // A rendezvous send waits for a receiver: one comes before the deadline.
            std::thread::scope(|s| {
                s.spawn(|| assert_eq!(rx.recv_deadline(Instant::now() + PATIENCE), Ok(9)));
                tx.send_deadline(9, Instant::now() + PATIENCE).unwrap();
            });
        }
    }
}

/// `never()`: never ready, never disconnected, in every form of receive and select.
#[test]
fn never_receives_and_never_disconnects() {
    let never = mpmc::never::<u32>();
    assert_eq!(never.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(
        never.recv_timeout(Duration::from_millis(5)),
        Err(mpmc::RecvTimeoutError::Timeout)
    );
    assert!(!never.is_disconnected());
    assert_eq!((never.len(), never.capacity()), (0, Some(0)));
    let (tx, rx) = mpmc::channel::<u32>(1);
    tx.send(1).unwrap();
    let got = select! {
        recv(never) -> _ => 0,
        recv(rx) -> v => v.unwrap(),
    };
    assert_eq!(got, 1);
    let mut sel = Select::new();
    sel.recv(&never);
    assert!(sel.try_select().is_err());
    assert!(sel.select_timeout(Duration::from_millis(5)).is_err());
    assert_eq!(sel.try_ready(), Err(TryReadyError));
    // Clones and drops change nothing.
    let other = never.clone();
    drop(never);
    assert_eq!(other.try_recv(), Err(TryRecvError::Empty));
}

/// The completion may name another end of the selected channel than the one added (a clone):
/// the check compares channels, after the quick comparison of the ends themselves.
#[test]
fn completing_on_a_clone_of_the_selected_end_works() {
    let (tx, rx) = mpmc::channel::<u32>(1);
    let rx_clone = rx.clone();
    tx.send(7).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let oper = sel.select();
    assert_eq!(oper.recv(&rx_clone), Ok(7));
}

#[test]
#[should_panic(expected = "another channel")]
fn completing_on_another_channel_panics() {
    let (tx1, rx1) = mpmc::channel::<u32>(1);
    let (_tx2, rx2) = mpmc::channel::<u32>(1);
    tx1.send(1).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx1);
    let oper = sel.select();
    let _ = oper.recv(&rx2);
}

#[test]
#[should_panic(expected = "without completing")]
fn dropping_a_selected_operation_panics() {
    let (tx, rx) = mpmc::channel::<u32>(1);
    tx.send(1).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    drop(sel.select());
}

#[test]
fn the_macro_takes_crossbeams_arm_forms() {
    let (tx, rx) = mpmc::channel::<u32>(2);
    let (utx, urx) = mpmc::unbounded::<&str>();
    // `default` when nothing is ready; references and values both accepted.
    let r = select! {
        recv(&rx) -> _ => 1,
        recv(urx) -> _ => 2,
        default => 3,
    };
    assert_eq!(r, 3);
    // Block bodies without commas; a send whose message is evaluated only when chosen.
    let evaluated = AtomicUsize::new(0);
    let (full, _keep) = mpmc::channel::<u32>(1);
    full.send(0).unwrap();
    let got;
    select! {
        send(full, { evaluated.fetch_add(1, Relaxed); 1 }) -> _ => { got = 1 }
        send(tx, 7) -> res => { res.unwrap(); got = 7 }
    }
    assert_eq!((got, evaluated.load(Relaxed)), (7, 0));
    assert_eq!(rx.try_recv(), Ok(7));
    // A timed default, and a trailing arm without a comma.
    utx.send("x").unwrap();
    let s = select! {
        recv(rx) -> _ => "rx",
        default(Duration::from_millis(1)) => "timeout",
        recv(urx) -> v => v.unwrap()
    };
    assert_eq!(s, "x");
    let s = select! {
        recv(rx) -> _ => "rx",
        default(Duration::from_millis(1)) => "timeout"
    };
    assert_eq!(s, "timeout");
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
}

/// Producers on one channel of each flavour, consumers selecting over all of them (and some
/// selecting sends into a forwarding channel): every value arrives exactly once.
#[test]
fn select_stress_each_value_once() {
    common::heartbeat();
    let threads = per_cpu(4, 8);
    let flavours = FLAVOURS.len();
    let producers = (threads / 2).max(flavours);
    let consumers = threads - threads / 2;
    let per_producer: u64 = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let started = Instant::now();
    let (stalls, excused) = (AtomicU64::new(0), AtomicU64::new(0));
    let (sent, got) = (PerSender::new(producers), PerSender::new(producers));
    // What the consumers received from the producers' channels (see `common::starved`).
    let receives = common::Served::default();
    let chans: Vec<_> = FLAVOURS.iter().map(|&c| chan::<(usize, u64)>(c)).collect();
    // Consumers forward every fourth value through a select send into one of two channels (a
    // bounded one and a rendezvous), which one thread drains through selects: rendezvous
    // selects then pair with selects.
    let (fwd_tx, fwd_rx) = mpmc::channel::<(usize, u64)>(2);
    let (zfwd_tx, zfwd_rx) = mpmc::channel::<(usize, u64)>(0);
    std::thread::scope(|s| {
        for id in 0..producers {
            let tx = chans[id % flavours].0.clone();
            let sent = &sent;
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1));
                let mut seq = 0;
                while seq < per_producer && started.elapsed() < time_limit() {
                    tx.send((id, seq)).unwrap();
                    sent.add(id, seq);
                    seq += 1;
                    if rng.below(16) == 0 {
                        std::thread::yield_now();
                    }
                }
            });
        }
        let receivers: Vec<_> = chans.iter().map(|c| c.1.clone()).collect();
        drop(chans);
        let forwarded = s.spawn(|| {
            let (mut n, mut open) = (0u64, [true, true]);
            while open != [false, false] {
                let v = select! {
                    recv(fwd_rx) -> v => v.map_err(|_| open[0] = false),
                    recv(zfwd_rx) -> v => v.map_err(|_| open[1] = false),
                };
                if let Ok((id, seq)) = v {
                    got.add(id, seq);
                    n += 1;
                }
            }
            n
        });
        let consumers: Vec<_> = (0..consumers)
            .map(|c| {
                let receivers = receivers.clone();
                let (fwd_tx, zfwd_tx) = (fwd_tx.clone(), zfwd_tx.clone());
                let (got, stalls, excused, receives) = (&got, &stalls, &excused, &receives);
                s.spawn(move || {
                    let mut open = receivers.len();
                    let mut done = vec![false; receivers.len()];
                    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (c as u64 + 7));
                    while open > 0 {
                        let mut sel = Select::new();
                        let indices: Vec<_> = receivers
                            .iter()
                            .zip(&done)
                            .map(|(r, &d)| (!d).then(|| sel.recv(r)))
                            .collect();
                        let (t0, before) = (Instant::now(), receives.now());
                        let oper = match rng.below(3) {
                            0 => match sel.try_select() {
                                Ok(o) => o,
                                Err(_) => continue,
                            },
                            _ => match sel.select_timeout(PATIENCE) {
                                Ok(o) => o,
                                Err(_) => {
                                    let served = receives.now() - before;
                                    if common::starved("select", t0, PATIENCE, served)
                                        || common::heartbeat().excuses("select", t0, PATIENCE)
                                    {
                                        excused.fetch_add(1, Relaxed);
                                    } else {
                                        stalls.fetch_add(1, Relaxed);
                                    }
                                    continue;
                                }
                            },
                        };
                        let k = indices
                            .iter()
                            .position(|&i| i == Some(oper.index()))
                            .expect("a selected index is one added");
                        let v = oper.recv(&receivers[k]);
                        if v.is_ok() {
                            receives.add();
                        }
                        match v {
                            Ok(v) if v.1 % 4 == 0 => {
                                // Forward it through a select send.
                                select! {
                                    send(fwd_tx, v) -> r => r.unwrap(),
                                    send(zfwd_tx, v) -> r => r.unwrap(),
                                }
                            }
                            Ok((id, seq)) => got.add(id, seq),
                            Err(RecvError) => {
                                done[k] = true;
                                open -= 1;
                            }
                        }
                    }
                })
            })
            .collect();
        drop((fwd_tx, zfwd_tx));
        for c in consumers {
            c.join().unwrap();
        }
        assert!(forwarded.join().unwrap() > 0);
    });
    let mismatched = sent.mismatches(&got);
    eprintln!(
        "select stress: {producers} producers, {consumers} consumers, {} values, {} excused stalls",
        sent.total(),
        excused.load(Relaxed)
    );
    assert_eq!(mismatched, 0, "values lost or duplicated");
    assert_eq!(
        stalls.load(Relaxed),
        0,
        "selects that waited past their patience"
    );
}
