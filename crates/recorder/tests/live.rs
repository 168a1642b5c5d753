//! In one process: a live dump while threads record, ring wrap-around, and many threads that
//! come and go (their rings are reused), with fewer rings than threads at a time.

use std::sync::{Arc, Barrier};

use spindle_recorder::{record, Level, Options, Section};

static S: Section = Section::new("live", Level::Info);

fn dump() -> Vec<String> {
    let mut out = Vec::new();
    spindle_recorder::dump(&mut out, usize::MAX).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn wraparound_reuse_and_live_dumps() {
    spindle_recorder::install_memory(Options {
        threads: 8,
        records_per_thread: 16,
        sites: 16,
    })
    .unwrap();
    assert!(spindle_recorder::install_memory(Options::default()).is_err());

    // Wrap-around: 40 records in a ring of 16 keep the last 15 (the 16th slot is where the
    // next record goes), in order.
    for i in 0..40u32 {
        record!(S, Info, "main {}", i);
    }
    record!(S, Debug, "below the level: not kept");
    let mine: Vec<u32> = dump()
        .iter()
        .filter_map(|l| l.split_once(": main ").map(|x| x.1.parse().unwrap()))
        .collect();
    assert_eq!(mine, (25..40).collect::<Vec<_>>());
    assert!(!dump().iter().any(|l| l.contains("below the level")));

    // 100 threads one after another, more than the 7 rings left: each finds a retired ring.
    for t in 0..100u32 {
        std::thread::spawn(move || record!(S, Warn, "short-lived {}", t))
            .join()
            .unwrap();
    }
    let lines = dump();
    assert!(
        lines.iter().any(|l| l.ends_with("short-lived 99")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains(" WARN  live [")));

    // 20 threads at once, 7 rings: 7 record, the others find none and record nothing; no
    // ring is shared.
    let barrier = Arc::new(Barrier::new(20));
    let threads: Vec<_> = (0..20u32)
        .map(|t| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                for i in 0..5u32 {
                    record!(S, Info, "crowd {} {}", t, i);
                }
                b.wait();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut per_thread = std::collections::BTreeMap::<u32, Vec<u32>>::new();
    for l in dump() {
        if let Some((_, rest)) = l.split_once(": crowd ") {
            let (t, i) = rest.split_once(' ').unwrap();
            per_thread
                .entry(t.parse().unwrap())
                .or_default()
                .push(i.parse().unwrap());
        }
    }
    assert!(per_thread.len() <= 7, "{per_thread:?}");
    for (t, is) in per_thread {
        assert_eq!(is, vec![0, 1, 2, 3, 4], "thread {t}");
    }
    // The main thread's ring is still its own.
    record!(S, Info, "main {}", 40u32);
    assert!(dump().iter().any(|l| l.ends_with(": main 40")));

    // Two threads taking turns: the dump merges their rings in time order.
    let (to_helper, from_main) = std::sync::mpsc::channel::<u32>();
    let (to_main, from_helper) = std::sync::mpsc::channel::<u32>();
    let helper = std::thread::spawn(move || {
        while let Ok(step) = from_main.recv() {
            record!(S, Info, "step {}", step + 1);
            to_main.send(step + 2).unwrap();
        }
    });
    let mut step = 0u32;
    while step < 40 {
        record!(S, Info, "step {}", step);
        to_helper.send(step).unwrap();
        step = from_helper.recv().unwrap();
    }
    drop(to_helper);
    helper.join().unwrap();
    let steps: Vec<u32> = dump()
        .iter()
        .filter_map(|l| l.split_once(": step ").map(|x| x.1.parse().unwrap()))
        .collect();
    // Each ring keeps its last 15: the steps from 10 on, both threads', interleaved in order.
    assert_eq!(steps, (10..40).collect::<Vec<_>>(), "not in time order");
}
