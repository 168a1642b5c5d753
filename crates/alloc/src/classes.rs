//! Size classes: every request is rounded up to its class, and each class is a heap of
//! equal blocks, so a freed block is as useful as a fresh one (seed 001's zero-fragmentation
//! trick) and finding the class is arithmetic, not a search.
//!
//! The seed proposed 32 B–8 KiB in steps of ×1 and ×1.5 per power of two, and 8–64 KiB in
//! steps of ×1, ×1.25, ×1.5, ×1.75. We keep the seed's 8–64 KiB steps, use the same quarter
//! steps from 64 B up (the seed's half steps round a uniform 1–512 B request up by 16.8 % on
//! average, quarter steps by 8.4 %: `tests::rounding_of_the_seeds_workload`), and add 16 B
//! steps below 64 B (the seed started at 32 B; Rust programs allocate many 8–24 B boxes).
//! Every class is a multiple of 16 B, the alignment `malloc` promises.
//!
//! ```text
//! class  0..=3 : 16, 32, 48, 64
//! class  4..=43: 64·2^o · (1 + (q+1)/4) for octave o = 0..=9 and quarter q = 0..=3
//!                (80, 96, 112, 128, 160, 192, 224, 256, 320, … 57344, 65536)
//! ```

/// Number of size classes.
pub const CLASSES: usize = 44;
/// The largest size served from a class; larger requests go to the OS.
pub const MAX_SMALL: usize = 65536;

/// The block size of class `c` (a table load: the allocator's hot paths ask for it).
#[inline]
pub const fn size_of(c: usize) -> usize {
    // (64 entries, so that the mask spares the hot paths a bounds check)
    SIZES[c & 63] as usize
}

/// [`size_of`] for every class, by its formula (0 past the last class).
const SIZES: [u32; 64] = {
    let mut t = [0u32; 64];
    let mut c = 0;
    while c < CLASSES {
        t[c] = if c < 4 {
            16 * (c as u32 + 1)
        } else {
            let (o, q) = ((c - 4) / 4, (c - 4) % 4);
            ((64 << o) + (q + 1) * (16 << o)) as u32
        };
        c += 1;
    }
    t
};

/// The class of a request of `size` bytes (`size <= MAX_SMALL`): a table load up to 1 KiB.
#[inline]
pub const fn class_of(size: usize) -> usize {
    if size <= 1024 {
        SMALL[(size + 15) >> 4] as usize
    } else {
        class_by_octave(size)
    }
}

/// The classes of 0, 16, 32, … 1024 bytes (every class is a multiple of 16).
const SMALL: [u8; 65] = {
    let mut t = [0u8; 65];
    let mut i = 0;
    while i < 65 {
        t[i] = class_by_octave(i * 16) as u8;
        i += 1;
    }
    t
};

/// [`class_of`] by arithmetic.
const fn class_by_octave(size: usize) -> usize {
    if size <= 64 {
        if size == 0 {
            0
        } else {
            (size - 1) / 16
        }
    } else {
        let s = size - 1;
        let msb = (usize::BITS - 1 - s.leading_zeros()) as usize; // 6 for 64..=127
        let q = (s >> (msb - 2)) & 3;
        4 + (msb - 6) * 4 + q
    }
}

/// The class for `size` bytes aligned to `align` (a power of two), if one exists: the first
/// class at or above the request whose block size is a multiple of `align` (blocks sit at
/// multiples of their size from an aligned span base).
#[inline]
pub fn class_aligned(size: usize, align: usize) -> Option<usize> {
    let size = size.max(align);
    if size > MAX_SMALL {
        return None;
    }
    (class_of(size)..CLASSES).find(|&c| size_of(c) % align == 0)
}

/// How many free blocks of class `c` each of a cache's two lists holds at most (and the
/// most a run of never-used blocks holds): 64 KiB worth, at least 4 and at most 256. The fast
/// paths read it from each record's `info` word (`cache::info`), not from this table.
#[inline]
pub const fn cache_capacity(c: usize) -> usize {
    CAPACITIES[c & 63] as usize
}

/// [`cache_capacity`] for every class (0 past the last class).
const CAPACITIES: [u16; 64] = {
    let mut t = [0u16; 64];
    let mut c = 0;
    while c < CLASSES {
        let n = 65536 / size_of(c);
        t[c] = if n < 4 {
            4
        } else if n > 256 {
            256
        } else {
            n as u16
        };
        c += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_increasing_aligned_and_end_at_64_kib() {
        for c in 1..CLASSES {
            assert!(size_of(c) > size_of(c - 1));
            assert_eq!(size_of(c) % 16, 0);
        }
        assert_eq!(size_of(CLASSES - 1), MAX_SMALL);
        assert_eq!(size_of(4), 80);
        assert_eq!(size_of(7), 128);
        for c in 0..CLASSES {
            let cap = cache_capacity(c);
            assert!((4..=256).contains(&cap));
            assert!(cap * size_of(c) <= 65536 || cap == 4, "class {c}");
        }
    }

    #[test]
    fn every_size_maps_to_the_smallest_class_that_holds_it() {
        for size in 0..=MAX_SMALL {
            let c = class_of(size);
            assert!(size_of(c) >= size, "{size}");
            assert!(c == 0 || size_of(c - 1) < size, "{size} -> {}", size_of(c));
        }
    }

    #[test]
    fn aligned_classes_are_multiples_of_the_alignment() {
        for align in [16, 32, 64, 128, 4096, 65536] {
            for size in [1, 17, 100, 3000, 40000] {
                if let Some(c) = class_aligned(size, align) {
                    assert_eq!(size_of(c) % align, 0);
                    assert!(size_of(c) >= size.max(align));
                }
            }
        }
        assert_eq!(class_aligned(1, 131072), None);
    }

    /// The figures quoted in the module documentation: average rounding of the seed's
    /// workload (uniform 1–512 B) under the seed's classes and under ours.
    #[test]
    fn rounding_of_the_seeds_workload() {
        let seed = |s: usize| {
            let mut c = 32;
            while c < s {
                c = if c.is_power_of_two() {
                    c * 3 / 2
                } else {
                    c / 3 * 4
                };
            }
            c
        };
        let waste = |f: &dyn Fn(usize) -> usize| {
            let (req, got): (usize, usize) = (1..=512)
                .map(|s| (s, f(s)))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            got as f64 / req as f64 - 1.0
        };
        let (w_seed, w_ours) = (waste(&seed), waste(&|s| size_of(class_of(s))));
        assert!((w_seed - 0.168).abs() < 0.001, "{w_seed}");
        assert!((w_ours - 0.084).abs() < 0.001, "{w_ours}");
    }
}
