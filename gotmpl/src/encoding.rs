//! Base64 and base32 (standard alphabets, padded) with Go's decoding errors.

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

fn encode(data: &[u8], alphabet: &[u8], bits: usize) -> String {
    let group = if bits == 6 { 3 } else { 5 };
    let out_group = if bits == 6 { 4 } else { 8 };
    let mut out = String::with_capacity(data.len() * out_group / group + out_group);
    for chunk in data.chunks(group) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let mut acc: u64 = 0;
        for b in &buf[..group] {
            acc = acc << 8 | u64::from(*b);
        }
        let total_bits = group * 8;
        let used = (chunk.len() * 8).div_ceil(bits);
        for i in 0..out_group {
            if i < used {
                let shift = total_bits - bits * (i + 1);
                out.push(alphabet[((acc >> shift) & ((1 << bits) - 1)) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn decode(s: &str, alphabet: &[u8], bits: usize, name: &str) -> Result<Vec<u8>, String> {
    let out_group = if bits == 6 { 4 } else { 8 };
    // Go skips \r and \n; positions in errors count the original input.
    let chars: Vec<(usize, u8)> = s
        .bytes()
        .enumerate()
        .filter(|(_, b)| *b != b'\r' && *b != b'\n')
        .collect();
    let err = |i: usize| format!("illegal {name} data at input byte {i}");
    let mut out = Vec::new();
    for (gi, group) in chars.chunks(out_group).enumerate() {
        if group.len() < out_group {
            return Err(err(group[0].0));
        }
        let mut acc: u64 = 0;
        let mut n = 0;
        let mut pad_at = None;
        for (k, (pos, b)) in group.iter().enumerate() {
            if *b == b'=' {
                if pad_at.is_none() {
                    pad_at = Some((k, *pos));
                }
                continue;
            }
            if pad_at.is_some() {
                return Err(err(*pos));
            }
            let Some(v) = alphabet.iter().position(|a| a == b) else {
                return Err(err(*pos));
            };
            acc = acc << bits | v as u64;
            n += 1;
        }
        if let Some((k, pos)) = pad_at {
            let ok = if bits == 6 {
                k >= 2
            } else {
                matches!(k, 2 | 4 | 5 | 7)
            };
            if !ok || gi * out_group + out_group < chars.len() {
                return Err(err(pos));
            }
        }
        let nbits = n * bits;
        let nbytes = nbits / 8;
        acc >>= nbits - nbytes * 8;
        for i in (0..nbytes).rev() {
            out.push((acc >> (8 * i)) as u8);
        }
    }
    Ok(out)
}

pub(crate) fn b64_encode(data: &[u8]) -> String {
    encode(data, B64, 6)
}

pub(crate) fn b64_decode(s: &str) -> Result<Vec<u8>, String> {
    decode(s, B64, 6, "base64")
}

pub(crate) fn b32_encode(data: &[u8]) -> String {
    encode(data, B32, 5)
}

pub(crate) fn b32_decode(s: &str) -> Result<Vec<u8>, String> {
    decode(s, B32, 5, "base32")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for s in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            assert_eq!(b64_decode(&b64_encode(s.as_bytes())).unwrap(), s.as_bytes());
            assert_eq!(b32_decode(&b32_encode(s.as_bytes())).unwrap(), s.as_bytes());
        }
        assert_eq!(b64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(b32_encode(b"foo"), "MZXW6===");
        assert!(b64_decode("Zm9v!").is_err());
    }
}
