//! spindle-alloc as this test binary's global allocator: everything the test harness and the
//! tests allocate goes through it.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::{BTreeMap, HashMap};

use spindle_alloc::{classes, SpindleAlloc};

#[global_allocator]
static A: SpindleAlloc = SpindleAlloc;

#[test]
fn collections_keep_their_contents() {
    let mut m: HashMap<String, Vec<u64>> = HashMap::new();
    for i in 0..20_000u64 {
        m.insert(format!("key-{i}"), (0..i % 97).collect());
    }
    let mut b = BTreeMap::new();
    for (k, v) in &m {
        b.insert(k.clone(), v.iter().sum::<u64>());
    }
    for i in 0..20_000u64 {
        let v = &m[&format!("key-{i}")];
        assert_eq!(v.len() as u64, i % 97);
        assert_eq!(b[&format!("key-{i}")], (0..i % 97).sum::<u64>());
    }
    eprintln!("cache mode: {}", spindle_alloc::cache_mode());
}

#[test]
fn every_layout_is_aligned_and_usable() {
    let mut live = Vec::new();
    for align in [1, 2, 8, 16, 32, 64, 128, 4096, 8192, 65536, 1 << 20] {
        for size in [
            0, 1, 15, 16, 17, 100, 1000, 4096, 40_000, 65_536, 65_537, 300_000,
        ] {
            let l = Layout::from_size_align(size.max(1), align).unwrap();
            // SAFETY: a non-zero layout.
            let p = unsafe { A.alloc(l) };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "size {size} align {align}");
            // SAFETY: the block holds l.size() bytes.
            unsafe {
                std::ptr::write_bytes(p, 0xa5, l.size());
                assert!(spindle_alloc::usable_size(p) >= l.size());
            }
            live.push((p, l));
        }
    }
    for (p, l) in live {
        // SAFETY: each block was filled with 0xa5 and is freed once.
        unsafe {
            assert!(std::slice::from_raw_parts(p, l.size())
                .iter()
                .all(|&b| b == 0xa5));
            A.dealloc(p, l);
        }
    }
}

#[test]
fn realloc_keeps_the_prefix_through_every_class_and_the_os() {
    let l = Layout::from_size_align(1, 1).unwrap();
    // SAFETY: allocation, growth and shrinking through the GlobalAlloc contract.
    unsafe {
        let mut p = A.alloc(l);
        *p = 7;
        let mut size = 1;
        for next in (1..24)
            .map(|k| 1usize << k)
            .chain([3_000_000, 70_000, 500, 1])
        {
            let q = A.realloc(p, Layout::from_size_align(size, 1).unwrap(), next);
            assert!(!q.is_null());
            assert_eq!(*q, 7, "after realloc to {next}");
            if next > 1 {
                *q.add(next - 1) = 9;
            }
            p = q;
            size = next;
        }
        A.dealloc(p, Layout::from_size_align(size, 1).unwrap());
    }
}

#[test]
fn zeroed_blocks_are_zero_even_when_recycled() {
    for size in [8, 300, 5000, 60_000, 100_000, 2_000_000] {
        let l = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: dirty a block, free it, then ask for a zeroed one of the same size.
        unsafe {
            let p = A.alloc(l);
            std::ptr::write_bytes(p, 0xff, size);
            A.dealloc(p, l);
            let z = A.alloc_zeroed(l);
            assert!(
                std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0),
                "{size}"
            );
            A.dealloc(z, l);
        }
    }
}

#[test]
fn c_style_entry_points_behave_like_c() {
    // SAFETY: the C-style functions with their contracts.
    unsafe {
        assert!(spindle_alloc::calloc(usize::MAX, 2).is_null());
        let p = spindle_alloc::calloc(10, 10);
        assert!(std::slice::from_raw_parts(p, 100).iter().all(|&b| b == 0));
        assert!(spindle_alloc::realloc(p, 0).is_null());
        let q = spindle_alloc::realloc(std::ptr::null_mut(), 40);
        assert!(!q.is_null());
        // In place while the class still fits.
        assert_eq!(spindle_alloc::realloc(q, 48), q);
        spindle_alloc::free(q);
        spindle_alloc::free(std::ptr::null_mut());
        assert!(spindle_alloc::malloc(usize::MAX - 4096).is_null());
    }
}

#[test]
fn statistics_account_for_blocks_in_use() {
    let before = spindle_alloc::stats();
    let v: Vec<Box<[u8; 3000]>> = (0..2000).map(|_| Box::new([1u8; 3000])).collect();
    let during = spindle_alloc::stats();
    let c = classes::class_of(3000);
    // Other tests run concurrently: only a lower bound holds.
    assert!(during.classes[c].carved >= 2000, "{:?}", during.classes[c]);
    assert!(during.in_use_bytes() >= 2000 * 3000);
    assert!(during.carved_bytes() >= before.carved_bytes());
    let f = during.fragmentation();
    assert!((0.0..=1.0).contains(&f), "{f}");
    drop(v);
}
