//! Appends `N` records of `SIZE` bytes to the log in `DIR` from `THREADS` threads, each with
//! `append_durable`, and prints the rate: `cargo run --release -p spindle-wal --example fill --
//! DIR [N] [SIZE] [THREADS]`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: fill DIR [N] [SIZE] [THREADS]")?;
    let n: u64 = args.next().map_or(Ok(1000), |s| s.parse())?;
    let size: usize = args.next().map_or(Ok(64), |s| s.parse())?;
    let threads: u64 = args.next().map_or(Ok(4), |s| s.parse())?;
    let wal = spindle_wal::Wal::open(&dir, spindle_wal::Options::default())?;
    println!("opened {dir}: {:?}", wal.recovery());
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..n / threads {
                    wal.append_durable(&vec![7u8; size]).expect("append");
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} durable appends of {size} bytes from {threads} threads in {secs:.2} s: {:.0}/s",
        n / threads * threads,
        (n / threads * threads) as f64 / secs
    );
    Ok(())
}
