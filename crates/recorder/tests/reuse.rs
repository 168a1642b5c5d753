//! A ring taken by one short-lived thread after another while this thread dumps it again and
//! again: no dump may show a torn record (a line mixing two records' words). Each record holds
//! one value four times; a torn one shows two different values.

use std::time::{Duration, Instant};

use spindle_recorder::{record, Level, Options, Section};

static S: Section = Section::new("reuse", Level::Info);

#[test]
fn a_reused_ring_never_shows_a_torn_record() {
    spindle_recorder::install_memory(Options {
        threads: 1,
        records_per_thread: 16,
        sites: 4,
    })
    .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut v = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A thread of its own each time: it takes the only ring, and gives it back.
                let start = v;
                std::thread::spawn(move || {
                    for v in start..start + 40 {
                        record!(S, Info, "{} {} {} {}", v, v, v, v);
                    }
                })
                .join()
                .unwrap();
                v += 40;
            }
        })
    };
    let (mut dumps, mut lines) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        let mut out = Vec::new();
        spindle_recorder::dump(&mut out, usize::MAX).unwrap();
        for line in String::from_utf8(out).unwrap().lines() {
            let msg = line.rsplit_once(": ").unwrap().1;
            let v: Vec<&str> = msg.split(' ').collect();
            assert!(
                v.len() == 4 && v.iter().all(|x| *x == v[0]),
                "a torn record after {dumps} dumps: {line}"
            );
            lines += 1;
        }
        dumps += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(dumps > 10 && lines > 0, "{dumps} dumps, {lines} lines");
}
