//! Every `u32`, 10⁸ random `u64` and 10⁸ random `i64`, every digit-boundary value of every
//! type, all equal to `std`'s output. Split across threads (`available_parallelism`); the
//! crate is built at `opt-level = 3` even in the dev profile (root `Cargo.toml`).

use std::fmt::Write;

use spindle_fmt::{raw, Buffer};

/// Runs `body(chunk)` for `chunks` chunks on as many threads as the machine offers.
fn parallel(chunks: u64, body: impl Fn(u64) + Sync) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let next = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.min(chunks) {
            s.spawn(|| loop {
                let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if c >= chunks {
                    break;
                }
                body(c);
            });
        }
    });
}

/// splitmix64 (Steele, Lea and Flood): a seedable generator with every seed good.
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Half the time uniform over 64 bits, half the time with a uniform bit length (so every
    /// decimal length is well represented, not just 19 and 20 digits).
    fn value(&mut self) -> u64 {
        let x = self.next();
        if x & 1 == 0 {
            self.next()
        } else {
            self.next() >> ((x >> 1) % 64)
        }
    }
}

/// The decimal digits of a counter, left-aligned in ASCII, with a `0` units digit appended:
/// the reference for the exhaustive `u32` test (one decade of ten values per step), checked
/// against `std` at the start and end of every chunk.
struct Decade {
    /// The counter's digits (none for 0), then `'0'`, then NUL bytes.
    bytes: [u8; 16],
    /// How many digits the counter has.
    len: usize,
}

impl Decade {
    fn new(decade: u32) -> Self {
        let s = if decade == 0 {
            String::new()
        } else {
            decade.to_string()
        };
        let mut bytes = [0u8; 16];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        bytes[s.len()] = b'0';
        Decade {
            bytes,
            len: s.len(),
        }
    }

    fn increment(&mut self) {
        let mut i = self.len;
        while i > 0 {
            i -= 1;
            if self.bytes[i] < b'9' {
                self.bytes[i] += 1;
                return;
            }
            self.bytes[i] = b'0';
        }
        // 99…9 + 1: every digit is now 0, so a leading 1 and one more 0 make the new counter.
        self.bytes[0] = b'1';
        self.len += 1;
        self.bytes[self.len] = b'0';
    }

    /// The first value of the decade as a little-endian word, and its length.
    fn word(&self) -> (u128, usize) {
        (u128::from_le_bytes(self.bytes), self.len + 1)
    }
}

/// The `n` first bytes of a little-endian word.
fn low_bytes(word: u128, n: usize) -> u128 {
    word & (u128::MAX >> (128 - 8 * n))
}

#[test]
fn every_u32_prints_as_std_does() {
    // 2³² = 1024 chunks × 419 430 decades + 6 values: the chunks cover every decade below
    // 429 496 729, and the last six values (…720 to …725) are checked after them.
    const CHUNKS: u32 = 1024;
    const LAST_DECADE: u32 = u32::MAX / 10; // 429 496 729, only partly in range
    let per = LAST_DECADE.div_ceil(CHUNKS);
    parallel(u64::from(CHUNKS), |c| {
        let (first, end) = (c as u32 * per, ((c as u32 + 1) * per).min(LAST_DECADE));
        let mut decade = Decade::new(first);
        let mut out = [0u8; 16];
        let mut buf = Buffer::new();
        for k in first..end {
            let (word, len) = decade.word();
            for d in 0..10u32 {
                let x = k * 10 + d;
                let n = raw::write_u32(out.first_chunk_mut().unwrap(), x);
                let got = low_bytes(u128::from_le_bytes(out), len);
                let expect = word + (u128::from(d) << (8 * (len - 1)));
                if n != len || got != expect {
                    panic!("{x}: printed {:?}", String::from_utf8_lossy(&out[..n]));
                }
                // `Buffer::format` has printers of its own (digits anywhere in its buffer), with
                // the same size classes and arithmetic: one value of each decade (its last
                // digit rotating with the decade) keeps this check to a tenth of the time.
                if d == k % 10 {
                    let formatted = buf.format(x).as_bytes();
                    if formatted != &expect.to_le_bytes()[..len] {
                        panic!("{x}: formatted {:?}", String::from_utf8_lossy(formatted));
                    }
                }
            }
            decade.increment();
        }
        assert_eq!(decade.word().0, Decade::new(end).word().0, "chunk {c}");
    });
    let mut buf = Buffer::new();
    for x in LAST_DECADE * 10..=u32::MAX {
        assert_eq!(buf.format(x), x.to_string());
    }
}

/// `Buffer::format` against `write!`, on a stride of all `u32` (the test above compares it
/// with the decade counter on one value of every decade).
#[test]
fn buffer_formats_u32_on_a_stride() {
    let mut buf = Buffer::new();
    let mut expect = String::new();
    for x in (0..=u32::MAX).step_by(997) {
        expect.clear();
        write!(expect, "{x}").unwrap();
        assert_eq!(buf.format(x), expect);
    }
}

#[test]
fn every_u64_and_u32_path_agrees_on_u32_sized_values() {
    // The u64 and i64 printers hand small values to the u32 code; spot-check the hand-off.
    let mut buf = Buffer::new();
    let mut rng = SplitMix(1);
    for _ in 0..1_000_000 {
        let x = rng.next() as u32;
        assert_eq!(buf.format(u64::from(x)), x.to_string());
        assert_eq!(buf.format(i64::from(x as i32)), (x as i32).to_string());
    }
}

#[test]
fn random_u64_and_i64_print_as_std_does() {
    const CHUNKS: u64 = 200;
    const PER: u64 = 1_000_000; // 2 × 10⁸ values in all
    parallel(CHUNKS, |c| {
        let mut rng = SplitMix(c);
        let mut buf = Buffer::new();
        let mut expect = String::new();
        for _ in 0..PER {
            let x = rng.value();
            expect.clear();
            if c % 2 == 0 {
                write!(expect, "{x}").unwrap();
                assert_eq!(buf.format(x), expect);
            } else {
                let x = x as i64;
                write!(expect, "{x}").unwrap();
                assert_eq!(buf.format(x), expect);
            }
        }
    });
}

/// Every power of ten and its neighbours, and every type's extremes, for every type.
#[test]
fn digit_boundaries_of_every_type() {
    let mut buf = Buffer::new();
    macro_rules! check {
        ($($t:ty),*) => {$(
            let mut p: $t = 1;
            loop {
                for x in [p - 1, p, p + 1, p.wrapping_mul(2), p.wrapping_add(p / 2)] {
                    assert_eq!(buf.format(x), x.to_string(), "{}", stringify!($t));
                }
                #[allow(unused_comparisons)]
                if <$t>::MIN < 0 {
                    let (n, m) = (0 - p, 1 - p);
                    assert_eq!(buf.format(n), n.to_string());
                    assert_eq!(buf.format(m), m.to_string());
                    assert_eq!(buf.format(n - 1), (n - 1).to_string());
                }
                match p.checked_mul(10) {
                    Some(q) if q < <$t>::MAX - 1 => p = q,
                    _ => break,
                }
            }
            for x in [<$t>::MIN, <$t>::MIN + 1, <$t>::MAX, <$t>::MAX - 1, 0, 1] {
                assert_eq!(buf.format(x), x.to_string(), "{}", stringify!($t));
                assert!(buf.format(x).len() <= <$t as spindle_fmt::Integer>::MAX_STR_LEN);
            }
        )*};
    }
    check!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);
}

#[test]
fn every_8_and_16_bit_value() {
    let mut buf = Buffer::new();
    for x in 0..=u16::MAX {
        assert_eq!(buf.format(x), x.to_string());
        assert_eq!(buf.format(x as i16), (x as i16).to_string());
    }
    for x in 0..=u8::MAX {
        assert_eq!(buf.format(x), x.to_string());
        assert_eq!(buf.format(x as i8), (x as i8).to_string());
    }
}

#[test]
fn random_128_bit_values() {
    let mut rng = SplitMix(128);
    let mut buf = Buffer::new();
    for _ in 0..1_000_000 {
        let x = u128::from(rng.value()) << 64 | u128::from(rng.next());
        let x = x >> (rng.next() % 128);
        assert_eq!(buf.format(x), x.to_string());
        assert_eq!(buf.format(x as i128), (x as i128).to_string());
    }
}

#[test]
fn raw_signed_forms_leave_the_sign_then_the_digits() {
    let mut out32 = [0u8; raw::U32_LEN + 1];
    let mut out64 = [0u8; raw::U64_LEN + 1];
    for x in [i32::MIN, -1_000_000_000, -7, 0, 9, i32::MAX] {
        let n = raw::write_i32(&mut out32, x);
        assert_eq!(&out32[..n], x.to_string().as_bytes());
    }
    for x in [i64::MIN, -10_000_000_000_000_000, -1, 0, i64::MAX] {
        let n = raw::write_i64(&mut out64, x);
        assert_eq!(&out64[..n], x.to_string().as_bytes());
    }
}

#[test]
fn append_writes_what_format_returns() {
    let mut rng = SplitMix(7);
    let mut buf = Buffer::new();
    let mut out = Vec::new();
    let mut expect = String::new();
    for i in 0..1_000_000 {
        if i % 1000 == 0 {
            out.clear();
            expect.clear();
        }
        let x = rng.value();
        spindle_fmt::append(&mut out, x);
        spindle_fmt::append(&mut out, x as i64);
        spindle_fmt::append(&mut out, x as u32);
        spindle_fmt::append(&mut out, x as i8);
        out.push(b',');
        for s in [
            buf.format(x).to_string(),
            buf.format(x as i64).to_string(),
            buf.format(x as u32).to_string(),
            buf.format(x as i8).to_string(),
        ] {
            expect.push_str(&s);
        }
        expect.push(',');
        if i % 1000 == 999 {
            assert_eq!(out, expect.as_bytes());
        }
    }
}

/// `Buffer::format` and `raw::write_u64` store a `u32` of 9 or 10 digits in one 16-byte word
/// assembled from a high pair and eight low digits: every high part, each with low parts at
/// both ends of their range and in between, for `u32`, `u64`, `i32` and `i64`.
#[test]
fn buffer_assembles_nine_and_ten_digit_u32s() {
    let mut buf = Buffer::new();
    let mut rng = SplitMix(7);
    for hi in 1..=42u64 {
        let lows = [0, 1, 9, 10, 99, 10_000_000, 99_999_999]
            .into_iter()
            .chain((0..1000).map(|_| rng.next() % 100_000_000));
        for low in lows {
            let x = hi * 100_000_000 + low;
            let Ok(x) = u32::try_from(x) else { continue };
            assert_eq!(buf.format(x), x.to_string());
            assert_eq!(buf.format(u64::from(x)), x.to_string());
            let mut raw64 = [0u8; 20];
            let n = raw::write_u64(&mut raw64, u64::from(x));
            assert_eq!(&raw64[..n], x.to_string().as_bytes());
            if let Ok(s) = i32::try_from(x) {
                assert_eq!(buf.format(s), s.to_string());
                assert_eq!(buf.format(-s), (-s).to_string());
            }
            assert_eq!(buf.format(-i64::from(x)), (-i64::from(x)).to_string());
            let mut v = b"[".to_vec();
            spindle_fmt::append(&mut v, x);
            assert_eq!(v, format!("[{x}").into_bytes());
        }
    }
}
