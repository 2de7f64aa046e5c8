//! Placing errors at the line that caused them.
//!
//! Positions are only needed when a build fails, so nothing here runs on the way to a
//! successful build: a kustomization keeps its text, and when one of its fields or entries
//! fails, [`positions`] walks the text's YAML events again to find the line of that field or
//! entry. Resource files record only the line each document starts on while they are parsed
//! (`TrackedDoc::line`), which duplicate-id errors use.
//!
//! The fields of a kustomization are run by code spread over several modules. Rather than
//! threading an entry index through all of it, a loop over a field's entries iterates
//! [`Kustomization::entries`], which records on the kustomization the entry being worked
//! on (its cursor) and forgets it when the loop ends. When an error leaves the loop early, the
//! cursor still names the entry, and [`Kustomization::locate`] (called by the walk, which
//! runs every field) places the error there.

use std::path::Path;

use serde_json::Value;

use crate::error::{KustomizeError, Location};
use crate::item::id_string;
use crate::kustomization::{KNOWN_FIELDS, Kustomization, field_index};
use crate::loader::Loader;
use crate::resource::id_of;
use crate::yaml::positions::{DocPositions, positions};
use crate::yaml::{PathSeg, parse_stream_tracked};

/// Whether an error is placed at all: running out of the build's budget is not caused by one
/// line.
fn locatable(e: &KustomizeError) -> bool {
    !matches!(e, KustomizeError::Budget(_))
}

/// A short name of an entry: `field[i]`, with a string entry's first line or an object
/// entry's `path` or `name`, unless the message already names it.
fn entry_context(field: &str, i: usize, entry: Option<&Value>, message: &str) -> String {
    let mut s = format!("{field}[{i}]");
    let quoted = |t: &str| {
        let first = t.lines().next().unwrap_or("");
        let mut short: String = first.chars().take(60).collect();
        if short.len() < t.len() {
            short.push('…');
        }
        format!("'{short}'")
    };
    match entry {
        Some(Value::String(t)) if !message.contains(&format!("'{t}'")) => {
            s.push(' ');
            s.push_str(&quoted(t));
        }
        Some(Value::Object(m)) => {
            for key in ["path", "name"] {
                if let Some(Value::String(t)) = m.get(key) {
                    s.push_str(&format!(" ({key} {})", quoted(t)));
                    break;
                }
            }
        }
        _ => {}
    }
    s
}

impl Kustomization {
    /// The positions of the kustomization's document, when it was read from a file.
    fn doc_positions(&self) -> Option<DocPositions> {
        let text = self.text.as_deref()?;
        positions(text).into_iter().next()
    }

    fn location(&self, line: usize) -> Location {
        Location {
            file: self.file.clone(),
            line,
            col: None,
        }
    }

    /// Places `e` at the key of `field`.
    pub(crate) fn at_field(&self, field: &str, e: KustomizeError) -> KustomizeError {
        if !locatable(&e) {
            return e;
        }
        let spot = self
            .doc_positions()
            .and_then(|d| d.get(&[PathSeg::Key(field.to_string())]));
        match spot {
            Some((line, _)) => e.at(self.location(line), ""),
            None => e,
        }
    }

    /// Places `e` at entry `i` of the list `field`. An entry the file does not have (one
    /// Flux appended from the `Kustomization` spec) gives no location.
    pub(crate) fn at_entry(
        &self,
        ldr: Option<&Loader>,
        field: &str,
        i: usize,
        e: KustomizeError,
    ) -> KustomizeError {
        if !locatable(&e) {
            return e;
        }
        let Some(doc) = self.doc_positions() else {
            return e;
        };
        let spot = doc.get(&[PathSeg::Key(field.to_string()), PathSeg::Index(i)]);
        let Some((line, _)) = spot else {
            return e;
        };
        let entry = self.fields.get(field).and_then(|v| v.get(i));
        let e = match ldr {
            Some(ldr) => patch_file_location(ldr, field, entry, e),
            None => e,
        };
        let context = entry_context(field, i, entry, &e.to_string());
        e.at(self.location(line), context)
    }

    /// Places an error that arose while running this kustomization's fields: at the entry a
    /// loop over [`Kustomization::entries`] was working on, else at the field or entry the
    /// error names. An error already placed, or from another file, is returned as it is.
    pub(crate) fn locate(&self, ldr: &Loader, e: KustomizeError) -> KustomizeError {
        if let Some((f, i)) = self.cursor.take()
            && let Some(field) = KNOWN_FIELDS.get(f)
        {
            return self.at_entry(Some(ldr), field, i, e);
        }
        let mine = |file: &Path| file == self.file;
        match &e {
            KustomizeError::Field { file, field, .. }
            | KustomizeError::Patch { file, field, .. }
            | KustomizeError::PatchTargetNotFound { file, field, .. }
                if mine(file) =>
            {
                let field = field.clone();
                self.at_field(&field, e)
            }
            KustomizeError::Unsupported {
                file, field, entry, ..
            } if mine(file) => {
                let found = self
                    .fields
                    .get(field.as_str())
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().position(|v| v.as_str() == Some(entry)));
                let field = field.clone();
                match found {
                    Some(i) => self.at_entry(Some(ldr), &field, i, e),
                    None => self.at_field(&field, e),
                }
            }
            KustomizeError::Generator { file, name, .. } if mine(file) => {
                for field in ["configMapGenerator", "secretGenerator"] {
                    let found = self
                        .fields
                        .get(field)
                        .and_then(Value::as_array)
                        .and_then(|a| {
                            a.iter()
                                .position(|g| g.get("name").and_then(Value::as_str) == Some(name))
                        });
                    if let Some(i) = found {
                        return self.at_entry(Some(ldr), field, i, e);
                    }
                }
                e
            }
            KustomizeError::Transform { context, .. } if field_index(context).is_some() => {
                let field = context.clone();
                self.at_field(&field, e)
            }
            _ => e,
        }
    }
}

/// For a patch read from a file that failed, places the error at the patch document too: the
/// one naming the target that was not found, or the file's only document.
fn patch_file_location(
    ldr: &Loader,
    field: &str,
    entry: Option<&Value>,
    e: KustomizeError,
) -> KustomizeError {
    let target = match &e {
        KustomizeError::PatchTargetNotFound { target, .. } => Some(target.clone()),
        KustomizeError::Patch { .. } => None,
        _ => return e,
    };
    let path = match (field, entry) {
        ("patchesStrategicMerge", Some(Value::String(p))) => p,
        ("patches" | "patchesJson6902", Some(v)) => match v.get("path").and_then(Value::as_str) {
            Some(p) => p,
            None => return e,
        },
        _ => return e,
    };
    if !ldr.join(path).is_file() {
        return e;
    }
    // Read again through the loader (its fence and budget hold), only on this error path.
    let Ok((file, text)) = ldr.read_text(path) else {
        return e;
    };
    let Ok(docs) = parse_stream_tracked(&text, &file.display().to_string()) else {
        return e;
    };
    let line = match target {
        Some(t) => docs
            .iter()
            .find(|d| id_string(&id_of(&d.value)) == t)
            .map(|d| d.line),
        None if docs.len() == 1 => Some(docs[0].line),
        None => None,
    };
    match line {
        Some(line) => e.at(
            Location {
                file,
                line,
                col: None,
            },
            "",
        ),
        None => e,
    }
}
