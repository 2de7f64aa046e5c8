//! Hostile packs built in the test: delta chains that double at each step, many deltas that
//! each blow up one base, deltas that lie about their result size, and zlib bombs. Each runs
//! in a copy of this test binary whose address space is capped, so decoding must fail with a
//! clear error while staying far below the memory the pack claims to need.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic fails the test

mod common;

use std::io::Write;

use common::isolated;
use rflux_git::pack::{Limits, parse_pack};
use rflux_git::{GitError, ObjectKind};
use sha1::{Digest, Sha1};

const MIB: u64 = 1 << 20;

/// Address-space cap of the isolated copies (a test binary alone needs well under 100 MiB).
const CAP_MIB: u64 = 320;

const BLOB: u8 = 3;
const OFS_DELTA: u8 = 6;

/// A pack entry header: type and (inflated) size.
fn entry_header(ty: u8, size: u64) -> Vec<u8> {
    let mut out = vec![(ty << 4) | (size & 0x0f) as u8];
    let mut rest = size >> 4;
    while rest > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.push((rest & 0x7f) as u8);
        rest >>= 7;
    }
    out
}

/// The base offset of an OFS_DELTA entry (big-endian base-128 with an implicit +1 per byte).
fn ofs(mut rel: u64) -> Vec<u8> {
    let mut out = vec![(rel & 0x7f) as u8];
    rel >>= 7;
    while rel > 0 {
        rel -= 1;
        out.insert(0, 0x80 | (rel & 0x7f) as u8);
        rel >>= 7;
    }
    out
}

/// A size in a delta header (little-endian base-128).
fn delta_size(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A copy instruction (`len` below 2^24).
fn copy_op(offset: u64, len: u64, out: &mut Vec<u8>) {
    let mut op = 0x80u8;
    let mut args = Vec::new();
    for i in 0..4 {
        let b = (offset >> (8 * i)) as u8;
        if b != 0 {
            op |= 1 << i;
            args.push(b);
        }
    }
    for i in 0..3 {
        let b = (len >> (8 * i)) as u8;
        if b != 0 {
            op |= 0x10 << i;
            args.push(b);
        }
    }
    out.push(op);
    out.extend_from_slice(&args);
}

/// A delta whose result is `times` copies of the whole base of `base_len` bytes.
fn repeat_delta(base_len: u64, times: u64) -> Vec<u8> {
    let mut d = Vec::new();
    delta_size(base_len, &mut d);
    delta_size(base_len * times, &mut d);
    const CHUNK: u64 = 8 << 20;
    for _ in 0..times {
        let mut off = 0;
        while off < base_len {
            let len = CHUNK.min(base_len - off);
            copy_op(off, len, &mut d);
            off += len;
        }
    }
    d
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

/// Writes bits least significant first, as deflate does.
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u64, bits: u32) {
        self.acc |= value << self.n;
        self.n += bits;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code, which deflate stores most significant bit first.
    fn code(&mut self, code: u64, bits: u32) {
        let reversed = (0..bits).fold(0, |r, i| (r << 1) | ((code >> i) & 1));
        self.put(reversed, bits);
    }
}

/// A zlib stream that inflates to at least `n` zero bytes, about 13 bits per 258 bytes: one
/// block with the fixed Huffman codes, holding a literal zero and then copies of 258 bytes at
/// distance 1. It is cut off after the copies (no end of block, no checksum): a decoder
/// that stops at the declared size never gets there.
fn zlib_zeros(n: u64) -> Vec<u8> {
    let mut b = Bits::default();
    b.out.extend_from_slice(&[0x78, 0x01]);
    b.put(1, 1); // last block
    b.put(1, 2); // fixed Huffman codes
    b.code(0x30, 8); // literal 0
    for _ in 0..n.div_ceil(258) {
        b.code(0xc5, 8); // length 258 (symbol 285)
        b.code(0, 5); // distance 1
    }
    b.put(0, 7); // pad to a byte boundary
    b.out
}

#[derive(Default)]
struct PackBuilder {
    body: Vec<u8>,
    offsets: Vec<u64>,
}

impl PackBuilder {
    fn raw_entry(&mut self, header: Vec<u8>, compressed: &[u8]) -> usize {
        self.offsets.push(12 + self.body.len() as u64);
        self.body.extend_from_slice(&header);
        self.body.extend_from_slice(compressed);
        self.offsets.len() - 1
    }

    fn blob(&mut self, data: &[u8]) -> usize {
        self.raw_entry(entry_header(BLOB, data.len() as u64), &zlib(data))
    }

    /// An OFS_DELTA entry against entry `base`.
    fn delta(&mut self, base: usize, delta: &[u8]) -> usize {
        let here = 12 + self.body.len() as u64;
        let mut header = entry_header(OFS_DELTA, delta.len() as u64);
        header.extend(ofs(here - self.offsets[base]));
        self.raw_entry(header, &zlib(delta))
    }

    fn finish(self) -> Vec<u8> {
        let mut p = b"PACK".to_vec();
        p.extend_from_slice(&2u32.to_be_bytes());
        p.extend_from_slice(&(self.offsets.len() as u32).to_be_bytes());
        p.extend_from_slice(&self.body);
        let digest: [u8; 20] = Sha1::digest(&p).into();
        p.extend_from_slice(&digest);
        p
    }
}

const KIB: u64 = 1024;

/// A blob of `KIB` bytes followed by `steps` deltas, each doubling the previous object.
/// Returns the builder, the index and the size of the last object.
fn doubling_chain(steps: u32) -> (PackBuilder, usize, u64) {
    let mut b = PackBuilder::default();
    let mut last = b.blob(&[b'x'; KIB as usize]);
    let mut size = KIB;
    for _ in 0..steps {
        last = b.delta(last, &repeat_delta(size, 2));
        size *= 2;
    }
    (b, last, size)
}

fn expect_limit(r: Result<rflux_git::ObjectStore, GitError>) -> String {
    match r {
        Err(GitError::Limit(m)) => m,
        Err(e) => panic!("expected a limit error, got {e:?}"),
        Ok(s) => panic!(
            "expected a limit error, the pack decoded to {} objects",
            s.len()
        ),
    }
}

#[test]
fn doubling_delta_chain_counts_resolved_bytes() {
    isolated(
        "doubling_delta_chain_counts_resolved_bytes",
        &[],
        Some(CAP_MIB),
        || {
            // 1 KiB doubled 14 times: the last object is 16 MiB, 32 MiB in all, from a pack of
            // about a kilobyte. Every object fits the per-object limit; the sum does not.
            let (b, _, last) = doubling_chain(14);
            assert_eq!(last, 16 * MIB);
            let pack = b.finish();
            assert!(pack.len() < 4096, "{}", pack.len());
            let limits = Limits {
                max_object_bytes: 16 * MIB,
                max_total_bytes: 8 * MIB,
                ..Limits::default()
            };
            let msg = expect_limit(parse_pack(&pack, &limits));
            assert!(msg.contains(&(8 * MIB).to_string()), "{msg}");
        },
    );
}

#[test]
fn fanned_out_deltas_stop_at_the_total_limit() {
    isolated(
        "fanned_out_deltas_stop_at_the_total_limit",
        &[],
        Some(CAP_MIB),
        || {
            // A 16 MiB object built by doubling, then 200 deltas that each copy it 8 times:
            // 25 GiB of results from a pack of about 50 KiB.
            let (mut b, base, size) = doubling_chain(14);
            for _ in 0..200 {
                b.delta(base, &repeat_delta(size, 8));
            }
            let pack = b.finish();
            assert!(pack.len() < 64 * 1024, "{}", pack.len());
            let limits = Limits {
                max_object_bytes: 128 * MIB,
                max_total_bytes: 64 * MIB,
                ..Limits::default()
            };
            expect_limit(parse_pack(&pack, &limits));
        },
    );
}

#[test]
fn declared_delta_result_size_is_checked_before_allocating() {
    isolated(
        "declared_delta_result_size_is_checked_before_allocating",
        &[],
        Some(CAP_MIB),
        || {
            let lying = |dst: u64| {
                let mut b = PackBuilder::default();
                let base = b.blob(b"0123456789abcdef");
                // Claims `dst` bytes, inserts 10.
                let mut d = Vec::new();
                delta_size(16, &mut d);
                delta_size(dst, &mut d);
                d.push(10);
                d.extend_from_slice(b"0123456789");
                b.delta(base, &d);
                b.finish()
            };
            // Within the default per-object limit (512 MiB) but far beyond the cap of this
            // process: must be refused without reserving the claimed size.
            for _ in 0..4 {
                let r = parse_pack(&lying(500 * MIB), &Limits::default());
                assert!(
                    matches!(r, Err(GitError::Protocol(_)) | Err(GitError::Limit(_))),
                    "{r:?}"
                );
            }
            // Over the per-object limit, and absurdly large.
            for dst in [513 * MIB, 1 << 62] {
                expect_limit(parse_pack(&lying(dst), &Limits::default()));
            }
            // Within the per-object limit but over what the total limit has left.
            let limits = Limits {
                max_total_bytes: 16 * MIB,
                ..Limits::default()
            };
            expect_limit(parse_pack(&lying(100 * MIB), &limits));
        },
    );
}

#[test]
fn zlib_bomb_stops_at_the_declared_size() {
    isolated(
        "zlib_bomb_stops_at_the_declared_size",
        &[],
        Some(CAP_MIB),
        || {
            // 256 MiB of zeros in about 1.6 MiB. Declared as blobs of 1000 bytes and of
            // 150 MiB (within the default limits), inflation must stop right after the
            // declared size.
            let bomb = zlib_zeros(256 * MIB);
            for declared in [1000, 150 * MIB] {
                let mut b = PackBuilder::default();
                b.raw_entry(entry_header(BLOB, declared), &bomb);
                let pack = b.finish();
                match parse_pack(&pack, &Limits::default()) {
                    Err(GitError::Protocol(m)) => assert!(m.contains("declared"), "{m}"),
                    other => panic!("{:?}", other.map(|s| s.len())),
                }
            }
            // Declared beyond the limits: refused before inflating anything.
            let mut b = PackBuilder::default();
            b.raw_entry(entry_header(BLOB, 1 << 40), &bomb);
            expect_limit(parse_pack(&b.finish(), &Limits::default()));
        },
    );
}

#[test]
fn builders_make_packs_that_decode() {
    // The builders are sound: a small chain decodes to the expected blobs, and the
    // hand-made zlib stream inflates to zeros.
    let (b, _, size) = doubling_chain(3);
    let store = parse_pack(&b.finish(), &Limits::default()).unwrap();
    assert_eq!(store.len(), 4);
    let want = vec![b'x'; size as usize];
    let id = rflux_git::ObjectId::hash_object(ObjectKind::Blob, &want);
    assert_eq!(store.get(&id).unwrap().1, &want[..]);

    let mut z = flate2::Decompress::new(true);
    let mut out = Vec::with_capacity(10_000);
    z.decompress_vec(&zlib_zeros(10_000), &mut out, flate2::FlushDecompress::None)
        .unwrap();
    assert_eq!(out.len(), 10_000);
    assert!(out.iter().all(|&b| b == 0));
}
