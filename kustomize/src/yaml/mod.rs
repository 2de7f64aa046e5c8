//! YAML input and output.

mod emit;
mod parse;
pub(crate) mod positions;
mod scalar;

pub use emit::{number_text, to_yaml, to_yaml_stream};
pub use parse::{
    Limits, MAX_DEPTH_CEILING, NODE_OVERHEAD, PathSeg, TrackedDoc, parse_one, parse_one_with,
    parse_stream, parse_stream_tracked, parse_stream_with,
};
pub use scalar::{float_value, resolve_plain};
