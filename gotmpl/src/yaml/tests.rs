//! Unit tests of the go-yaml v2 printer.

use super::*;

fn y(j: serde_json::Value) -> String {
    marshal(&Value::from_json(&j)).unwrap()
}

#[test]
fn natural_key_order() {
    let mut keys = vec!["b10", "b9", "B", "_a", "a0", "a00", "10", "2"];
    keys.sort_by(|a, b| {
        if key_less(a, b) {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    });
    assert_eq!(keys, vec!["_a", "2", "10", "B", "a0", "a00", "b9", "b10"]);
}

#[test]
fn quoting() {
    assert_eq!(y(serde_json::json!("true")), "\"true\"\n");
    assert_eq!(y(serde_json::json!("a: b")), "'a: b'\n");
    assert_eq!(y(serde_json::json!("plain text")), "plain text\n");
    assert_eq!(y(serde_json::json!("x\ny")), "|-\n  x\n  y\n");
    assert_eq!(y(serde_json::json!({"k": "it's"})), "k: it's\n");
    assert_eq!(y(serde_json::json!({"k": "'q"})), "k: '''q'\n");
}

#[test]
fn structure() {
    assert_eq!(
        y(serde_json::json!({"a": [{"b": [1]}], "c": {}})),
        "a:\n- b:\n  - 1\nc: {}\n"
    );
    assert_eq!(y(serde_json::json!([[1, 2], []])), "- - 1\n  - 2\n- []\n");
}

#[test]
fn long_plain_strings_fold() {
    let s = "word ".repeat(30).trim_end().to_string();
    let out = y(serde_json::json!({ "k": s }));
    assert!(out.lines().count() > 1, "{out}");
    assert!(out.lines().nth(1).unwrap().starts_with("  word"));
}
