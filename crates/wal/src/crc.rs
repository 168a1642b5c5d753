//! CRC32C (Castagnoli), the checksum of every record: the SSE 4.2 `crc32` instruction where the
//! processor has it (eight bytes a cycle or so), on AArch64 the `crc32cx` instruction (the
//! `crc` feature: Armv8.1 and every Arm server core), a table otherwise. Both give the same value:
//! the standard CRC-32C (reflected polynomial 0x82F63B78, initial and final XOR all ones), so
//! `crc32c(b"123456789") == 0xE3069283`.

/// The CRC32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    !update(!0, data)
}

/// Continues a CRC over `data` from the raw state `crc` (not inverted: start from `!0`, finish
/// with `!`).
pub(crate) fn update(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the processor has SSE 4.2, checked just above.
            return unsafe { update_sse42(crc, data) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("crc") {
            // SAFETY: the processor has the CRC32 instructions, checked just above.
            return unsafe { update_arm_crc(crc, data) };
        }
    }
    update_table(crc, data)
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "crc")]
#[allow(unused_unsafe)]
unsafe fn update_arm_crc(crc: u32, data: &[u8]) -> u32 {
    use std::arch::aarch64::{__crc32cb, __crc32cd};
    let mut c = crc;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        // SAFETY: the caller's contract (the processor has the CRC32 instructions).
        c = unsafe { __crc32cd(c, x) };
    }
    for &b in words.remainder() {
        // SAFETY: as above.
        c = unsafe { __crc32cb(c, b) };
    }
    c
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
// The intrinsics are safe to call here from Rust 1.86 on; `unsafe` keeps 1.82 building.
#[allow(unused_unsafe)]
unsafe fn update_sse42(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(crc);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        // SAFETY: the caller's contract (the processor has SSE 4.2).
        c = unsafe { _mm_crc32_u64(c, x) };
    }
    let mut c = c as u32;
    for &b in words.remainder() {
        // SAFETY: as above.
        c = unsafe { _mm_crc32_u8(c, b) };
    }
    c
}

const POLY: u32 = 0x82F6_3B78;

const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { c >> 1 ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

fn update_table(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ crc >> 8;
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_value_and_the_table_agree_with_the_instruction() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for n in [0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 999, 1000] {
            assert_eq!(
                update(!0, &data[..n]),
                update_table(!0, &data[..n]),
                "{n} bytes"
            );
        }
        // A CRC continued over two pieces is the CRC of the whole.
        assert_eq!(
            !update(update(!0, &data[..333]), &data[333..]),
            crc32c(&data)
        );
    }
}
