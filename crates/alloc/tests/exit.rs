//! A thread's exit hands the blocks it freed to the shared stacks, so that threads that come
//! later (another `mm_cid`, another CPU) reuse them instead of carving fresh memory. Its own
//! binary: no other test allocates meanwhile.

use spindle_alloc::{classes, SpindleAlloc};

#[global_allocator]
static A: SpindleAlloc = SpindleAlloc;

/// Keeps the calling thread on the CPU it runs on, so that the record it frees into is the
/// record it exits on (where records follow `cpu_id`, kernels before 6.3, a migration would
/// leave the blocks freed before it in another CPU's record).
fn stay_on_this_cpu() {
    extern "C" {
        fn sched_getcpu() -> i32;
        fn sched_setaffinity(pid: i32, size: usize, mask: *const u64) -> i32;
    }
    // SAFETY: plain system calls on this thread with a mask of 1024 CPUs.
    unsafe {
        let cpu = sched_getcpu();
        if (0..1024).contains(&cpu) {
            let mut mask = [0u64; 16];
            mask[cpu as usize / 64] = 1 << (cpu % 64);
            sched_setaffinity(0, core::mem::size_of_val(&mask), mask.as_ptr());
        }
    }
}

#[test]
fn an_exiting_thread_leaves_its_freed_blocks_to_everyone() {
    const N: usize = 300;
    let size = 3000;
    let c = classes::class_of(size);
    // Warm the allocator up (mode, region) on this thread.
    drop(vec![0u8; size]);
    let shared_before = spindle_alloc::stats().classes[c].shared;
    std::thread::spawn(move || {
        stay_on_this_cpu();
        let v: Vec<Vec<u8>> = (0..N).map(|i| vec![i as u8; size]).collect();
        for (i, b) in v.iter().enumerate() {
            assert!(b.iter().all(|&x| x == i as u8));
        }
        drop(v);
    })
    .join()
    .unwrap();
    let mode = spindle_alloc::cache_mode();
    let s = spindle_alloc::stats().classes[c];
    eprintln!("cache mode: {mode}; class {c}: {s:?}");
    if mode.contains("own registration") {
        // Not watched: the own registration's thread-local area is gone before key
        // destructors run (see `cache::watch_exit`).
        return;
    }
    // Every block the thread freed is in the shared stack, none in a cache's lists (a cache
    // keeps up to twice its capacity otherwise: more than N / 2 of them here).
    assert!(2 * classes::cache_capacity(c) < N);
    assert!(s.shared >= shared_before + N, "{s:?}");
}
