//! Bounds on what a remote may make the client read, hold and decode.

/// Default of [`Limits::max_advertisement_bytes`]: 128 MiB.
///
/// A ref line of a v0 advertisement is 4 (length) + 40 (id) + 1 + the name + 1 (`\n`)
/// bytes; an `ls-refs` line adds about 48 for a `peeled:` attribute. Names such as
/// `refs/pull/123456/head` or `refs/changes/56/123456/7` are 20 to 40 bytes, so a million
/// refs take roughly 70 to 140 MiB: 128 MiB admits on the order of a million refs of usual
/// length, which is far beyond what real repositories advertise, while bounding what a
/// hostile server can make the client buffer.
pub const DEFAULT_MAX_ADVERTISEMENT_BYTES: u64 = 128 << 20;

/// Default of [`Limits::max_advertisement_lines`]: one million.
///
/// Busy repositories whose pull-request or review refs are advertised reach hundreds of
/// thousands of refs; a million leaves room for them, and bounds the memory the parsed refs
/// take (roughly 150 bytes each, so about 150 MiB at the limit) and the time spent parsing.
pub const DEFAULT_MAX_ADVERTISEMENT_LINES: u32 = 1_000_000;

/// Bounds applied while receiving and decoding what a remote sends.
///
/// Every field is checked before the corresponding memory is allocated, so a remote that
/// lies about sizes or never stops sending gets a [`crate::GitError::Limit`] error instead
/// of exhausting memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest pack accepted, in bytes (as received, before decoding).
    pub max_pack_bytes: u64,
    /// Most objects a pack may hold.
    pub max_objects: u32,
    /// Largest single object, in bytes: the inflated size of a whole object, and the result
    /// size a delta declares (checked before the delta is applied).
    pub max_object_bytes: u64,
    /// Largest sum of the bytes decoded from one pack: every inflated entry (whole objects and
    /// delta instructions) plus every object resolved from a delta. This bounds the memory
    /// that decoding a small but hostile pack (for example delta chains that double the
    /// size at each step) can take.
    pub max_total_bytes: u64,
    /// Largest ref advertisement, in bytes. The same bound applies separately to every other
    /// stream of pkt-lines read before pack data: the capability advertisement, an `ls-refs`
    /// response, and the shallow/acknowledgement sections of a fetch response. Side-band
    /// framing and progress messages around the pack may add this much to
    /// [`Self::max_pack_bytes`].
    pub max_advertisement_bytes: u64,
    /// Most pkt-lines in each stream bounded by [`Self::max_advertisement_bytes`]
    /// (for a ref advertisement: roughly the number of refs).
    pub max_advertisement_lines: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pack_bytes: 2 << 30,
            max_objects: 2_000_000,
            max_object_bytes: 512 << 20,
            max_total_bytes: 4 << 30,
            max_advertisement_bytes: DEFAULT_MAX_ADVERTISEMENT_BYTES,
            max_advertisement_lines: DEFAULT_MAX_ADVERTISEMENT_LINES,
        }
    }
}
