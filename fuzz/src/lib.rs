//! The bodies of rflux's fuzz targets (issue 14), shared by the libFuzzer binaries in
//! `fuzz_targets/` (built by `scripts/fuzz.sh`) and by the seed replay test of the default
//! suite (`e2e/tests/fuzz_seeds.rs`), which runs every committed seed and every saved crasher
//! through the same functions without libFuzzer.
//!
//! Every target takes raw bytes and panics when its property is broken; errors returned by
//! the code under test are fine.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

pub mod controller;
mod git;
mod kbuild;
mod kbuild_model;
mod oci;
mod sops;
mod substitute;
mod untar;
mod yaml;

pub use git::{git_pack, git_pktline, git_protocol};
pub use kbuild::{KBuildInput, kustomize_build, render_tree};
pub use oci::oci;
pub use sops::sops;
pub use substitute::substitute;
pub use untar::untar;
pub use yaml::yaml;

/// A target body: panics when its property is broken.
pub type Target = fn(&[u8]);

/// Every target, by the name of its binary and seed directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("yaml", yaml),
    ("kustomize_build", kustomize_build),
    ("git_pktline", git_pktline),
    ("git_protocol", git_protocol),
    ("git_pack", git_pack),
    ("untar", untar),
    ("substitute", substitute),
    ("sops", sops),
    ("oci", oci),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// Whether `RFLUX_FUZZ_DEBUG` is set: the targets then print what they did with an input
/// (to see what the seeds reach; `RFLUX_FUZZ_DEBUG=1 <target binary> <file>`).
pub(crate) fn debug() -> bool {
    static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("RFLUX_FUZZ_DEBUG").is_some())
}

/// Runs a future that never waits (the parsers read from in-memory slices) to completion.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a parser over an in-memory slice returned Pending"),
    }
}
