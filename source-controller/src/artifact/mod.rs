//! Deterministic artifacts: ignore rules, tar.gz packing, digests, storage and the file server.
