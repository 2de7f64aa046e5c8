//! The formats a SOPS document is stored in: parse into [`crate::tree`] and emit from it,
//! with Flux's default store settings (`../shared/reference/sops.md` §4, §10).

pub mod binary;
pub mod dotenv;
pub mod flatten;
pub mod ini;
pub mod json;
pub mod yaml;

use crate::error::SopsError;
use crate::tree::{Branch, Value};
use zeroize::Zeroizing;

/// A SOPS store format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Yaml,
    Json,
    Dotenv,
    Ini,
    Binary,
}

impl Format {
    /// Flux's `formatForPath`: the format of a file (or of a Secret data key) from its name.
    /// Case-sensitive suffix tests; anything unknown is binary.
    pub fn for_path(name: &str) -> Format {
        if name.ends_with(".dockerconfigjson") || name.ends_with(".json") {
            Format::Json
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            Format::Yaml
        } else if name.ends_with(".env") {
            Format::Dotenv
        } else if name.ends_with(".ini") {
            Format::Ini
        } else {
            Format::Binary
        }
    }

    /// The bytes Flux looks for before it tries to decrypt a file or a Secret value of this
    /// format (a document without them is left alone).
    pub fn marker(self) -> &'static str {
        match self {
            Format::Yaml => "mac: ENC[",
            Format::Json | Format::Binary => "\"mac\": \"ENC[",
            Format::Dotenv => "sops_mac=ENC[",
            Format::Ini => "[sops]",
        }
    }

    /// Whether `bytes` hold this format's marker.
    pub fn has_marker(self, bytes: &[u8]) -> bool {
        let m = self.marker().as_bytes();
        bytes.windows(m.len()).any(|w| w == m)
    }

    /// The name sops gives the format in messages (`binary`, `dotenv`, `INI`, `JSON`, `YAML`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Yaml => "YAML",
            Format::Json => "JSON",
            Format::Dotenv => "dotenv",
            Format::Ini => "INI",
            Format::Binary => "binary",
        }
    }
}

/// Parses an encrypted document: its branches (the `sops` block taken out of each) and the
/// `sops` block itself as a tree (a map), unflattened for dotenv and INI.
pub fn load(format: Format, bytes: &[u8]) -> Result<(Vec<Branch>, Value), SopsError> {
    match format {
        Format::Yaml => yaml::load(bytes),
        Format::Json => json::load(bytes),
        Format::Dotenv => dotenv::load(bytes),
        Format::Ini => ini::load(bytes),
        Format::Binary => binary::load(bytes),
    }
}

/// Emits plaintext branches (no `sops` block) in `format`, byte for byte as the sops Go
/// library does with default settings.
pub fn emit(format: Format, branches: &[Branch]) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    match format {
        Format::Yaml => yaml::emit(branches),
        Format::Json => json::emit(branches),
        Format::Dotenv => dotenv::emit(branches),
        Format::Ini => ini::emit(branches),
        Format::Binary => binary::emit(branches),
    }
}
