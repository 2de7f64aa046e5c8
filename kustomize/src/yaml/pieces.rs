//! Large streams parsed in pieces on several threads. A manifest file of a few megabytes is
//! usually many documents (an operator's install file, a bundle of CRDs); YAML anchors do not
//! cross documents, so the documents can be parsed apart and joined in order.
//!
//! The text is cut only at `---` lines at column 0 (a document marker wherever it stands,
//! YAML 1.2 forbids it inside content), never when a `%` directive line could apply to the
//! next document. Each piece gets its share of the node and expansion budgets, so the pieces
//! together hold no more than the whole would. Any error in any piece, a budget one included,
//! sends the whole text through the sequential parser, so errors and their lines are exactly
//! what a sequential parse reports.

use super::parse::{Limits, TrackedDoc, parse_stream_tracked_with};
use crate::error::Result;

/// Streams shorter than this are parsed on the calling thread.
const PARALLEL_MIN_BYTES: usize = 256 * 1024;

/// Like [`super::parse_stream`], also reporting where empty mapping values are and the line
/// each document starts on.
pub fn parse_stream_tracked(text: &str, origin: &str) -> Result<Vec<TrackedDoc>> {
    let limits = Limits::default();
    match in_pieces(text, origin, limits) {
        Some(docs) => Ok(docs),
        None => parse_stream_tracked_with(text, origin, limits),
    }
}

/// The documents of `text` parsed in pieces, or `None` when it is small, cannot be cut, or a
/// piece fails.
fn in_pieces(text: &str, origin: &str, limits: Limits) -> Option<Vec<TrackedDoc>> {
    let threads = crate::par::threads();
    if threads < 2 || text.len() < PARALLEL_MIN_BYTES || text.len() > limits.max_bytes {
        return None;
    }
    let pieces = split_documents(text, threads * 2);
    if pieces.len() < 2 {
        return None;
    }
    let n = pieces.len();
    let share = Limits {
        max_nodes: limits.max_nodes / n,
        expansion_allowance: limits.expansion_allowance / n,
        ..limits
    };
    let parsed = crate::par::map_ordered(&pieces, threads, |(_, piece)| {
        parse_stream_tracked_with(piece, origin, share)
    });
    let mut out = Vec::new();
    for ((lines_before, _), docs) in pieces.iter().zip(parsed) {
        for mut doc in docs.ok()? {
            doc.line += lines_before;
            out.push(doc);
        }
    }
    Some(out)
}

/// Cuts `text` into about `want` pieces at document markers: (lines before the piece, piece).
fn split_documents(text: &str, want: usize) -> Vec<(usize, &str)> {
    let target = text.len() / want.max(1);
    let mut cuts = vec![0];
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with('%') {
            // A directive applies to the document after it: leave such a stream whole.
            return vec![(0, text)];
        }
        let body = line.trim_end_matches(['\n', '\r']);
        let marker = body == "---" || body.starts_with("--- ") || body.starts_with("---\t");
        if marker && offset - cuts[cuts.len() - 1] >= target && offset > 0 {
            cuts.push(offset);
        }
        offset += line.len();
    }
    let mut out = Vec::with_capacity(cuts.len());
    let mut lines_before = 0;
    for (i, &start) in cuts.iter().enumerate() {
        let end = cuts.get(i + 1).copied().unwrap_or(text.len());
        let piece = &text[start..end];
        out.push((lines_before, piece));
        lines_before += piece.bytes().filter(|b| *b == b'\n').count();
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn stream(docs: usize, pad: usize) -> String {
        let mut s = String::new();
        for i in 0..docs {
            s += &format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n  labels:\ndata:\n  a: &x \"{}\"\n  b: *x\n",
                "p".repeat(pad)
            );
        }
        s
    }

    #[test]
    fn pieces_give_what_one_parse_gives() {
        let text = stream(64, 8000);
        assert!(text.len() >= PARALLEL_MIN_BYTES);
        let whole = parse_stream_tracked_with(&text, "t", Limits::default()).unwrap();
        let pieces = split_documents(&text, 4);
        assert!(pieces.len() >= 3, "{}", pieces.len());
        let joined: String = pieces.iter().map(|p| p.1).collect();
        assert_eq!(joined, text);
        let split = in_pieces(&text, "t", Limits::default()).unwrap();
        assert_eq!(split.len(), whole.len());
        for (a, b) in split.iter().zip(&whole) {
            assert_eq!(a.value, b.value);
            assert_eq!(a.line, b.line);
            assert_eq!(a.empty_values, b.empty_values);
        }
    }

    #[test]
    fn a_failing_piece_gives_the_sequential_error() {
        let mut text = stream(64, 8000);
        text += "---\nkey: [unclosed\n";
        text += &stream(8, 10);
        let err = parse_stream_tracked(&text, "t").unwrap_err().to_string();
        let whole = parse_stream_tracked_with(&text, "t", Limits::default())
            .unwrap_err()
            .to_string();
        assert_eq!(err, whole);
    }

    #[test]
    fn directives_and_small_streams_stay_whole() {
        let text = format!("%YAML 1.2\n{}", stream(64, 8000));
        assert_eq!(split_documents(&text, 4).len(), 1);
        assert_eq!(split_documents("a: 1\n---\nb: 2\n", 4).len(), 2);
        assert!(in_pieces("a: 1\n---\nb: 2\n", "t", Limits::default()).is_none());
    }
}
