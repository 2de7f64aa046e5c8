//! The pushed tree: many files of pseudo-random bytes (they do not compress), plus a small
//! marker file that each round rewrites so every push has a new layer and manifest digest.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context;

/// SplitMix64: a tiny deterministic generator; the bytes only need to defeat gzip.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// What [`write_tree`] wrote.
pub struct Tree {
    pub files: usize,
    pub bytes: u64,
}

/// Writes `files` files totalling about `mib` MiB under `dir/data/dNN/fNNNN.bin` (40 files per
/// directory), from a fixed seed.
pub fn write_tree(dir: &Path, files: usize, mib: u64) -> anyhow::Result<Tree> {
    let files = files.max(1);
    let total = mib * 1024 * 1024;
    let per_file = (total / files as u64).max(1) as usize;
    let mut rng = SplitMix64(0x5EED_0C1B_E7C4_0001);
    let mut buf = vec![0u8; per_file];
    let mut bytes = 0u64;
    for i in 0..files {
        let sub = dir.join("data").join(format!("d{:02}", i / 40));
        std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
        for chunk in buf.chunks_mut(8) {
            let v = rng.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        let path = sub.join(format!("f{i:04}.bin"));
        let mut f =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        f.write_all(&buf)?;
        bytes += buf.len() as u64;
    }
    // A manifest the tree also carries, as a real artifact would.
    std::fs::write(
        dir.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n",
    )?;
    Ok(Tree { files, bytes })
}

/// Rewrites the round marker (`round.txt`).
pub fn mark_round(dir: &Path, round: usize) -> anyhow::Result<()> {
    std::fs::write(dir.join("round.txt"), format!("round {round}\n")).context("writing round.txt")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_has_the_asked_size_and_does_not_compress() {
        let dir = tempfile::tempdir().unwrap();
        let t = write_tree(dir.path(), 10, 1).unwrap();
        assert_eq!(t.files, 10);
        assert_eq!(t.bytes, 10 * (1024 * 1024 / 10));
        let data = std::fs::read(dir.path().join("data/d00/f0003.bin")).unwrap();
        // Pseudo-random bytes: all 256 values appear in 100 KiB.
        let mut seen = [false; 256];
        for b in &data {
            seen[*b as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        // Deterministic: the same seed writes the same bytes.
        let dir2 = tempfile::tempdir().unwrap();
        write_tree(dir2.path(), 10, 1).unwrap();
        assert_eq!(
            std::fs::read(dir2.path().join("data/d00/f0003.bin")).unwrap(),
            data
        );
    }
}
