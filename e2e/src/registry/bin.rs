//! Where the registry binaries live (`e2e/registry/build.sh` puts them there).

use std::path::{Path, PathBuf};

use super::error::{RegistryError, Result};

/// The version `e2e/registry/build.sh` builds.
pub const REGISTRY_VERSION: &str = "v3.1.2";

/// Directory of the registry binaries: `RFLUX_REGISTRY_BIN` when it names a directory (its
/// parent when it names the binary), default `$HOME/.cache/gitops-e2e/oci-bin`.
pub fn registry_bin_dir() -> PathBuf {
    match std::env::var_os("RFLUX_REGISTRY_BIN") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            if p.is_file() {
                p.parent()
                    .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
            } else {
                p
            }
        }
        _ => {
            let home =
                std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
            home.join(".cache/gitops-e2e/oci-bin")
        }
    }
}

/// The registry binary: `RFLUX_REGISTRY_BIN` when it names a file, else
/// `<registry_bin_dir>/registry`. Not built here (see `e2e/registry/build.sh`).
pub fn registry_binary() -> Result<PathBuf> {
    let path = match std::env::var_os("RFLUX_REGISTRY_BIN") {
        Some(p) if !p.is_empty() && Path::new(&p).is_file() => PathBuf::from(p),
        _ => registry_bin_dir().join("registry"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(RegistryError::BinaryMissing { path })
    }
}

/// Why registry tests cannot run here (the binary is missing), or `None`.
pub fn skip_reason() -> Option<String> {
    registry_binary().err().map(|e| e.to_string())
}
