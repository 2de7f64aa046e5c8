//! Safe extraction, shared with source-controller: `rflux_common::untar`.

pub use rflux_common::untar::*;
