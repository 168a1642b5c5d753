//! Fault injection: writers append to a log on a disk that fails (short writes, `ENOSPC`,
//! `EIO` from a write or a sync) and then loses its power; after every recovery, every
//! acknowledged record is there byte for byte, in LSN order with no gap, and no record is
//! there that was not appended under that LSN. Every count of violations must be zero.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spindle_wal::storage::faulty::{Faults, FaultyStorage};
use spindle_wal::{Durability, ErrorKind, Lsn, Options, Wal};

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The payload of writer `t`'s record `seq`: both numbers, then bytes that depend on them (0
/// to 199 of them).
fn payload(t: u32, seq: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&t.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    let n = (t.wrapping_mul(31) ^ seq.wrapping_mul(17)) % 200;
    v.extend((0..n).map(|i| (i ^ seq ^ t << 4) as u8));
    v
}

fn parse(p: &[u8]) -> Option<(u32, u32)> {
    let t = u32::from_le_bytes(p.get(..4)?.try_into().ok()?);
    let seq = u32::from_le_bytes(p.get(4..8)?.try_into().ok()?);
    (payload(t, seq) == p).then_some((t, seq))
}

#[derive(Default)]
struct Book {
    /// Every record appended (acknowledged or not) by LSN: (writer, seq).
    appended: BTreeMap<Lsn, (u32, u32)>,
    /// The acknowledged LSNs.
    acked: Vec<Lsn>,
    /// `truncate_before` was called with this LSN: records before it may be gone.
    truncated_before: Lsn,
}

#[derive(Default, Debug)]
struct Tally {
    trials: u64,
    rounds: u64,
    process_deaths: u64,
    acked: u64,
    faults: u64,
    failed_logs: u64,
    torn_tails: u64,
    violations: Vec<String>,
    truncate_errors: Vec<String>,
}

/// Opens the log again and checks it against the book; forgets the appends it lost.
fn check(disk: &Arc<FaultyStorage>, options: &Options, book: &mut Book, tally: &mut Tally) -> Wal {
    let wal = Wal::open_on(Box::new(Arc::clone(disk)), options.clone())
        .unwrap_or_else(|e| panic!("reopening after a power loss: {e}"));
    tally.torn_tails += u64::from(wal.recovery().dropped_bytes > 0);
    if std::env::var_os("SPINDLE_WAL_DEBUG").is_some() {
        eprintln!(
            "  reopened: {:?}; book: {} appended, acked up to {:?}",
            wal.recovery(),
            book.appended.len(),
            book.acked.last()
        );
    }
    let mut expect: Option<Lsn> = None;
    let first = wal.recovery().first_lsn;
    if first > book.truncated_before.max(1) {
        tally.violations.push(format!(
            "the log starts at {first}, truncate_before was given {}",
            book.truncated_before
        ));
    }
    let mut last = first - 1;
    for r in wal.iter_from(first).expect("iter_from") {
        let (lsn, bytes) = match r {
            Ok(x) => x,
            Err(e) => {
                tally.violations.push(format!("reading: {e}"));
                break;
            }
        };
        if expect.is_some_and(|e| e != lsn) {
            tally
                .violations
                .push(format!("LSN {lsn} where {expect:?} was next"));
        }
        expect = Some(lsn + 1);
        last = lsn;
        match (parse(&bytes), book.appended.get(&lsn)) {
            (Some(got), Some(&want)) if got == want => {}
            (got, want) => tally
                .violations
                .push(format!("LSN {lsn} holds {got:?}; appended as {want:?}")),
        }
    }
    if wal.last_lsn() != last {
        tally.violations.push(format!(
            "recovered {} records but last_lsn says {}",
            last,
            wal.last_lsn()
        ));
    }
    for &a in &book.acked {
        if a >= book.truncated_before && a > last {
            tally.violations.push(format!(
                "acknowledged LSN {a} lost (the log ends at {last})"
            ));
        }
    }
    book.appended.retain(|&l, _| l <= last);
    book.acked.retain(|&l| l <= last);
    wal
}

fn random_faults(rng: &mut Rng) -> Faults {
    let mut f = Faults::default();
    // Half the rounds, the machine dies in the middle of some write.
    if rng.next(2) == 0 {
        f.die_after_writes = Some(rng.next(40));
    }
    match rng.next(6) {
        0 => {}
        1 => f.short_writes = true,
        2 => f.space = Some(rng.next(4000)),
        3 => f.fail_write_after = Some(rng.next(30)),
        4 => f.fail_sync_after = Some(rng.next(30)),
        _ => {
            f.short_writes = true;
            f.fail_sync_after = Some(rng.next(60));
        }
    }
    f
}

fn trial(seed: u64, tally: &mut Tally) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let disk = FaultyStorage::new(seed);
    let options = Options {
        durability: if rng.next(2) == 0 {
            Durability::Always
        } else {
            Durability::Within(Duration::from_micros(200))
        },
        segment_bytes: 200 + rng.next(3000),
        max_record: 1024,
        batch_bytes: 1 + rng.next(2000) as usize,
        prepare: rng.next(2) == 0,
    };
    let mut book = Book::default();
    let mut next_seq = [0u32; 4];
    for _round in 0..3 {
        let wal = check(&disk, &options, &mut book, tally);
        tally.rounds += 1;
        let faults = random_faults(&mut rng);
        if std::env::var_os("SPINDLE_WAL_DEBUG").is_some() {
            eprintln!("round: {faults:?} {options:?}");
        }
        // A checkpoint now and then, below what was acknowledged, on the healthy disk: before
        // this round's faults are armed (the log's background thread writes too, and a fault
        // it trips, such as the machine dying mid-write, would fail the checkpoint).
        if let (Some(&a), 0) = (book.acked.last(), rng.next(3)) {
            let to = 1 + rng.next(a);
            match wal.truncate_before(to) {
                Ok(()) => book.truncated_before = book.truncated_before.max(to),
                Err(e) => tally.truncate_errors.push(e.to_string()),
            }
        }
        disk.set_faults(faults);
        let writers = 1 + rng.next(4) as u32;
        let per = 1 + rng.next(25) as u32;
        let shared = Mutex::new(std::mem::take(&mut book));
        let refused_after_failure = Mutex::new(Vec::<String>::new());
        std::thread::scope(|s| {
            for t in 0..writers {
                let (wal, shared, refused) = (&wal, &shared, &refused_after_failure);
                let first = next_seq[t as usize];
                let flush_every = 1 + (seed as u32 + t) % 5;
                s.spawn(move || {
                    for seq in first..first + per {
                        let lsn = match wal.append(&payload(t, seq)) {
                            Ok(l) => l,
                            Err(_) => break,
                        };
                        shared.lock().unwrap().appended.insert(lsn, (t, seq));
                        // Some records wait for durability, the others ride along.
                        if seq % flush_every != 0 && seq + 1 < first + per {
                            continue;
                        }
                        match wal.wait_durable(lsn) {
                            Ok(()) => {
                                let mut b = shared.lock().unwrap();
                                let acked: Vec<Lsn> =
                                    b.appended.range(..=lsn).map(|(&l, _)| l).collect();
                                b.acked.extend(acked);
                            }
                            Err(e) => {
                                // A failed log refuses every later append.
                                match wal.append(b"after") {
                                    Err(e2) if e2.kind() == ErrorKind::Failed => {}
                                    other => refused.lock().unwrap().push(format!(
                                        "after {e}: append gave {:?}",
                                        other.map_err(|e| e.to_string())
                                    )),
                                }
                                break;
                            }
                        }
                    }
                });
            }
        });
        next_seq.iter_mut().for_each(|s| *s += per);
        book = shared.into_inner().unwrap();
        book.acked.sort_unstable();
        book.acked.dedup();
        tally.acked += book.acked.len() as u64;
        tally
            .violations
            .extend(refused_after_failure.into_inner().unwrap());
        // Whether the log failed: a probe, booked like any other record if it was taken.
        let probe = (100, next_seq[0]);
        match wal.append(&payload(probe.0, probe.1)) {
            Ok(lsn) => {
                book.appended.insert(lsn, probe);
            }
            Err(_) => tally.failed_logs += 1,
        }
        // The process dies (nothing the log does from here on reaches the disk), and the
        // machine with it, or not.
        disk.freeze();
        drop(wal);
        tally.faults += disk.injected();
        let death = rng.next(3) == 0;
        if std::env::var_os("SPINDLE_WAL_DEBUG").is_some() {
            eprintln!(
                "  crash: process only {death}, injected so far {}",
                disk.injected()
            );
        }
        if death {
            disk.thaw();
            tally.process_deaths += 1;
        } else {
            disk.power_loss();
        }
    }
    drop(check(&disk, &options, &mut book, tally));
    // A power loss right after that recovery: what it found must have been made durable.
    disk.freeze();
    disk.power_loss();
    drop(check(&disk, &options, &mut book, tally));
    tally.trials += 1;
}

fn run(trials: u64) {
    let mut tally = Tally::default();
    let only: Option<u64> = std::env::var("SPINDLE_WAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    for seed in (1..=trials).filter(|s| only.is_none_or(|o| o == *s)) {
        trial(seed, &mut tally);
        if !tally.violations.is_empty() {
            break;
        }
    }
    eprintln!(
        "{} trials, {} crashes ({} of the process only), {} acknowledged records, {} faults injected, {} logs \
         failed on a fault, {} torn tails cut at recovery, {} violations",
        tally.trials,
        tally.rounds,
        tally.process_deaths,
        tally.acked,
        tally.faults,
        tally.failed_logs,
        tally.torn_tails,
        tally.violations.len()
    );
    assert!(
        tally.violations.is_empty(),
        "violations: {:#?}",
        &tally.violations[..tally.violations.len().min(10)]
    );
    assert!(tally.acked > 0 && tally.faults > 0 && tally.torn_tails > 0);
    assert!(
        tally.truncate_errors.is_empty(),
        "truncate_before failed on a healthy disk: {:?}",
        tally.truncate_errors
    );
}

#[test]
fn no_acknowledged_record_is_lost_to_faults_and_power_loss() {
    run(std::env::var("SPINDLE_WAL_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500));
}

#[test]
#[ignore = "long: 50 000 trials"]
fn no_acknowledged_record_is_lost_long() {
    run(50_000);
}
