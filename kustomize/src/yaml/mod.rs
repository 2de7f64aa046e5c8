//! YAML input and output.

mod emit;
mod parse;
mod pieces;
pub(crate) mod positions;
mod scalar;

pub use emit::{number_text, to_yaml, to_yaml_stream};
pub use parse::{
    Limits, MAX_DEPTH_CEILING, NODE_OVERHEAD, PathSeg, TrackedDoc, parse_one, parse_one_with,
    parse_stream, parse_stream_with,
};
pub use pieces::parse_stream_tracked;
pub use scalar::{float_value, resolve_plain};
