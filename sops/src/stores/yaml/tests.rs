//! Golden emission rules. Every expected text below is what `sops decrypt` (3.13.3) printed
//! for the input, encrypted with `--encrypted-regex '^nomatch$'` so that values and comments
//! stay as written (the integration tests in `tests/yaml_store.rs` re-check the rules against
//! the CLI at test time).

#![allow(clippy::unwrap_used)]

use super::*;
use crate::tree::{Entry, Value};

fn roundtrip(input: &str) -> String {
    let branches = load_plain(input.as_bytes()).unwrap();
    String::from_utf8(emit(&branches).unwrap().to_vec()).unwrap()
}

const GOLDEN: &[(&str, &str, &str)] = &[
    (
        "scalar_types",
        r##"i: 42
neg: -7
hex: 0x1F
oct: 0o17
old_oct: 0755
underscore: 1_000
f: 1.5
f_int: 1.0
f_big: 1e6
f_small: 0.00001
inf: .inf
ninf: -.Inf
nan: .nan
b: true
b2: False
n: null
tilde: ~
empty:
t: 2024-01-01
t2: 2024-01-01T10:20:30.5+02:00
t3: 2001-12-14 21:59:43.10
"##,
        r##"i: 42
neg: -7
hex: 31
oct: 15
old_oct: 493
underscore: 1000
f: 1.5
f_int: 1
f_big: 1e+06
f_small: 1e-05
inf: .inf
ninf: -.inf
nan: .nan
b: true
b2: false
"n": null
tilde: null
empty: null
t: 2024-01-01T00:00:00Z
t2: 2024-01-01T10:20:30.5+02:00
t3: 2001-12-14T21:59:43.1Z
"##,
    ),
    (
        "quoting",
        r##"yes: yes
no: 'no'
on: on
y: y
num: '123'
float: '1.5'
bool: 'true'
null_str: 'null'
empty: ''
lead: ' x'
trail: 'x '
colon: 'a: b'
hash: 'a #b'
hash2: '#a'
dash: '- a'
q: "it's"
dq: 'say "hi"'
base60: '1:30'
merge: '<<'
dots: '...'
dashes: '---'
url: http://example.com/a?b=c#d
tab: "a\tb"
ctrl: "\x01"
emoji: "\U0001F600"
accent: héllo
nbsp: "a\u00a0b"
bom: "\ufeffx"
"##,
        r##""yes": "yes"
"no": "no"
"on": "on"
"y": "y"
num: "123"
float: "1.5"
bool: "true"
null_str: "null"
empty: ""
lead: ' x'
trail: 'x '
colon: 'a: b'
hash: 'a #b'
hash2: '#a'
dash: '- a'
q: it's
dq: say "hi"
base60: "1:30"
merge: !!merge <<
dots: '...'
dashes: '---'
url: http://example.com/a?b=c#d
tab: "a\tb"
ctrl: "\x01"
emoji: "\U0001F600"
accent: héllo
nbsp: a b
bom: "\uFEFF\x78"
"##,
    ),
    (
        "multiline",
        r##"lit: |
  line1
  line2
strip: |-
  no newline
keep: |+
  two newlines

folded: >
  folded
  text
lead_space: "  indented\nsecond"
lead_nl: "\nfirst empty"
trail_space: "a \nb"
only_nl: "\n"
crlf: "a\r\nb"
"##,
        r##"lit: |
    line1
    line2
strip: no newline
keep: |+
    two newlines

folded: |
    folded text
lead_space: |4-
      indented
    second
lead_nl: |4-

    first empty
trail_space: "a \nb"
only_nl: |4+

crlf: "a\r\nb"
"##,
    ),
    (
        "nesting",
        r##"a:
  b:
    c: 1
  d:
  - x
  - y: 1
    z: 2
  - - deep
    - er
  - []
  - {}
e: []
f: {}
g: [1, [2, 3], {h: i}]
"##,
        r##"a:
    b:
        c: 1
    d:
        - x
        - "y": 1
          z: 2
        - - deep
          - er
        - []
        - {}
e: []
f: {}
g:
    - 1
    - - 2
      - 3
    - h: i
"##,
    ),
    (
        "comments",
        r##"# top

# head a
a: 1 # line a
b:
  # head c
  c: x # line c
  # foot c
# head d
d:
  - 1 # line 1
  # head 2
  - 2
  # foot list
# foot doc
"##,
        r##"# top
# head a
a: 1 # line a
b:
    # head c
    c: x # line c
    # foot c
# head d
d:
    - 1 # line 1
    # head 2
    - 2
    # foot list
# foot doc
"##,
    ),
    (
        "comments_only_map",
        r##"a:
  # only a comment
b: 1
"##,
        r##"a: null
# only a comment
b: 1
"##,
    ),
    (
        "multidoc",
        r##"# first
a: 1
---
b: 2
---
# third
c: [x]
"##,
        r##"# first
a: 1
---
b: 2
---
# third
c:
    - x
"##,
    ),
    (
        "empty_doc",
        r##"---
---
a: 1
"##,
        r##"{}
---
a: 1
"##,
    ),
    (
        "long_key",
        r##"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk: v
ok: 1
"##,
        r##"? kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk
: v
ok: 1
"##,
    ),
    (
        "multiline_key",
        r##"? |
  a
  b
: v
"##,
        r##"? |
    a
    b
: v
"##,
    ),
    (
        "anchors",
        r##"base: &b
  x: 1
copy: *b
merged:
  <<: *b
  y: 2
"##,
        r##"base:
    x: 1
copy:
    x: 1
merged:
    !!merge <<:
        x: 1
    "y": 2
"##,
    ),
    (
        "k8s_secret",
        r##"apiVersion: v1
kind: Secret # a secret
metadata:
  name: db
  labels:
    app.kubernetes.io/name: db
type: Opaque
data:
  password: aHVudGVyMg==
stringData:
  config.yaml: |
    port: 5432
    host: db.local
  port: "5432"
"##,
        r##"apiVersion: v1
kind: Secret # a secret
metadata:
    name: db
    labels:
        app.kubernetes.io/name: db
type: Opaque
data:
    password: aHVudGVyMg==
stringData:
    config.yaml: |
        port: 5432
        host: db.local
    port: "5432"
"##,
    ),
];
#[test]
fn golden_emission_matches_sops() {
    for (name, input, want) in GOLDEN {
        assert_eq!(roundtrip(input), *want, "case {name}");
    }
}

#[test]
fn sops_output_reads_back_to_itself() {
    for (name, _, want) in GOLDEN {
        assert_eq!(roundtrip(want), *want, "case {name}");
    }
}

#[test]
fn binary_values_are_written_as_base64() {
    // `sops decrypt` output for `!!binary` inputs (0xFF, bytes 128..255, "hello").
    let input = "a: !!binary /w==\nb: !!binary gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vsLGys7S1tre4ubq7vL2+v8DBwsPExcbHyMnKy8zNzs/Q0dLT1NXW19jZ2tvc3d7f4OHi4+Tl5ufo6err7O3u7/Dx8vP09fb3+Pn6+/z9/g==\nc: !!binary aGVsbG8=\n";
    let want = "a: !!binary /w==\nb: !!binary |\n    gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vsLGys7\n    S1tre4ubq7vL2+v8DBwsPExcbHyMnKy8zNzs/Q0dLT1NXW19jZ2tvc3d7f4OHi4+Tl5ufo\n    6err7O3u7/Dx8vP09fb3+Pn6+/z9/g==\nc: hello\n";
    let b = load_plain(input.as_bytes()).unwrap();
    assert_eq!(b[0][0], Entry::Pair("a".into(), Value::Bytes(vec![0xff])));
    assert_eq!(roundtrip(input), want);
}

#[test]
fn comments_become_items_in_source_order() {
    let b = load_plain(b"# top\na: 1 # on a\nl:\n  # head x\n  - x # on x\n  - y\n  # foot\n#ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:comment]\nz: 2\n").unwrap();
    assert_eq!(
        b,
        vec![vec![
            Entry::Comment(" top".into()),
            Entry::LineComment(" on a".into()),
            Entry::Pair("a".into(), Value::Int(1)),
            Entry::Pair(
                "l".into(),
                Value::List(vec![
                    Value::Comment(" head x".into()),
                    Value::LineComment(" on x".into()),
                    Value::Str("x".into()),
                    Value::Str("y".into()),
                    Value::Comment(" foot".into()),
                ])
            ),
            Entry::Comment("ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:comment]".into()),
            Entry::Pair("z".into(), Value::Int(2)),
        ]]
    );
}

#[test]
fn line_comments_follow_go_yaml_placement() {
    // A comment that lost its line flag (sops drops it when it decrypts one) is written
    // above; a line comment before a collection value ends up on the next key's line, as
    // go-yaml writes it (`x: &x [1]` / `b: *x # c` / `d: 1` gives `d: 1 # c`).
    let b = vec![vec![
        Entry::Comment(" was inline".into()),
        Entry::Pair("a".into(), Value::Int(1)),
        Entry::LineComment(" c".into()),
        Entry::Pair(
            "b".into(),
            Value::List(vec![
                Value::LineComment(" x".into()),
                Value::Str("x".into()),
            ]),
        ),
        Entry::Pair("d".into(), Value::Int(1)),
    ]];
    let out = emit(&b).unwrap();
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        "# was inline\na: 1\nb:\n    - x # x\nd: 1 # c\n"
    );
    assert_eq!(
        roundtrip("x: &x [1]\nb: *x # c\nd: 1\n"),
        "x:\n    - 1\nb:\n    - 1\nd: 1 # c\n"
    );
}

#[test]
fn scalars_take_go_yaml_types() {
    let b = load_plain(b"i: 0x10\nf: 2.5\nb: false\nn: ~\nt: 2024-02-29\nq: \"12\"\ns: '~'\ntagged: !!str 3\nfl: !!float 2\nbad: !!int x\n---\nbad: !!int x\n")
        .unwrap_err();
    // A tagged scalar that does not fit its tag fails in the first document …
    assert!(b.to_string().contains("cannot decode"), "{b}");
    let b = load_plain(b"i: 0x10\nf: 2.5\nb: false\nn: ~\nt: 2024-02-29\nq: \"12\"\ns: '~'\ntagged: !!str 3\nfl: !!float 2\n---\nbad: !!int x\n").unwrap();
    let v: Vec<Value> = b[0]
        .iter()
        .map(|e| match e {
            Entry::Pair(_, v) => v.clone(),
            _ => Value::Null,
        })
        .collect();
    assert_eq!(
        v,
        vec![
            Value::Int(16),
            Value::Float(2.5),
            Value::Bool(false),
            Value::Null,
            Value::Time("2024-02-29T00:00:00Z".into()),
            Value::Str("12".into()),
            Value::Str("~".into()),
            Value::Str("3".into()),
            Value::Float(2.0),
        ]
    );
    // … and becomes null in later ones (sops ignores the decoding error there).
    assert_eq!(b[1], vec![Entry::Pair("bad".into(), Value::Null)]);
}

#[test]
fn load_takes_the_first_documents_sops_block_and_strips_all() {
    let doc = "a: 1\nsops:\n    # a comment\n    version: 3.13.3\n    age:\n        - recipient: x\n          enc: y\n---\nb: 2\nsops:\n    version: 3.13.3\n";
    let (branches, meta) = load(doc.as_bytes()).unwrap();
    assert_eq!(
        branches,
        vec![
            vec![Entry::Pair("a".into(), Value::Int(1))],
            vec![Entry::Pair("b".into(), Value::Int(2))]
        ]
    );
    assert_eq!(meta.get("version"), Some(&Value::Str("3.13.3".into())));
    let Some(Value::Map(m)) = Some(&meta) else {
        unreachable!()
    };
    assert!(
        m.iter().all(|e| matches!(e, Entry::Pair(..))),
        "comments are left out"
    );
}

#[test]
fn load_errors() {
    let err = |s: &str| load(s.as_bytes()).unwrap_err().to_string();
    assert!(matches!(load(b"a: 1\n"), Err(SopsError::NoMetadata)));
    assert!(matches!(
        load(b"a: 1\n---\nsops: {version: x}\n"),
        Err(SopsError::NoMetadata)
    ));
    assert!(matches!(load(b""), Err(SopsError::NoMetadata)));
    assert_eq!(err("sops: 1\n"), "Found sops entry that is not a mapping");
    assert_eq!(err("# nothing\n"), "EOF");
    assert_eq!(
        err("- a\n"),
        "yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[string]interface {}"
    );
    assert_eq!(
        err("a: 1\n---\n- a\n"),
        "Error unmarshaling input YAML: YAML documents that are sequences are not supported"
    );
    assert_eq!(
        err("a: 1\n---\nscalar\n"),
        "Error unmarshaling input YAML: YAML documents that are values are not supported"
    );
    assert_eq!(
        err("a: 1\nb: 2\na: 3\n"),
        "yaml: unmarshal errors:\n  line 3: mapping key \"a\" already defined at line 1"
    );
    // Later documents may repeat keys (sops only checks the first one).
    assert_eq!(load_plain(b"x: 1\n---\na: 1\na: 2\n").unwrap()[1].len(), 2);
    assert_eq!(
        err("1: a\n"),
        "Tree contains a non-string key (type int). Only string keys are supported"
    );
    assert_eq!(
        err("a:\n\tb: 1\n"),
        "yaml: line 2: found character that cannot start any token"
    );
    assert_eq!(
        err("a: b: c\n"),
        "yaml: mapping values are not allowed in this context"
    );
    assert_eq!(err("a: *nope\n"), "yaml: unknown anchor 'nope' referenced");
    assert_eq!(
        err("a: \"\x01\"\n"),
        "yaml: control characters are not allowed"
    );
    let e = load(b"a: \xff\n").unwrap_err().to_string();
    assert!(e.starts_with("yaml: invalid UTF-8"), "{e}");
    // No error message carries a value.
    assert!(!err("a: !!bool sekrit\n").contains("sekrit"));
}

#[test]
fn alias_expansion_is_bounded() {
    let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        doc.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let e = load_plain(doc.as_bytes()).unwrap_err().to_string();
    assert!(e.contains("excessive aliasing"), "{e}");
    let e = load_plain(b"a: &x [1, *x]\n").unwrap_err().to_string();
    assert!(e.contains("contains itself"), "{e}");
    let e = load_plain(b"a: 1\n---\nb: &x {c: *x}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("contains itself"), "{e}");
    // Ordinary reuse is fine, also across documents.
    let b = load_plain(b"a: &x {k: v}\nb: *x\n---\nc: *x\n").unwrap();
    assert_eq!(
        b[1][0],
        Entry::Pair(
            "c".into(),
            Value::Map(vec![Entry::Pair("k".into(), Value::Str("v".into()))])
        )
    );
}

#[test]
fn nesting_is_bounded() {
    let flow = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
    let block = |n: usize| {
        let mut s = String::new();
        for i in 0..n {
            s.push_str(&" ".repeat(i));
            s.push_str("k:\n");
        }
        s
    };
    assert!(load_plain(flow(200).as_bytes()).is_ok());
    assert!(load_plain(block(200).as_bytes()).is_ok());
    for doc in [flow(300), block(300), flow(100_000)] {
        let e = load_plain(doc.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("nest") || e.contains("depth"), "{e}");
    }
    // A 200-deep tree is emitted too.
    let b = load_plain(block(200).as_bytes()).unwrap();
    assert!(emit(&b).is_ok());
}

#[test]
fn truncated_and_mangled_input_never_panics() {
    let doc = GOLDEN
        .iter()
        .map(|(_, input, _)| *input)
        .collect::<Vec<_>>()
        .join("---\n");
    let bytes = doc.as_bytes();
    for cut in 0..bytes.len() {
        let _ = load_plain(&bytes[..cut]);
        let mut m = bytes.to_vec();
        m[cut] = b"\n:-#[{'\"\t|>&*!?"[cut % 15];
        if let Ok(b) = load_plain(&m) {
            let _ = emit(&b);
        }
    }
}

#[test]
fn emit_rejects_a_comment_as_map_value() {
    let b = vec![vec![Entry::Pair("a".into(), Value::Comment("x".into()))]];
    assert!(emit(&b).is_err());
}

#[test]
fn empty_input_has_no_branches() {
    assert!(load_plain(b"").unwrap().is_empty());
    assert_eq!(emit(&[]).unwrap().len(), 0);
    assert_eq!(&*emit(&[vec![]]).unwrap(), b"{}\n");
}
