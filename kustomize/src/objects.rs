//! Reading resource files into items: every document of the file, `List` objects flattened.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::error::{KustomizeError, Location, Result};
use crate::generate_name::name_placeholder;
use crate::item::Item;
use crate::loader::Loader;
use crate::yaml::positions::positions;
use crate::yaml::{PathSeg, parse_stream_tracked};

/// `path` relative to the directory `base` (both absolute, symlinks resolved).
pub(crate) fn relative_to(base: &Path, path: &Path) -> String {
    let b: Vec<_> = base.components().collect();
    let p: Vec<_> = path.components().collect();
    let common = b.iter().zip(&p).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &p[common..] {
        out.push(c.as_os_str());
    }
    out.display().to_string()
}

/// Reads a resource file into items; the objects count against the build's budget. An
/// invalid object is an error placed at the line of its document (or `List` item).
pub(crate) fn load_items(ldr: &Loader, entry: &str) -> Result<Vec<Item>> {
    let (path, text) = ldr.read_text(entry)?;
    let origin = path.display().to_string();
    let shared: Arc<Path> = Arc::from(path.as_path());
    let mut out = Vec::new();
    for doc in parse_stream_tracked(&text, &origin)? {
        let first = out.len();
        let mut within = Vec::new();
        if let Err(e) = flatten(
            doc.value,
            doc.empty_values,
            (&origin, &path, ldr.generate_names()),
            &mut within,
            &mut out,
        ) {
            let line = item_line(&text, doc.line, &within);
            let at = Location {
                file: path.clone(),
                line,
                col: None,
            };
            return Err(e.at(at, ""));
        }
        for item in &mut out[first..] {
            item.source = Some((Arc::clone(&shared), doc.line));
        }
    }
    ldr.meter().add_resources(out.len())?;
    Ok(out)
}

/// The line of the object at `within` (a path of `List` items) in the document starting on
/// `doc_line`; the document's line when it cannot be found.
fn item_line(text: &str, doc_line: usize, within: &[PathSeg]) -> usize {
    if within.is_empty() {
        return doc_line;
    }
    positions(text)
        .into_iter()
        .find(|d| d.line == doc_line)
        .and_then(|d| d.get(within))
        .map_or(doc_line, |p| p.0)
}

/// Reads a resource file: every document, `List` kinds flattened.
pub(crate) fn load_objects(ldr: &Loader, entry: &str) -> Result<Vec<Value>> {
    Ok(load_items(ldr, entry)?
        .into_iter()
        .map(|i| i.res.obj)
        .collect())
}

/// Adds a document's objects to `out`. On error, `within` is the path of the `List` item that
/// failed.
/// `from` is (origin, path, whether `generateName` alone names an object).
fn flatten(
    mut doc: Value,
    empties: Vec<Vec<PathSeg>>,
    from: (&str, &Path, bool),
    within: &mut Vec<PathSeg>,
    out: &mut Vec<Item>,
) -> Result<()> {
    let (origin, path, generate_names) = from;
    let invalid = |m: String| KustomizeError::InvalidResource {
        file: path.to_path_buf(),
        origin: origin.to_string(),
        message: m,
    };
    let Value::Object(_) = &doc else {
        return Err(invalid(format!("expected a mapping, got {doc}")));
    };
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind.ends_with("List") && doc.get("items").is_some() {
        if let Some(Value::Array(items)) = doc.get("items") {
            for (i, it) in items.clone().into_iter().enumerate() {
                let sub: Vec<Vec<PathSeg>> = empties
                    .iter()
                    .filter(|p| {
                        p.len() > 2
                            && p[0] == PathSeg::Key("items".into())
                            && p[1] == PathSeg::Index(i)
                    })
                    .map(|p| p[2..].to_vec())
                    .collect();
                within.extend([PathSeg::Key("items".into()), PathSeg::Index(i)]);
                flatten(it, sub, from, within, out)?;
                within.truncate(within.len() - 2);
            }
        }
        return Ok(());
    }
    if kind.is_empty() {
        return Err(invalid("missing 'kind'".to_string()));
    }
    if doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && !(generate_names && name_placeholder(&mut doc, origin, out.len()))
    {
        return Err(invalid(format!(
            "missing metadata.name in object of kind '{kind}'"
        )));
    }
    let mut item = Item::new(doc);
    item.empty_values = empties;
    out.push(item);
    Ok(())
}
