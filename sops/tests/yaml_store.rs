//! The YAML store against the real `sops` CLI: files encrypted by `sops encrypt` load with
//! their `sops` block and `ENC[…]` values; our emission of the plaintext tree equals what
//! `sops decrypt` prints; and `rflux_sops::decrypt` of the encrypted file equals
//! `sops decrypt` byte for byte (default rules and Flux's `--encrypted-regex`), for a fixed
//! corpus and for generated documents.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use regex::Regex;
use rflux_sops::stores::yaml;
use rflux_sops::tree::{Entry, Value};
use rflux_sops::{Format, Keys, MacCheck};

/// Plaintext inputs covering go-yaml's reading and writing rules.
const CASES: &[(&str, &str)] = &[
    (
        "nested_maps",
        "a:\n  b:\n    c: deep\n    d: 1\n  e: x\nf:\n    g: indent four\n",
    ),
    (
        "lists_of_maps",
        "items:\n  - name: a\n    value: 1\n  - name: b\n    nested:\n      - x: 1\n        y: 2\nindentless:\n- k: v\n- plain\n",
    ),
    (
        "lists_of_lists",
        "m:\n  - - a\n    - b\n  - - - c\n  - []\n  - [d, [e, f]]\n",
    ),
    (
        "comments_everywhere",
        "# top comment\n\n# head of a\na: 1 # line of a\nb:\n  # head of c\n  c: x # line of c\n  # foot of c\n# head of l\nl:\n  # head of first\n  - one # line of one\n  - two\n  # foot of list\n\n# after a blank line\nz: last\n# trailing comment\n",
    ),
    (
        "comment_indentation",
        "a:\n  b:\n    c: 1\n    # foot at c\n  # foot at b\n# foot at a\nd:\n  - x\n    # deeper than x\n  # at the dash\ne: 2\n",
    ),
    (
        "quoting",
        "yes: yes\nno: 'no'\non: on\noff: off\ny: y\nnum: '123'\nhex: '0x1F'\nfloat: '1.5'\nbool: 'true'\nnull_str: 'null'\ntilde: '~'\nempty: ''\nlead: ' x'\ntrail: 'x '\ncolon: 'a: b'\nhash: 'a #b'\nhash_start: '#a'\ndash: '- a'\nq: \"it's\"\ndq: 'say \"hi\"'\nbase60: '1:30'\nmerge: '<<'\ndots: '...'\ntriple_dash: '---'\nat: '@x'\nbacktick: '`x'\npct: '%x'\nbang: '!x'\namp: '&x'\nstar: '*x'\npipe: '|x'\ngt: '>x'\nbrace: '{x'\nbracket: '[x'\nquestion: '? x'\nurl: http://example.com/a?b=c#d\nplain words: hello world\n",
    ),
    (
        "multiline_strings",
        "lit: |\n  line1\n  line2\nstrip: |-\n  no newline\n  at end\nkeep: |+\n  keeps\n\nfolded: >\n  folded\n  text\n\n  para\nindent_ind: |2\n    two extra\nlead_space: \"  indented\\nsecond\"\nlead_nl: \"\\nfirst empty\"\ntrail_space: \"a \\nb\"\nonly_nl: \"\\n\"\ncrlf_inside: \"a\\r\\nb\"\ntabbed: \"a\\n\\tb\"\nlong: \"this is a rather long line that goes past eighty columns without any folding at all, really\"\n",
    ),
    (
        "scalar_types",
        "int: 42\nneg: -7\nhex: 0x1F\noct: 0o17\nold_oct: 0755\nunderscore: 1_000\nplus: +5\nfloat: 1.5\nfloat_int: 2.0\nexp: 6.02e23\nbig: 1e6\nsmall: 0.00001\nhalf: .5\ninf: .inf\nninf: -.Inf\nnan: .NaN\nt: true\nf: False\nn: null\nt2: ~\nempty:\ndate: 2024-01-01\nts: 2024-01-01T10:20:30.5+02:00\nts_z: 2024-06-30T23:59:59.123456789Z\nts_space: 2001-12-14 21:59:43.10\nnot_date: 2024-13-01\nnot_ts: 2024-01-01T10:20:30\n",
    ),
    (
        "empty_values",
        "map: {}\nlist: []\nnull_value:\nnested:\n  empty_map: {}\n  empty_list: []\n  items:\n    - {}\n    - []\n    -\n",
    ),
    (
        "multi_document",
        "# first doc\na: 1\n---\n# second doc\nb:\n  - 2\n...\n---\nc: three # line\n",
    ),
    (
        "k8s_secret",
        "apiVersion: v1\nkind: Secret # opaque secret\nmetadata:\n  name: db-credentials\n  namespace: apps\n  labels:\n    app.kubernetes.io/name: db\n  annotations:\n    kustomize.toolkit.fluxcd.io/decrypt: enabled\ntype: Opaque\ndata:\n  # base64 values\n  password: aHVudGVyMg==\n  username: YWRtaW4=\nstringData:\n  config.yaml: |\n    host: db.local\n    port: 5432\n  port: \"5432\"\n  enabled: \"true\"\n",
    ),
    (
        "k8s_configmap_and_secret",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  LOG_LEVEL: debug\n  REPLICAS: \"3\"\n  app.properties: |\n    a=1\n    b=2\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: token\nstringData:\n  token: s3cr3t # rotate monthly\n",
    ),
    (
        "anchors_and_merge",
        "defaults: &defaults\n  adapter: postgres\n  host: localhost\ndevelopment:\n  <<: *defaults\n  database: dev\ncopy: *defaults\nscalar: &s shared\nagain: *s\nlist: &l [1, 2]\nlist_again: *l\n",
    ),
    (
        "keys_special",
        "? |\n  multi\n  line key\n: v\n\"quoted key\": 1\n'single key': 2\n\"123\": numeric string key\nkey with spaces: 3\nkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk: long\n",
    ),
    (
        "unicode_and_escapes",
        "accent: héllo wörld\ncjk: 漢字\nemoji: \"\\U0001F600\"\nnbsp: \"a\\u00a0b\"\nbom: \"\\ufeffx\"\nctrl: \"\\x01\\x7f\"\nnel: \"a\\Nb\"\nls: \"a\\Lb\"\nbackslash: 'a\\b'\nescapes: \"\\\\ \\\" \\t\"\n",
    ),
    (
        "flow_collections",
        "f: {a: 1, b: [x, y], c: {d: e}}\ng: [ \"q\", 'r', s, 1, true, null ]\nh: [{k: v}, [1, 2]]\n",
    ),
    (
        "unencrypted_suffix",
        "password: secret\nlogin_unencrypted: admin\nconfig_unencrypted:\n  # a plain comment\n  level: 3 # stays on its line\n  nested:\n    - a\nsecret_list:\n  - x # encrypted line comment\n",
    ),
    (
        "document_markers",
        "%YAML 1.1\n---\n# before content\na: 1\n...\n--- # comment on marker\nb: 2\n",
    ),
    (
        "crlf_lines",
        "a: 1\r\n# comment\r\nb:\r\n  - x\r\n  - y # line\r\nc: |\r\n  text\r\n",
    ),
    (
        "two_space_style",
        "spec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.25\n        env:\n        - name: A\n          value: \"1\"\n        ports:\n        - containerPort: 80\n",
    ),
];

/// One plaintext input with its encrypted form and what `sops decrypt` printed.
struct Fixture {
    name: String,
    plain: String,
    enc: Vec<u8>,
    want: Result<Vec<u8>, String>,
}

struct Env {
    tools: common::Tools,
    dir: tempfile::TempDir,
    key: common::AgeKey,
    keys: Keys,
}

fn env() -> Option<Env> {
    let tools = common::tools()?;
    let dir = tempfile::tempdir().unwrap();
    let key = tools.age_key(dir.path());
    let mut keys = Keys::default();
    keys.add_age_identities(&key.identity).unwrap();
    Some(Env {
        tools,
        dir,
        key,
        keys,
    })
}

impl Env {
    /// Encrypts `plain` with `sops encrypt --age <recipient> <extra>`; `None` when sops
    /// refuses the input.
    fn fixture(&self, name: &str, plain: &str, extra: &[&str]) -> Option<Fixture> {
        let file = format!("{name}.yaml");
        std::fs::write(self.dir.path().join(&file), plain).unwrap();
        let mut args = vec!["--age", self.key.recipient.as_str()];
        args.extend_from_slice(extra);
        let out = std::process::Command::new(&self.tools.sops)
            .current_dir(self.dir.path())
            .env("SOPS_DISABLE_VERSION_CHECK", "1")
            .arg("encrypt")
            .args(&args)
            .arg(&file)
            .output()
            .unwrap();
        if !out.status.success() {
            return None;
        }
        let enc_file = format!("{name}.enc.yaml");
        std::fs::write(self.dir.path().join(&enc_file), &out.stdout).unwrap();
        let want = self
            .tools
            .decrypt(self.dir.path(), &enc_file, &self.key.identity, &[]);
        Some(Fixture {
            name: name.to_string(),
            plain: plain.to_string(),
            enc: out.stdout,
            want,
        })
    }

    fn corpus(&self, extra: &[&str]) -> Vec<Fixture> {
        CASES
            .iter()
            .map(|(name, plain)| {
                self.fixture(name, plain, extra)
                    .unwrap_or_else(|| panic!("sops refused {name}"))
            })
            .collect()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The tree `sops decrypt` ends with: comments it encrypted come back as comments of their
/// own line (sops drops the line flag when it decrypts one). `encrypted` tells whether a
/// comment under the given path of map keys is encrypted.
fn as_sops_decrypts(branches: &mut [Vec<Entry>], encrypted: &dyn Fn(&[String]) -> bool) {
    fn map(entries: &mut [Entry], path: &mut Vec<String>, enc: &dyn Fn(&[String]) -> bool) {
        for e in entries {
            match e {
                Entry::LineComment(c) if enc(path) => *e = Entry::Comment(std::mem::take(c)),
                Entry::Pair(k, v) => {
                    path.push(k.clone());
                    value(v, path, enc);
                    path.pop();
                }
                _ => {}
            }
        }
    }
    fn value(v: &mut Value, path: &mut Vec<String>, enc: &dyn Fn(&[String]) -> bool) {
        match v {
            Value::Map(entries) => map(entries, path, enc),
            Value::List(items) => {
                for item in items {
                    match item {
                        Value::LineComment(c) if enc(path) => {
                            *item = Value::Comment(std::mem::take(c))
                        }
                        other => value(other, path, enc),
                    }
                }
            }
            _ => {}
        }
    }
    for b in branches {
        map(b, &mut Vec::new(), encrypted);
    }
}

fn default_rules(path: &[String]) -> bool {
    !path.iter().any(|k| k.ends_with("_unencrypted"))
}

/// Every string leaf and comment is `ENC[…]` (or empty), except under `*_unencrypted`.
fn assert_encrypted(v: &Value, plain: bool, what: &str) {
    let enc = |s: &str, t: &str| {
        assert!(
            s.starts_with("ENC[AES256_GCM,data:") && s.ends_with(&format!(",type:{t}]")),
            "{what}: not encrypted as {t}"
        );
    };
    match v {
        Value::Map(entries) => {
            for e in entries {
                match e {
                    Entry::Pair(k, v) => {
                        assert_encrypted(v, plain || k.ends_with("_unencrypted"), what)
                    }
                    Entry::Comment(c) | Entry::LineComment(c) if !plain => enc(c, "comment"),
                    _ => {}
                }
            }
        }
        Value::List(items) => {
            for i in items {
                match i {
                    Value::Comment(c) | Value::LineComment(c) if !plain => enc(c, "comment"),
                    other => assert_encrypted(other, plain, what),
                }
            }
        }
        Value::Str(s) if !plain && !s.is_empty() => {
            assert!(s.starts_with("ENC[AES256_GCM,data:"), "{what}: plain value")
        }
        Value::Str(_) | Value::Null => {}
        _ if plain => {}
        _ => panic!("{what}: a non-string leaf in an encrypted file"),
    }
}

/// The keys of a tree, comments left out: the shape that encryption keeps.
fn shape(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            Value::Map(entries) => {
                for e in entries {
                    if let Entry::Pair(k, v) = e {
                        let p = format!("{prefix}/{k}");
                        out.push(p.clone());
                        walk(v, &p, out);
                    }
                }
            }
            Value::List(items) => {
                for (i, v) in items
                    .iter()
                    .filter(|v| !matches!(v, Value::Comment(_) | Value::LineComment(_)))
                    .enumerate()
                {
                    walk(v, &format!("{prefix}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    walk(v, "", &mut out);
    out
}

#[test]
fn encrypted_files_load_with_their_sops_block_and_enc_values() {
    let Some(e) = env() else { return };
    for f in e.corpus(&[]) {
        let (branches, meta) = yaml::load(&f.enc).unwrap();
        let plain = yaml::load_plain(f.plain.as_bytes()).unwrap();
        assert_eq!(branches.len(), plain.len(), "{}: documents", f.name);
        for (b, p) in branches.iter().zip(&plain) {
            assert_eq!(
                shape(&Value::Map(b.clone())),
                shape(&Value::Map(p.clone())),
                "{}: same keys in the same order",
                f.name
            );
            assert_encrypted(&Value::Map(b.clone()), false, &f.name);
            assert!(
                !b.iter()
                    .any(|e| matches!(e, Entry::Pair(k, _) if k == "sops"))
            );
        }
        let recipient = meta
            .get("age")
            .and_then(|a| match a {
                Value::List(l) => l.first(),
                _ => None,
            })
            .and_then(|a| a.get("recipient"))
            .and_then(Value::as_str);
        assert_eq!(recipient, Some(e.key.recipient.as_str()), "{}", f.name);
        assert!(
            meta.get("mac")
                .and_then(Value::as_str)
                .is_some_and(|m| m.starts_with("ENC[AES256_GCM,data:")),
            "{}",
            f.name
        );
        assert_eq!(meta.get("version"), Some(&Value::Str("3.13.3".into())));
        assert_eq!(
            meta.get("unencrypted_suffix"),
            Some(&Value::Str("_unencrypted".into()))
        );
        assert!(meta.get("lastmodified").and_then(Value::as_str).is_some());
    }
}

#[test]
fn emitting_the_plaintext_tree_matches_sops_decrypt() {
    let Some(e) = env() else { return };
    for f in e.corpus(&[]) {
        let want = f.want.unwrap_or_else(|err| panic!("{}: {err}", f.name));
        let mut tree = yaml::load_plain(f.plain.as_bytes()).unwrap();
        as_sops_decrypts(&mut tree, &default_rules);
        let got = yaml::emit(&tree).unwrap();
        assert_eq!(text(&got), text(&want), "{}", f.name);
    }
}

#[test]
fn plain_comments_keep_their_line_with_flux_regex() {
    let Some(e) = env() else { return };
    let re = Regex::new("^(data|stringData)$").unwrap();
    let rule = |path: &[String]| path.iter().any(|k| re.is_match(k));
    for f in e.corpus(&["--encrypted-regex", "^(data|stringData)$"]) {
        let want = f.want.unwrap_or_else(|err| panic!("{}: {err}", f.name));
        let mut tree = yaml::load_plain(f.plain.as_bytes()).unwrap();
        as_sops_decrypts(&mut tree, &rule);
        let got = yaml::emit(&tree).unwrap();
        assert_eq!(text(&got), text(&want), "{}", f.name);
    }
}

fn assert_round_trip(e: &Env, fixtures: Vec<Fixture>) {
    for f in fixtures {
        let got = rflux_sops::decrypt(
            &f.enc,
            Format::Yaml,
            Format::Yaml,
            &e.keys,
            MacCheck::Verify,
        );
        match (&f.want, got) {
            (Ok(want), Ok(got)) => assert_eq!(text(&got), text(want), "{}", f.name),
            (Err(want), Err(got)) => {
                // sops fails the same way (e.g. on its own MAC): same message.
                assert!(
                    want.contains(&got.to_string()),
                    "{}: {want} / {got}",
                    f.name
                )
            }
            (want, got) => panic!(
                "{}: sops gave {:?}, rflux gave {:?}",
                f.name,
                want.as_ref().map(|w| text(w)),
                got.map(|g| text(&g))
            ),
        }
    }
}

#[test]
fn rflux_decrypt_matches_sops_decrypt() {
    let Some(e) = env() else { return };
    let mut all = e.corpus(&[]);
    all.extend(
        e.corpus(&["--encrypted-regex", "^(data|stringData)$"])
            .into_iter()
            .map(|mut f| {
                f.name.push_str(" (flux regex)");
                f
            }),
    );
    all.extend(
        e.corpus(&["--unencrypted-regex", "^(a|metadata)$"])
            .into_iter()
            .map(|mut f| {
                f.name.push_str(" (unencrypted regex)");
                f
            }),
    );
    assert_round_trip(&e, all);
}

/// A small deterministic generator of YAML documents with comments in many places.
struct Gen(u64);

impl Gen {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.next(xs.len())]
    }

    fn comment(&mut self) -> String {
        format!(
            "#{}",
            self.pick(&["", " c", " two words", "#hash", "  indented"])
        )
    }

    fn line_comment(&mut self) -> String {
        if self.next(4) == 0 {
            format!(" {}", self.comment())
        } else {
            String::new()
        }
    }

    fn scalar(&mut self) -> &'static str {
        self.pick(&[
            "v",
            "two words",
            "1",
            "-2.5",
            "true",
            "null",
            "~",
            "yes",
            "\"quoted\"",
            "'single'",
            "0x10",
            "2024-01-01",
            "\"\"",
            "\"a\\nb\"",
            "héllo",
            "\"#x\"",
            "k#v",
            "\" sp \"",
            "[1, 2]",
            "{a: b}",
            "[]",
            "{}",
        ])
    }

    fn block(&mut self, out: &mut Vec<String>, indent: usize, depth: usize, seq: bool) {
        let step = [2, 2, 4][self.next(3)];
        for i in 0..1 + self.next(3) {
            for _ in 0..self.next(3) {
                if self.next(4) == 0 {
                    out.push(String::new());
                } else {
                    let ci =
                        (indent + [0, 0, 2][self.next(3)]).saturating_sub([0, 2][self.next(2)]);
                    let c = self.comment();
                    out.push(format!("{}{c}", " ".repeat(ci)));
                }
            }
            let pad = " ".repeat(indent);
            let lc = self.line_comment();
            if seq {
                if depth < 3 && self.next(3) == 0 {
                    out.push(format!("{pad}-{lc}"));
                    let s = self.next(2) == 0;
                    self.block(out, indent + 2, depth + 1, s);
                } else {
                    let s = self.scalar();
                    out.push(format!("{pad}- {s}{lc}"));
                }
            } else {
                let key = format!("k{depth}{i}");
                match self.next(5) {
                    0 | 1 if depth < 3 => {
                        out.push(format!("{pad}{key}:{lc}"));
                        let s = self.next(3) == 0;
                        self.block(out, indent + step, depth + 1, s);
                    }
                    2 => {
                        out.push(format!("{pad}{key}: |{lc}"));
                        out.push(format!("{}line one", " ".repeat(indent + step)));
                        out.push(format!("{}  line two", " ".repeat(indent + step)));
                    }
                    _ => {
                        let s = self.scalar();
                        out.push(format!("{pad}{key}: {s}{lc}"));
                    }
                }
            }
        }
    }

    fn document(&mut self) -> String {
        let mut docs = Vec::new();
        for _ in 0..1 + self.next(2) {
            let mut lines = Vec::new();
            self.block(&mut lines, 0, 0, false);
            if self.next(3) == 0 {
                lines.push(self.comment());
            }
            docs.push(lines.join("\n"));
        }
        docs.join("\n---\n") + "\n"
    }
}

#[test]
fn generated_documents_decrypt_like_sops() {
    let Some(e) = env() else { return };
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    let mut fixtures = Vec::new();
    for i in 0..36 {
        let doc = g.document();
        let extra: &[&str] = match i % 3 {
            0 => &[],
            1 => &["--encrypted-regex", "^k1"],
            _ => &["--unencrypted-regex", "^k0"],
        };
        if let Some(f) = e.fixture(&format!("gen{i}"), &doc, extra) {
            fixtures.push(f);
        }
    }
    assert!(
        fixtures.len() >= 30,
        "sops accepted only {}",
        fixtures.len()
    );
    // Every generated document's emission equals sops' single store pass too.
    for f in &fixtures {
        assert!(yaml::load_plain(f.plain.as_bytes()).is_ok(), "{}", f.name);
    }
    assert_round_trip(&e, fixtures);
}

#[test]
fn multi_document_sops_block_is_in_every_document() {
    let Some(e) = env() else { return };
    let f = e
        .fixture("multi", "a: 1 # one\n---\nb: 2\n---\nc: [x] # three\n", &[])
        .unwrap();
    // sops appends the block to each document; the loader keeps the first and strips all.
    assert_eq!(text(&f.enc).matches("\nsops:\n").count(), 3);
    let (branches, _) = yaml::load(&f.enc).unwrap();
    assert_eq!(branches.len(), 3);
    let got = rflux_sops::decrypt(
        &f.enc,
        Format::Yaml,
        Format::Yaml,
        &e.keys,
        MacCheck::Verify,
    )
    .unwrap();
    let want = f.want.unwrap();
    assert_eq!(text(&got), text(&want));
    // Decrypted line comments are written above their entry (the flow list's one inside
    // the list), as sops prints them.
    assert_eq!(
        text(&want),
        "# one\na: 1\n---\nb: 2\n---\nc:\n    # three\n    - x\n"
    );
}

#[test]
fn plain_comments_added_to_an_encrypted_file_stay_as_written() {
    let Some(e) = env() else { return };
    let f = e.fixture("hand", "a: 1\nb:\n  - x\n", &[]).unwrap();
    // Comments edited into the encrypted file by hand are not encrypted: sops keeps them
    // (a line comment stays on its line) and they are not part of the MAC.
    let enc = text(&f.enc);
    assert!(enc.starts_with("a: ENC["));
    let edited = format!("# hand head\n{}", enc.replacen('\n', " # hand line\n", 1)).replacen(
        "    - ENC[",
        "    # hand item\n    - ENC[",
        1,
    );
    std::fs::write(e.dir.path().join("hand.edited.yaml"), &edited).unwrap();
    let want = e
        .tools
        .decrypt(e.dir.path(), "hand.edited.yaml", &e.key.identity, &[])
        .unwrap();
    assert_eq!(
        text(&want),
        "# hand head\na: 1 # hand line\nb:\n    # hand item\n    - x\n"
    );
    let got = rflux_sops::decrypt(
        edited.as_bytes(),
        Format::Yaml,
        Format::Yaml,
        &e.keys,
        MacCheck::Verify,
    )
    .unwrap();
    assert_eq!(text(&got), text(&want));
}
