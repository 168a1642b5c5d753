//! Oversubscribed stress: 4 × cores threads allocate blocks of random sizes, fill each with
//! its owner's stamp, pass a share of them to the next thread (freed there: remote frees),
//! and check every stamp before freeing. A block handed out twice, or written by the
//! allocator while in use, breaks a stamp; the count of broken stamps must be zero.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;

use spindle_alloc::SpindleAlloc;

#[global_allocator]
static A: SpindleAlloc = SpindleAlloc;

struct Block {
    p: *mut u8,
    size: usize,
    stamp: u8,
}

// SAFETY: a block is owned by one thread at a time (moved through the channel).
unsafe impl Send for Block {}

fn check(b: &Block, violations: &AtomicU64) {
    // SAFETY: a live block of `size` bytes that this thread owns.
    let bytes = unsafe { std::slice::from_raw_parts(b.p, b.size) };
    if bytes.iter().any(|&x| x != b.stamp) {
        violations.fetch_add(1, Relaxed);
    }
}

#[test]
fn blocks_are_never_shared_between_owners() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = 4 * cores;
    let rounds = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let violations = AtomicU64::new(0);
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<Block>()).unzip();
    std::thread::scope(|s| {
        for (t, rx) in rxs.into_iter().enumerate() {
            let tx = txs[(t + 1) % threads].clone();
            let violations = &violations;
            s.spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                let mut live: Vec<Block> = Vec::new();
                for i in 0..rounds {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let size = match rng % 100 {
                        0 => 65_537 + (rng >> 8) as usize % 200_000,
                        1..=9 => 1 + (rng >> 8) as usize % 65_536,
                        _ => 1 + (rng >> 8) as usize % 512,
                    };
                    let p = spindle_alloc::malloc(size);
                    assert!(!p.is_null());
                    let stamp = (t * 31 + i) as u8 | 1;
                    // SAFETY: a fresh block of `size` bytes.
                    unsafe { std::ptr::write_bytes(p, stamp, size) };
                    live.push(Block { p, size, stamp });
                    // The seed's purge: about 40 % of the live blocks every 256 allocations,
                    // a third of them freed by the next thread.
                    if i % 256 == 255 {
                        let mut k = 0;
                        live.retain(|b| {
                            k += 1;
                            if k % 5 < 2 {
                                check(b, violations);
                                if k % 3 == 0 {
                                    let _ = tx.send(Block { ..*b });
                                } else {
                                    // SAFETY: a live block of ours, freed once.
                                    unsafe { spindle_alloc::free(b.p) };
                                }
                                false
                            } else {
                                true
                            }
                        });
                    }
                    while let Ok(b) = rx.try_recv() {
                        check(&b, violations);
                        // SAFETY: ownership came with the message.
                        unsafe { spindle_alloc::free(b.p) };
                    }
                }
                for b in live {
                    check(&b, violations);
                    // SAFETY: as above.
                    unsafe { spindle_alloc::free(b.p) };
                }
                drop(tx);
                // Blocks still in flight to us arrive before every sender is gone.
                for b in rx.iter() {
                    check(&b, violations);
                    // SAFETY: as above.
                    unsafe { spindle_alloc::free(b.p) };
                }
            });
        }
        drop(txs);
    });
    let v = violations.load(Relaxed);
    eprintln!(
        "{threads} threads × {rounds} allocations, cache mode {}: {v} broken stamps",
        spindle_alloc::cache_mode()
    );
    assert_eq!(v, 0);
    if std::env::var_os("SPINDLE_STRESS_CHILD").is_none() {
        other_cache_modes();
    }
}

/// The same test in child processes running the other cache modes: spindle-sync's own rseq
/// registration (glibc told not to register) and per-thread caches.
fn other_cache_modes() {
    let exe = std::env::current_exe().expect("the test binary");
    for (env, value, mode) in [
        ("GLIBC_TUNABLES", "glibc.pthread.rseq=0", "own registration"),
        ("SPINDLE_ALLOC_CACHE", "thread", "per-thread"),
    ] {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "blocks_are_never_shared_between_owners",
                "--nocapture",
            ])
            .env("SPINDLE_STRESS_CHILD", "1")
            .env(env, value)
            .output()
            .expect("run the test binary again");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{env}={value}: {err}");
        // Where the kernel has no rseq at all, the own registration falls back to threads.
        assert!(
            err.contains(mode) || err.contains("per-thread"),
            "{env}={value} ran another mode: {err}"
        );
        eprintln!(
            "{env}={value}: {}",
            err.lines().find(|l| l.contains("broken")).unwrap_or("")
        );
    }
}
