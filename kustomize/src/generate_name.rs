//! Objects named by `metadata.generateName` alone (an opt-in extension, used for Argo CD hooks,
//! issue 17). kustomize refuses such an object ("missing metadata.name"): its ids need a name.
//! With [`crate::BuildOptions::generate_names`], the loader gives the object a placeholder name,
//! `<generateName><token>`, and records the token in the annotation [`GENERATE_NAME_ANNOTATION`];
//! the build transforms it like any other object (namespace, prefix and suffix, labels), and
//! [`restore_generate_names`] turns the placeholder back into a `generateName` at the end. The
//! token is made from the file and the object's place in it, so ids never collide and a build is
//! reproducible.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The annotation holding the placeholder token while the object is built.
pub const GENERATE_NAME_ANNOTATION: &str = "rflux.dev/generate-name";

/// Names `obj` (which has no `metadata.name`) from its `metadata.generateName`, when that is a
/// non-empty string: the `index`-th object of the file `origin`. False when there is none.
pub(crate) fn name_placeholder(obj: &mut Value, origin: &str, index: usize) -> bool {
    let Some(prefix) = obj
        .pointer("/metadata/generateName")
        .and_then(Value::as_str)
        .filter(|g| !g.is_empty())
        .map(str::to_string)
    else {
        return false;
    };
    let file = hex::encode(&Sha256::digest(origin.as_bytes())[..4]);
    let token = format!(".rflux-generate-name-{file}-{index}");
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    meta.insert("name".into(), Value::String(format!("{prefix}{token}")));
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    if let Some(a) = annotations.as_object_mut() {
        a.insert(GENERATE_NAME_ANNOTATION.into(), Value::String(token));
    }
    true
}

/// Turns every placeholder name back into a `generateName`: the built name without its token
/// (so a `namePrefix` or `nameSuffix` stays in the prefix), with `metadata.name` and the
/// annotation removed (and `metadata.annotations` when nothing else is left in it).
pub fn restore_generate_names<'a>(objects: impl IntoIterator<Item = &'a mut Value>) {
    for obj in objects {
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        let Some(token) = meta
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
            .and_then(|a| a.remove(GENERATE_NAME_ANNOTATION))
        else {
            continue;
        };
        if meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            meta.remove("annotations");
        }
        let token = token.as_str().unwrap_or_default();
        let name = match meta.remove("name") {
            Some(Value::String(n)) => n,
            _ => continue,
        };
        let prefix = if token.is_empty() {
            name
        } else {
            name.replacen(token, "", 1)
        };
        meta.insert("generateName".into(), Value::String(prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_placeholder_is_restored_with_the_prefix_and_suffix_it_gained() {
        let mut o = json!({"kind": "Job", "metadata": {"generateName": "up-"}});
        assert!(name_placeholder(&mut o, "/a/f.yaml", 0));
        let name = o["metadata"]["name"].as_str().unwrap().to_string();
        assert!(name.starts_with("up-.rflux-generate-name-"), "{name}");
        o["metadata"]["name"] = json!(format!("p-{name}-s"));
        restore_generate_names([&mut o]);
        assert_eq!(
            o,
            json!({"kind": "Job", "metadata": {"generateName": "p-up--s"}})
        );
    }

    #[test]
    fn placeholders_differ_by_file_and_place_and_other_annotations_stay() {
        let mut a = json!({"metadata": {"generateName": "g-", "annotations": {"x": "1"}}});
        let mut b = json!({"metadata": {"generateName": "g-"}});
        let mut c = json!({"metadata": {"generateName": "g-"}});
        name_placeholder(&mut a, "/f.yaml", 0);
        name_placeholder(&mut b, "/f.yaml", 1);
        name_placeholder(&mut c, "/other.yaml", 1);
        let names: Vec<&str> = [&a, &b, &c]
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_ne!(names[0], names[1]);
        assert_ne!(names[1], names[2]);
        restore_generate_names([&mut a]);
        assert_eq!(
            a,
            json!({"metadata": {"annotations": {"x": "1"}, "generateName": "g-"}})
        );
    }

    #[test]
    fn no_generate_name_means_no_placeholder_and_named_objects_are_untouched() {
        let mut o = json!({"metadata": {"generateName": ""}});
        assert!(!name_placeholder(&mut o, "/f", 0));
        let mut named = json!({"metadata": {"name": "n", "generateName": "g-"}});
        let before = named.clone();
        restore_generate_names([&mut named]);
        assert_eq!(named, before);
    }
}
