//! spindle-alloc as this program's allocator: threads (one per CPU, or the first argument)
//! churn through boxes and strings; prints the cache mode and the allocator's statistics.
//!
//! `cargo run --release -p spindle-alloc --example churn -- 8`

use spindle_alloc::SpindleAlloc;

#[global_allocator]
static A: SpindleAlloc = SpindleAlloc;

fn main() {
    let threads = match std::env::args().nth(1) {
        Some(a) => match a.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("usage: churn [THREADS >= 1]");
                std::process::exit(2);
            }
        },
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut keep: Vec<String> = Vec::new();
                for i in 0..200_000usize {
                    keep.push(format!("{t}-{i}-{}", "x".repeat(i % 300)));
                    if keep.len() > 512 {
                        keep.drain(..200);
                    }
                }
            });
        }
    });
    let s = spindle_alloc::stats();
    println!(
        "{threads} threads in {:.2?}; cache: {}",
        start.elapsed(),
        spindle_alloc::cache_mode()
    );
    println!(
        "in use {} KiB, carved {} KiB, spans {} KiB, large {} KiB, free share {:.1} %",
        s.in_use_bytes() / 1024,
        s.carved_bytes() / 1024,
        s.span_bytes / 1024,
        s.large_bytes / 1024,
        100.0 * s.fragmentation()
    );
}
