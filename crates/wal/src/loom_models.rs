//! A loom model of the commit protocol (see the crate's documentation): two writers call
//! `append_durable` while the background committer runs, on an in-memory disk. Loom explores
//! their interleavings (up to a preemption bound): no execution may lose a wake-up (loom
//! reports a deadlock when every thread sleeps), and after a power loss and a reopen every
//! record acknowledged must be there, under its LSN. A second model fails the first sync:
//! nothing may be acknowledged that the disk lost, and no writer may sleep forever. A third
//! has one writer append without waiting: closing the log (the background thread) must make
//! its record durable too.
//! `gather`'s timed wait is left out (loom has no time); it only delays a commit.

use std::sync::Arc;

use crate::storage::faulty::{Faults, FaultyStorage};
use crate::{Options, Wal};

fn options() -> Options {
    Options {
        segment_bytes: 4096,
        prepare: false,
        ..Options::default()
    }
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.max_branches = 50_000;
    b
}

/// Two writers append one record each, durably (the second without waiting if `no_wait`:
/// closing the log must then make it durable); the disk fails its first sync if `fail`.
/// Returns how many executions loom explored.
fn model(fail: bool, no_wait: bool) -> usize {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    builder().check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let disk = FaultyStorage::new(7);
        let wal = Arc::new(Wal::open_on(Box::new(Arc::clone(&disk)), options()).unwrap());
        if fail {
            disk.set_faults(Faults {
                fail_sync_after: Some(0),
                ..Faults::default()
            });
        }
        let writers: Vec<_> = [b"first".as_slice(), b"second".as_slice()]
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let wal = Arc::clone(&wal);
                loom::thread::spawn(move || match no_wait && i == 1 {
                    true => (r, wal.append(r)),
                    false => (r, wal.append_durable(r)),
                })
            })
            .collect();
        let acked: Vec<_> = writers
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter_map(|(r, res)| res.ok().map(|lsn| (lsn, r.to_vec())))
            .collect();
        if !fail {
            assert_eq!(acked.len(), 2, "a writer got an error from a healthy disk");
        }
        drop(wal);
        disk.power_loss();
        let wal = Wal::open_on(Box::new(Arc::clone(&disk)), options()).unwrap();
        let kept: Vec<_> = wal
            .iter_from(1)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        for (lsn, r) in &acked {
            assert!(
                kept.iter().any(|(l, k)| l == lsn && k == r),
                "acknowledged record {lsn} lost: kept {kept:?}"
            );
        }
    });
    runs.load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn two_writers_share_commits_and_lose_nothing() {
    let runs = model(false, false);
    // The model explores (the writers and the committer race for the writer's lock).
    assert!(runs > 100, "loom explored only {runs} executions");
    eprintln!("{runs} executions");
}

#[test]
fn a_failed_sync_acknowledges_nothing_it_lost_and_wakes_everyone() {
    let runs = model(true, false);
    assert!(runs > 100, "loom explored only {runs} executions");
    eprintln!("{runs} executions");
}

#[test]
fn closing_the_log_commits_what_nobody_waited_for() {
    let runs = model(false, true);
    assert!(runs > 100, "loom explored only {runs} executions");
    eprintln!("{runs} executions");
}
