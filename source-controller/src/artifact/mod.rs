//! Deterministic artifacts: ignore rules, tar.gz packing, digests, storage and the file server.

pub mod archive;
pub mod checked;
pub mod error;
pub mod ignore;
pub mod pgz;
pub mod server;
pub mod storage;

pub use archive::{
    Digest, DigestAlgorithm, bench_package, default_threads, package_dir, package_dir_threads,
    package_dir_with, package_to_file, package_to_file_with, write_tar,
};
pub use error::ArtifactError;
pub use ignore::IgnoreRules;
pub use server::{router, serve, serve_listener};
pub use storage::{
    Artifact, ArtifactLock, Storage, StorageOptions, advertised_address, artifact_path,
    git_artifact_file_name, select_garbage,
};
