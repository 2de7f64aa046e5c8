//! Input-set ids: Adler-32 (RFC 1950) of a string, written in decimal, as Flux Operator's
//! `inputs.ID` (Go's `hash/adler32` printed with `%v`). A Static provider's one input set has
//! the id of its `metadata.uid`.

/// Largest prime below 2^16, the modulus of both Adler-32 sums.
const MOD_ADLER: u32 = 65_521;
/// Bytes that may be summed before the 32-bit sums must be reduced (zlib's NMAX).
const BLOCK: usize = 5_552;

/// Adler-32 checksum of `data`.
pub fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for block in data.chunks(BLOCK) {
        for &byte in block {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD_ADLER;
        b %= MOD_ADLER;
    }
    (b << 16) | a
}

/// The opaque id of an input set derived from `s`: its Adler-32 in decimal.
pub fn input_id(s: &str) -> String {
    adler32(s.as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one byte at a time with the modulus every step (no blocking).
    fn reference(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u64, 0u64);
        for &byte in data {
            a = (a + u64::from(byte)) % 65_521;
            b = (b + a) % 65_521;
        }
        u32::try_from((b << 16) | a).unwrap_or(0)
    }

    #[test]
    fn known_vectors() {
        // RFC 1950's initial value, and the classic "Wikipedia" example (0x11E60398).
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(b"a"), 0x0062_0062);
        assert_eq!(input_id("Wikipedia"), "300286872");
    }

    #[test]
    fn long_inputs_match_the_definition() {
        // Long runs of 0xff make the sums overflow without the block reduction.
        for len in [BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17, 100_000] {
            let data: Vec<u8> = (0..len)
                .map(|i| if i % 7 == 0 { 0xff } else { (i % 251) as u8 })
                .collect();
            assert_eq!(adler32(&data), reference(&data), "len {len}");
            let ones = vec![0xffu8; len];
            assert_eq!(adler32(&ones), reference(&ones), "0xff len {len}");
        }
    }

    #[test]
    fn uid_ids_are_decimal_and_distinct() {
        let a = input_id("0b0d4a2e-9d5c-4d36-a0ef-3c1b6f1f7a10");
        let b = input_id("0b0d4a2e-9d5c-4d36-a0ef-3c1b6f1f7a11");
        assert!(a.chars().all(|c| c.is_ascii_digit()), "{a}");
        assert_ne!(a, b);
    }
}
