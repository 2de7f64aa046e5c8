//! Shamir's secret sharing over GF(2⁸) with the AES polynomial x⁸+x⁴+x³+x+1, as sops uses
//! it for key groups: each part is the share bytes followed by its x-coordinate byte.

use zeroize::Zeroizing;

/// Multiplication in GF(2⁸) modulo 0x11B.
fn mul(mut a: u8, mut b: u8) -> u8 {
    let mut product = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= 0x1B;
        }
        b >>= 1;
    }
    product
}

/// Multiplicative inverse (a²⁵⁴); `inv(0)` is 0 and never used.
fn inv(a: u8) -> u8 {
    let mut result = 1u8;
    let mut base = a;
    let mut exp = 254u8;
    while exp != 0 {
        if exp & 1 != 0 {
            result = mul(result, base);
        }
        base = mul(base, base);
        exp >>= 1;
    }
    result
}

/// Rebuilds the secret from parts (each `share bytes ‖ x`), by Lagrange interpolation at 0.
/// Errors as sops' `shamir.Combine` words them.
pub(crate) fn combine(parts: &[Zeroizing<Vec<u8>>]) -> Result<Zeroizing<Vec<u8>>, String> {
    if parts.len() < 2 {
        return Err("less than two parts cannot be used to reconstruct the secret".into());
    }
    let len = parts.first().map_or(0, |p| p.len());
    if len < 2 {
        return Err("parts must be at least two bytes".into());
    }
    if parts.iter().any(|p| p.len() != len) {
        return Err("all parts must be the same length".into());
    }
    let xs: Vec<u8> = parts
        .iter()
        .map(|p| p.last().copied().unwrap_or(0))
        .collect();
    for (i, x) in xs.iter().enumerate() {
        if xs[..i].contains(x) {
            return Err("duplicate part detected".into());
        }
    }
    // The Lagrange basis at 0 for each part: prod x_j / (x_i - x_j), j ≠ i (minus is xor).
    let basis: Vec<u8> = xs
        .iter()
        .enumerate()
        .map(|(i, xi)| {
            let (mut num, mut den) = (1u8, 1u8);
            for (j, xj) in xs.iter().enumerate() {
                if i != j {
                    num = mul(num, *xj);
                    den = mul(den, xi ^ xj);
                }
            }
            mul(num, inv(den))
        })
        .collect();
    let mut secret = Zeroizing::new(vec![0u8; len - 1]);
    for (idx, out) in secret.iter_mut().enumerate() {
        *out = parts.iter().zip(&basis).fold(0u8, |acc, (p, b)| {
            acc ^ mul(p.get(idx).copied().unwrap_or(0), *b)
        });
    }
    Ok(secret)
}

/// Splits `secret` into `n` parts, any `threshold` of which rebuild it (x = 1..=n).
#[cfg(test)]
pub(crate) fn split(secret: &[u8], n: u8, threshold: u8) -> Vec<Zeroizing<Vec<u8>>> {
    use aes_gcm::aead::OsRng;
    use aes_gcm::aead::rand_core::RngCore;
    let mut parts: Vec<Zeroizing<Vec<u8>>> = (1..=n)
        .map(|x| {
            let mut p = vec![0u8; secret.len() + 1];
            p[secret.len()] = x;
            Zeroizing::new(p)
        })
        .collect();
    for (idx, s) in secret.iter().enumerate() {
        let mut coeffs = vec![0u8; usize::from(threshold)];
        OsRng.fill_bytes(&mut coeffs);
        coeffs[0] = *s;
        for (i, part) in parts.iter_mut().enumerate() {
            let x = u8::try_from(i + 1).unwrap_or(0);
            // Horner's rule.
            part[idx] = coeffs.iter().rev().fold(0u8, |acc, c| mul(acc, x) ^ c);
        }
    }
    parts
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn field_arithmetic() {
        // The classic AES example: {57} · {83} = {c1}.
        assert_eq!(mul(0x57, 0x83), 0xc1);
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1, "{a}");
        }
    }

    #[test]
    fn split_and_combine() {
        let secret: Vec<u8> = (0..32).collect();
        let parts = split(&secret, 3, 2);
        for pair in [[0, 1], [0, 2], [1, 2]] {
            let chosen: Vec<_> = pair.iter().map(|i| parts[*i].clone()).collect();
            assert_eq!(combine(&chosen).unwrap().as_slice(), secret.as_slice());
        }
        assert_eq!(combine(&parts).unwrap().as_slice(), secret.as_slice());
        // Below the threshold the result is unrelated to the secret.
        let parts3 = split(&secret, 3, 3);
        let two: Vec<_> = parts3[..2].to_vec();
        assert_ne!(combine(&two).unwrap().as_slice(), secret.as_slice());
        assert!(combine(&parts[..1]).is_err());
        let dup = vec![parts[0].clone(), parts[0].clone()];
        assert_eq!(combine(&dup).unwrap_err(), "duplicate part detected");
    }
}
