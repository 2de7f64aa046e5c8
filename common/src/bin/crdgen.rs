//! Writes the CRDs generated from the Rust API types to `manifests/crds/`: Flux's kinds, and
//! the `fluxcd.controlplane.io` kinds (listed in its `kustomization.yaml` too).
//!
//! Usage: `cargo run -p rflux-common --bin crdgen [-- OUTPUT_DIR]`
//! (default output: `manifests/crds` at the repository root).

use std::path::PathBuf;
use std::process::ExitCode;

use rflux_common::api::crd::{CrdError, manifest_files};
use rflux_common::api::resourceset::crd as operator_crd;

fn main() -> ExitCode {
    let out_dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("manifests")
                .join("crds")
        });
    let files = match all_files() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("crdgen: cannot create {}: {e}", out_dir.display());
        return ExitCode::FAILURE;
    }
    for (name, contents) in files {
        let path = out_dir.join(name);
        if let Err(e) = std::fs::write(&path, contents) {
            eprintln!("crdgen: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

/// The Flux CRDs (with their `kustomization.yaml`), then the `fluxcd.controlplane.io` CRDs.
fn all_files() -> Result<Vec<(&'static str, String)>, CrdError> {
    let mut files = manifest_files()?;
    files.extend(operator_crd::manifest_files()?);
    Ok(files)
}
