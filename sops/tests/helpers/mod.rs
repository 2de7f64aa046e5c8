//! Helpers on top of `common` for the format and failure tests: files and small edits of
//! encrypted JSON documents.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Writes `name` in `dir` and returns its path.
pub fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

/// Parses sops' JSON output (order kept: serde_json here has `preserve_order`).
pub fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

/// Re-serialises edited JSON (layout does not matter to the loader).
pub fn to_json_bytes(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec_pretty(v).unwrap()
}
