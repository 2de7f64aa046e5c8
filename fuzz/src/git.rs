//! `git_pktline`, `git_protocol`, `git_pack`: what rflux-git parses of a remote's answers.
//!
//! Property: no panic, and small limits make every bomb end as an error (libFuzzer's
//! `-rss_limit_mb`/`-malloc_limit_mb` catch memory that is not bounded).

use rflux_git::pack::parse_pack_stats;
use rflux_git::pktline::{PktReader, SectionLimits, decode};
use rflux_git::protocol::{
    Advertisement, read_advertisement, read_fetch_v0, read_fetch_v2, read_ls_refs,
};
use rflux_git::{FetchedCommit, GitError, Limits, ObjectKind, SparseFilter, WalkEntry};
use sha1::{Digest, Sha1};

use crate::block_on;

const SECTION: SectionLimits = SectionLimits {
    max_bytes: 64 * 1024,
    max_pkts: 2_000,
};
const MAX_PACK: u64 = 1 << 20;

fn limits() -> Limits {
    Limits {
        max_pack_bytes: MAX_PACK,
        max_objects: 2_000,
        max_object_bytes: 1 << 20,
        max_total_bytes: 8 << 20,
        max_advertisement_bytes: SECTION.max_bytes,
        max_advertisement_lines: 2_000,
    }
}

/// The pkt-line decoder on a buffer, and the async reader on the same bytes.
pub fn git_pktline(data: &[u8]) {
    let mut rest = data;
    let mut decoded = 0usize;
    while let Ok(Some((_, used))) = decode(rest) {
        assert!(
            (4..=rest.len()).contains(&used),
            "decode consumed {used} of {}",
            rest.len()
        );
        rest = &rest[used..];
        decoded += 1;
    }
    let mut r = PktReader::with_limits(data, SECTION);
    let mut read = 0usize;
    while let Ok(Some(_)) = block_on(r.read()) {
        read += 1;
    }
    // The reader stops at its limits and at a truncated packet; it never sees more packets
    // than the buffer decoder.
    assert!(
        read <= decoded,
        "reader saw {read} packets, decoder {decoded}"
    );
}

/// The first byte picks the parser; the rest is the server's answer.
pub fn git_protocol(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let mut r = PktReader::with_limits(body, SECTION);
    match sel % 5 {
        0 => {
            if let Ok(adv) = block_on(read_advertisement(&mut r)) {
                let _ = adv.check_object_format();
                let _ = rflux_git::protocol::ls_refs_request(&adv, &["refs/heads/"]);
                if let Advertisement::V0 { refs, .. } = &adv {
                    let _ = rflux_git::protocol::filter_refs(refs, &["refs/tags/"]);
                }
            }
        }
        1 => {
            let _ = block_on(read_ls_refs(&mut r));
        }
        2 => {
            if let Ok(resp) = block_on(read_fetch_v2(&mut r, MAX_PACK)) {
                assert!(resp.pack.len() as u64 <= MAX_PACK);
            }
        }
        n => {
            let caps = if n == 3 {
                vec!["side-band-64k".to_string(), "shallow".to_string()]
            } else {
                vec!["shallow".to_string()]
            };
            let adv = Advertisement::V0 {
                refs: Vec::new(),
                caps,
            };
            if let Ok(resp) = block_on(read_fetch_v0(r, &adv, MAX_PACK)) {
                assert!(resp.pack.len() as u64 <= MAX_PACK);
            }
        }
    }
}

/// A pack body (the SHA-1 trailer is appended here, so the fuzzer need not forge it), then
/// every decoded object through the object parsers and the tree walk.
pub fn git_pack(data: &[u8]) {
    let mut pack = data.to_vec();
    let digest: [u8; 20] = Sha1::digest(&pack).into();
    pack.extend_from_slice(&digest);
    let limits = limits();
    let parsed = parse_pack_stats(&pack, &limits);
    if crate::debug() {
        eprintln!("pack: {:?}", parsed.as_ref().map(|(s, st)| (s.len(), st)));
    }
    let Ok((store, stats)) = parsed else {
        return;
    };
    assert!(store.len() <= stats.objects as usize);
    let ids: Vec<_> = store.ids().copied().collect();
    for id in ids {
        let Some((kind, data)) = store.get(&id) else {
            panic!("listed object {id} is missing");
        };
        assert!(data.len() as u64 <= limits.max_object_bytes);
        match kind {
            ObjectKind::Commit => {
                if FetchedCommit::from_store(store.clone(), id, Vec::new()).is_ok() {
                    let _ = rflux_git::walk_tree::<GitError, _>(
                        &store,
                        &id_tree(&store, &id),
                        &SparseFilter::all(),
                        |e| {
                            if let WalkEntry::File { path, .. } = e {
                                assert!(
                                    !path.starts_with('/') && !path.split('/').any(|c| c == ".."),
                                    "walk gave {path}"
                                );
                            }
                            Ok(())
                        },
                    );
                }
            }
            ObjectKind::Tag => {
                let _ = rflux_git::Tag::parse(data);
            }
            ObjectKind::Tree => {
                for e in rflux_git::object::tree_entries(data) {
                    if e.is_err() {
                        break;
                    }
                }
            }
            ObjectKind::Blob => {
                let _ = rflux_git::parse_gitmodules(data);
            }
        }
    }
}

fn id_tree(store: &rflux_git::ObjectStore, id: &rflux_git::ObjectId) -> rflux_git::ObjectId {
    match store.get(id).map(|(_, d)| rflux_git::Commit::parse(d)) {
        Some(Ok(c)) => c.tree,
        _ => *id,
    }
}
