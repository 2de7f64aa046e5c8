//! Git delta instructions, as stored in `OFS_DELTA` and `REF_DELTA` pack entries: the base
//! size and the result size (little-endian base-128 numbers), then a list of instructions,
//! each either "copy `len` bytes at `offset` of the base" or "insert the next `n` bytes of
//! the delta".
//!
//! A delta is checked completely before anything is allocated for its result: the declared
//! result size against the limits, then every instruction against the base and against the
//! declared size. Only a delta that produces exactly the size it declares, within the
//! limits, gets its result buffer.

use crate::error::GitError;

fn corrupt(msg: impl std::fmt::Display) -> GitError {
    GitError::corrupt_pack(msg)
}

/// The length of a copy instruction whose encoded length is zero.
const COPY_LEN_ZERO: usize = 0x10000;

/// One decoded instruction.
enum Op<'a> {
    Copy { offset: usize, len: usize },
    Insert(&'a [u8]),
}

/// Iterates over the instructions of a delta body.
struct Ops<'a> {
    delta: &'a [u8],
    pos: usize,
}

impl<'a> Ops<'a> {
    fn next_op(&mut self) -> Result<Option<Op<'a>>, GitError> {
        let Some(&op) = self.delta.get(self.pos) else {
            return Ok(None);
        };
        self.pos += 1;
        if op & 0x80 != 0 {
            let mut offset = 0usize;
            let mut len = 0usize;
            for (bit, shift) in [(0x01, 0), (0x02, 8), (0x04, 16), (0x08, 24)] {
                if op & bit != 0 {
                    offset |= usize::from(self.byte()?) << shift;
                }
            }
            for (bit, shift) in [(0x10, 0), (0x20, 8), (0x40, 16)] {
                if op & bit != 0 {
                    len |= usize::from(self.byte()?) << shift;
                }
            }
            if len == 0 {
                len = COPY_LEN_ZERO;
            }
            Ok(Some(Op::Copy { offset, len }))
        } else if op != 0 {
            let n = usize::from(op);
            let data = self
                .pos
                .checked_add(n)
                .and_then(|end| self.delta.get(self.pos..end))
                .ok_or_else(|| corrupt("truncated insert op"))?;
            self.pos += n;
            Ok(Some(Op::Insert(data)))
        } else {
            Err(corrupt("reserved delta opcode 0"))
        }
    }

    fn byte(&mut self) -> Result<u8, GitError> {
        let b = *self
            .delta
            .get(self.pos)
            .ok_or_else(|| corrupt("truncated copy op"))?;
        self.pos += 1;
        Ok(b)
    }
}

fn read_varint(d: &[u8], pos: &mut usize) -> Result<u64, GitError> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let c = *d
            .get(*pos)
            .ok_or_else(|| corrupt("truncated delta header"))?;
        *pos += 1;
        if shift > 63 {
            return Err(corrupt("delta size overflows"));
        }
        v |= u64::from(c & 0x7f) << shift;
        shift += 7;
        if c & 0x80 == 0 {
            return Ok(v);
        }
    }
}

/// The base size and result size a delta declares, and where its instructions start.
fn header(delta: &[u8]) -> Result<(u64, u64, usize), GitError> {
    let mut pos = 0;
    let src = read_varint(delta, &mut pos)?;
    let dst = read_varint(delta, &mut pos)?;
    Ok((src, dst, pos))
}

/// Checks every instruction against a base of `base_len` bytes without producing anything,
/// and that together they produce exactly `declared` bytes. Stops at the first instruction
/// that would go past `declared`, so a hostile delta costs at most one pass over its own
/// bytes.
fn check_ops(base_len: usize, ops: &[u8], declared: usize) -> Result<(), GitError> {
    let mut it = Ops { delta: ops, pos: 0 };
    let mut produced = 0usize;
    while let Some(op) = it.next_op()? {
        let n = match op {
            Op::Copy { offset, len } => {
                if offset.checked_add(len).is_none_or(|end| end > base_len) {
                    return Err(corrupt("delta copy outside the base"));
                }
                len
            }
            Op::Insert(data) => data.len(),
        };
        produced = produced
            .checked_add(n)
            .filter(|&p| p <= declared)
            .ok_or_else(|| corrupt("delta writes past its declared size"))?;
    }
    if produced != declared {
        return Err(corrupt(format!(
            "delta produces {produced} bytes, header says {declared}"
        )));
    }
    Ok(())
}

/// Applies a delta to `base` after checking it: a declared result size above `max_size` is
/// the error `limit_error(size)`, and the instructions must stay inside the base and produce
/// exactly the declared size. Only then is the result allocated, at exactly that size.
pub(crate) fn apply_checked(
    base: &[u8],
    delta: &[u8],
    max_size: u64,
    limit_error: impl FnOnce(u64) -> GitError,
) -> Result<Vec<u8>, GitError> {
    let (src_size, dst_size, start) = header(delta)?;
    if src_size != base.len() as u64 {
        return Err(corrupt(format!(
            "delta expects a base of {src_size} bytes, base has {}",
            base.len()
        )));
    }
    if dst_size > max_size {
        return Err(limit_error(dst_size));
    }
    let dst_size = usize::try_from(dst_size).map_err(|_| corrupt("delta size too large"))?;
    let ops = &delta[start..];
    check_ops(base.len(), ops, dst_size)?;
    let mut out = Vec::with_capacity(dst_size);
    let mut it = Ops { delta: ops, pos: 0 };
    while let Some(op) = it.next_op()? {
        match op {
            Op::Copy { offset, len } => {
                let src = offset
                    .checked_add(len)
                    .and_then(|end| base.get(offset..end))
                    .ok_or_else(|| corrupt("delta copy outside the base"))?;
                out.extend_from_slice(src);
            }
            Op::Insert(data) => out.extend_from_slice(data),
        }
    }
    Ok(out)
}

/// Applies git delta instructions to `base`. The result may not exceed `max_size` bytes; that
/// is checked, along with every instruction, before the result is allocated.
pub fn apply_delta(base: &[u8], delta: &[u8], max_size: u64) -> Result<Vec<u8>, GitError> {
    apply_checked(base, delta, max_size, |dst| {
        GitError::Limit(format!(
            "delta result of {dst} bytes exceeds the limit of {max_size} bytes"
        ))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn applies_deltas_and_rejects_bad_ones() {
        let base = b"0123456789abcdef";
        // src 16, dst 9: copy offset 2 len 4, insert "XY", copy offset 10 len 3.
        let delta = [16, 9, 0x91, 2, 4, 2, b'X', b'Y', 0x91, 10, 3];
        assert_eq!(apply_delta(base, &delta, 100).unwrap(), b"2345XYabc");
        // Copy past the base.
        assert!(apply_delta(base, &[16, 4, 0x91, 14, 4], 100).is_err());
        // Wrong base size.
        assert!(apply_delta(b"short", &delta, 100).is_err());
        // Output longer than declared.
        assert!(apply_delta(base, &[16, 1, 2, b'a', b'b'], 100).is_err());
        // Output shorter than declared.
        assert!(apply_delta(base, &[16, 5, 1, b'a'], 100).is_err());
        // Reserved opcode, truncated insert, over the limit.
        assert!(apply_delta(base, &[16, 1, 0], 100).is_err());
        assert!(apply_delta(base, &[16, 3, 3, b'a'], 100).is_err());
        assert!(matches!(
            apply_delta(base, &[16, 0x80, 0x08], 100),
            Err(GitError::Limit(_))
        ));
        // Truncated header.
        assert!(apply_delta(base, &[0x80], 100).is_err());
        // A copy with a zero length copies 0x10000 bytes.
        let big = vec![7u8; COPY_LEN_ZERO];
        let d = [0x80, 0x80, 0x04, 0x80, 0x80, 0x04, 0x80];
        assert_eq!(apply_delta(&big, &d, 1 << 20).unwrap(), big);
    }

    #[test]
    fn a_lying_result_size_is_found_before_allocating() {
        let base = b"0123456789abcdef";
        // Declares 2^40 bytes (within a huge limit), produces 2.
        let mut d = vec![16];
        let mut n = 1u64 << 40;
        while n >= 0x80 {
            d.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        d.push(n as u8);
        d.extend_from_slice(&[2, b'a', b'b']);
        // If the claimed size were allocated this would abort; it is refused instead.
        let err = apply_delta(base, &d, u64::MAX).unwrap_err();
        assert!(matches!(err, GitError::Protocol(ref m) if m.contains("produces 2 bytes")));
        // Copies that overflow the offset arithmetic are refused too.
        let d = [16, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 4];
        assert!(apply_delta(base, &d, 100).is_err());
    }
}
