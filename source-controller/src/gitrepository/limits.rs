//! What one Git fetch may make source-controller read and hold, sized for the pod.
//!
//! Flux's source-controller runs with a 1 GiB memory limit and two concurrent reconciles
//! (`--concurrent=2`). The git client's own defaults ([`Limits::default`]: a 2 GiB pack, 4 GiB
//! of decoded objects) are far above that, and a fetch holds the whole pack and every decoded
//! object in memory: a delta-bomb pack of about 1.5 KB drove the process past 1 GiB
//! (`e2e/tests/faults_source.rs`, 1191 MiB peak). These bounds let two hostile fetches at once
//! stay well under the limit: each holds at most [`MAX_PACK_BYTES`] of pack plus
//! [`MAX_DECODED_BYTES`] of objects, or a ref advertisement of [`MAX_ADVERTISEMENT_BYTES`].

use rflux_git::Limits;

/// Largest pack one fetch receives (a shallow fetch of one commit).
pub const MAX_PACK_BYTES: u64 = 128 << 20;
/// Largest sum of decoded objects (inflated entries and delta results) of one fetch.
pub const MAX_DECODED_BYTES: u64 = 256 << 20;
/// Largest single object.
pub const MAX_OBJECT_BYTES: u64 = 128 << 20;
/// Largest ref advertisement (and every other pkt-line section before the pack).
pub const MAX_ADVERTISEMENT_BYTES: u64 = 64 << 20;
/// Most lines of a ref advertisement (each parsed ref costs about 150 bytes).
pub const MAX_ADVERTISEMENT_LINES: u32 = 500_000;

/// The memory limit of Flux's source-controller Deployment.
pub const POD_MEMORY_LIMIT: u64 = 1 << 30;

/// The limits of every fetch a GitRepository reconcile makes.
pub fn fetch_limits() -> Limits {
    Limits {
        max_pack_bytes: MAX_PACK_BYTES,
        max_object_bytes: MAX_OBJECT_BYTES,
        max_total_bytes: MAX_DECODED_BYTES,
        max_advertisement_bytes: MAX_ADVERTISEMENT_BYTES,
        max_advertisement_lines: MAX_ADVERTISEMENT_LINES,
        ..Limits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_worst_case_fetches_fit_in_the_pod() {
        let l = fetch_limits();
        // Per fetch: the pack, every decoded object, and the parsed advertisement (~150 bytes
        // a line) could all be held at once.
        let per_fetch =
            l.max_pack_bytes + l.max_total_bytes + u64::from(l.max_advertisement_lines) * 150;
        assert!(2 * per_fetch < POD_MEMORY_LIMIT, "{per_fetch}");
        assert!(l.max_object_bytes <= l.max_total_bytes);
        // Tighter than the client's defaults on every axis.
        let d = Limits::default();
        assert!(l.max_pack_bytes < d.max_pack_bytes);
        assert!(l.max_total_bytes < d.max_total_bytes);
        assert!(l.max_advertisement_bytes <= d.max_advertisement_bytes);
    }
}
