//! Where the keys and sequence items of a YAML text are: the line and column of each, down to
//! a small depth, found by walking the text's events again. Only a failing build asks (see
//! `crate::located`), so nothing here runs on the way to a successful one.

use yaml_rust2::parser::{Event, Parser};

use super::PathSeg;

/// How deep [`positions`] records keys and sequence items (`patches[0].target.name` is 4).
const MAX_POSITION_DEPTH: usize = 4;

/// The positions of one document of a YAML text.
#[derive(Debug, Default)]
pub(crate) struct DocPositions {
    /// 1-based line of the document's first node.
    pub line: usize,
    /// Mapping keys (the key's position) and sequence items (the item's first character),
    /// with 1-based line and column.
    spots: Vec<(Vec<PathSeg>, usize, usize)>,
}

impl DocPositions {
    /// Line and column of the key or item at `path`; the first key is matched without regard
    /// to case (kustomization field names are).
    pub(crate) fn get(&self, path: &[PathSeg]) -> Option<(usize, usize)> {
        self.spots
            .iter()
            .find(|(p, _, _)| {
                p.len() == path.len()
                    && p.iter()
                        .zip(path)
                        .enumerate()
                        .all(|(i, (a, b))| match (a, b) {
                            (PathSeg::Key(a), PathSeg::Key(b)) if i == 0 => {
                                a.eq_ignore_ascii_case(b)
                            }
                            _ => a == b,
                        })
            })
            .map(|(_, l, c)| (*l, *c))
    }
}

/// A collection being walked.
enum Open {
    Seq(usize),
    /// The key whose value is being read; `None` while a key is expected.
    Map(Option<String>),
}

/// The positions of every document of `text`, empty documents included. A syntax error ends
/// the walk (what was found before it is kept).
pub(crate) fn positions(text: &str) -> Vec<DocPositions> {
    let mut docs: Vec<DocPositions> = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut parser = Parser::new_from_str(text);
    let mut doc_open = false;
    while let Ok((ev, mark)) = parser.next_token() {
        let line = mark.line();
        let col = mark.col() + 1;
        let starts_node = matches!(
            ev,
            Event::Scalar(..)
                | Event::Alias(_)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
        );
        if starts_node {
            if !doc_open {
                doc_open = true;
                docs.push(DocPositions {
                    line,
                    spots: Vec::new(),
                });
            }
            let mut path: Vec<PathSeg> = Vec::new();
            let mut complex_key = false;
            for o in stack.iter().take(stack.len().saturating_sub(1)) {
                match o {
                    Open::Seq(i) => path.push(PathSeg::Index(*i)),
                    Open::Map(Some(k)) => path.push(PathSeg::Key(k.clone())),
                    Open::Map(None) => complex_key = true,
                }
            }
            let seg = match stack.last() {
                Some(Open::Seq(i)) => Some(PathSeg::Index(*i)),
                Some(Open::Map(None)) => match &ev {
                    Event::Scalar(s, ..) => Some(PathSeg::Key(s.clone())),
                    _ => None,
                },
                _ => None,
            };
            // inside a complex key, `path` is missing the key's own step: record nothing
            if let Some(seg) = seg.filter(|_| !complex_key)
                && path.len() < MAX_POSITION_DEPTH
                && let Some(doc) = docs.last_mut()
            {
                path.push(seg);
                doc.spots.push((path, line, col));
            }
        }
        match ev {
            Event::SequenceStart(..) => stack.push(Open::Seq(0)),
            Event::MappingStart(..) => stack.push(Open::Map(None)),
            Event::SequenceEnd | Event::MappingEnd => {
                stack.pop();
                finish_node(&mut stack, String::new());
            }
            Event::Scalar(s, ..) => finish_node(&mut stack, s),
            Event::Alias(_) => finish_node(&mut stack, String::new()),
            Event::DocumentStart => {
                stack.clear();
                doc_open = false;
            }
            Event::DocumentEnd => {
                if !doc_open {
                    docs.push(DocPositions {
                        line,
                        spots: Vec::new(),
                    });
                }
                doc_open = true;
            }
            Event::StreamEnd => break,
            _ => {}
        }
    }
    docs
}

/// A node ended: the collection holding it moves on.
fn finish_node(stack: &mut [Open], text: String) {
    match stack.last_mut() {
        Some(Open::Seq(i)) => *i += 1,
        Some(Open::Map(key)) => {
            *key = match key {
                None => Some(text),
                Some(_) => None,
            }
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(d: &DocPositions, path: &[PathSeg]) -> Option<(usize, usize)> {
        d.get(path)
    }

    fn key(s: &str) -> PathSeg {
        PathSeg::Key(s.to_string())
    }

    #[test]
    fn keys_and_items_have_lines() {
        let text = "# c\nresources:\n- a.yaml\n-   b.yaml\npatches:\n- path: p.yaml\n  target:\n    kind: X\n- patch: |\n    a: b\n";
        let docs = positions(text);
        assert_eq!(docs.len(), 1);
        let d = &docs[0];
        assert_eq!(d.line, 2);
        assert_eq!(at(d, &[key("resources")]), Some((2, 1)));
        assert_eq!(at(d, &[key("RESOURCES")]), Some((2, 1)));
        assert_eq!(at(d, &[key("resources"), PathSeg::Index(0)]), Some((3, 3)));
        assert_eq!(at(d, &[key("resources"), PathSeg::Index(1)]), Some((4, 5)));
        // a block mapping item is placed where the parser sees it start: its first key's colon
        let line = |p: &[PathSeg]| at(d, p).map(|p| p.0);
        assert_eq!(line(&[key("patches"), PathSeg::Index(0)]), Some(6));
        assert_eq!(line(&[key("patches"), PathSeg::Index(1)]), Some(9));
        let name = [
            key("patches"),
            PathSeg::Index(0),
            key("target"),
            key("kind"),
        ];
        assert_eq!(at(d, &name), Some((8, 5)));
    }

    #[test]
    fn documents_of_a_stream() {
        let text = "a: 1\n---\n---\n# x\nkind: B\nitems:\n- x: 1\n- {y: 2}\n";
        let docs = positions(text);
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[0].line, 1);
        assert_eq!(docs[2].line, 5);
        let item = [key("items"), PathSeg::Index(1)];
        assert_eq!(docs[2].get(&item).map(|p| p.0), Some(8));
    }

    #[test]
    fn complex_keys_and_flow_collections() {
        let text = "? [a, b]\n: v\nc: {d: [1, 2]}\n";
        let d = &positions(text)[0];
        assert_eq!(at(d, &[key("c")]), Some((3, 1)));
        assert_eq!(
            at(d, &[key("c"), key("d"), PathSeg::Index(1)]),
            Some((3, 12))
        );
    }
}
