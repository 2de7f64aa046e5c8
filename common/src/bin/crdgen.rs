//! Writes the CRDs generated from the Rust API types to `manifests/crds/`.
//!
//! Usage: `cargo run -p rflux-common --bin crdgen [-- OUTPUT_DIR]`
//! (default output: `manifests/crds` at the repository root).

use std::path::PathBuf;
use std::process::ExitCode;

use rflux_common::api::crd::manifest_files;

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
    let files = match manifest_files() {
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
