//! YAML input and output.

mod emit;
mod parse;

pub use emit::{number_text, to_yaml, to_yaml_stream};
pub use parse::{
    Limits, PathSeg, TrackedDoc, float_value, parse_one, parse_stream, parse_stream_tracked,
    parse_stream_with, resolve_plain,
};
