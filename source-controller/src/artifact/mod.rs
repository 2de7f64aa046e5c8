//! Deterministic artifacts: ignore rules, tar.gz packing, digests, storage and the file server.

pub mod archive;
pub mod error;
pub mod ignore;
pub mod server;
pub mod storage;

pub use archive::{
    Digest, DigestAlgorithm, bench_package, package_dir, package_dir_with, package_to_file,
    package_to_file_with,
};
pub use error::ArtifactError;
pub use ignore::IgnoreRules;
pub use server::{router, serve, serve_listener};
pub use storage::{
    Artifact, ArtifactLock, Storage, StorageOptions, advertised_address, artifact_path,
    git_artifact_file_name, select_garbage,
};
