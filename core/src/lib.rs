//! rflux-core: the small, pure vocabulary that the kustomize engine, the git client and both
//! controllers share, so each concept is written once:
//!
//! - [`api_version`]: `group/version` strings;
//! - [`selector`]: Kubernetes label selectors (`a=b,c in (d,e),!f`);
//! - [`path`]: joining an untrusted relative path under a root without escaping it;
//! - [`lru`]: a small least-recently-used cache, and [`error_chain`] for error messages.
//!
//! It has no I/O and no Kubernetes client, so the engine can use it without pulling either in.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod api_version;
pub mod lru;
pub mod path;
pub mod selector;

pub use api_version::split_api_version;
pub use lru::{Lru, error_chain};
pub use path::{PathEscape, secure_join, strict_join};
pub use selector::{LabelSelector, SelectorParseError};
