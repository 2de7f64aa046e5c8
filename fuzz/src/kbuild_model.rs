//! The random kustomization tree of the `kustomize_build` target: small vocabularies so that
//! names, kinds and paths collide often (which is where kustomize's logic is), plus raw strings.

use arbitrary::Arbitrary;
use serde_json::{Map, Value, json};

const WORDS: &[&str] = &[
    "a",
    "b",
    "app",
    "web",
    "default",
    "team-a",
    "x.y",
    "",
    "app.kubernetes.io/name",
    "1",
];
const KINDS: &[(&str, &str)] = &[
    ("v1", "ConfigMap"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "Secret"),
    ("v1", "Namespace"),
    ("apps/v1", "StatefulSet"),
    ("example.com/v1", "Widget"),
    ("batch/v1", "CronJob"),
];
const IMAGES: &[&str] = &[
    "nginx",
    "nginx:1.25",
    "repo/app@sha256:0123",
    "ghcr.io/a/b:v1",
    "a",
];
const FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.labels.a",
    "metadata.annotations.[x.y]",
    "data.a",
    "spec.replicas",
    "spec.template.spec.containers.0.image",
    "spec.template.spec.containers.[name=app].env.0.value",
    "spec.selector.matchLabels",
    "spec.template.metadata.labels.a",
    "*",
];
const JSON_PATHS: &[&str] = &[
    "/metadata/name",
    "/metadata/labels/a",
    "/metadata/annotations",
    "/spec/replicas",
    "/data/a",
    "/spec/template/spec/containers/0/image",
    "/spec/template/spec/containers/-",
    "/",
    "",
];

fn pick<T: Copy>(list: &[T], i: u8) -> T {
    list[usize::from(i) % list.len()]
}

/// A name from the vocabulary, or any string.
#[derive(Debug, Arbitrary)]
pub(crate) enum Word {
    Pool(u8),
    Raw(String),
}

impl Word {
    pub(crate) fn text(&self) -> String {
        match self {
            Word::Pool(i) => pick(WORDS, *i).to_string(),
            Word::Raw(s) => s.clone(),
        }
    }
}

/// A reference from directory `from` to another directory or file of the tree.
#[derive(Debug, Arbitrary)]
pub(crate) enum Ref {
    Dir(u8),
    File(u8, u8),
    Here,
    AboveRoot,
    Raw(String),
}

impl Ref {
    pub(crate) fn path(&self, from: usize, n: usize) -> String {
        match self {
            Ref::Dir(k) => format!("../d{}", usize::from(*k) % n),
            Ref::File(k, j) => format!("../d{}/r{}.yaml", usize::from(*k) % n, j % 4),
            Ref::Here => format!("../d{from}"),
            Ref::AboveRoot => "../../..".to_string(),
            Ref::Raw(s) => s.clone(),
        }
    }
}

/// One object of a resource file.
#[derive(Debug, Arbitrary)]
pub(crate) struct Obj {
    kind: u8,
    name: Word,
    namespace: Option<Word>,
    labels: Vec<(Word, Word)>,
    data: Vec<(Word, Word)>,
    image: Option<u8>,
    config_ref: Option<Word>,
    replicas: Option<u8>,
    behavior_annotation: bool,
}

impl Obj {
    fn value(&self) -> Value {
        let (api, kind) = pick(KINDS, self.kind);
        let mut meta = vec![("name", json!(self.name.text()))];
        if let Some(ns) = &self.namespace {
            meta.push(("namespace", json!(ns.text())));
        }
        if !self.labels.is_empty() {
            meta.push(("labels", string_map(&self.labels)));
        }
        if self.behavior_annotation {
            meta.push((
                "annotations",
                json!({"kustomize.config.k8s.io/behavior": "merge", "config.kubernetes.io/local-config": "false"}),
            ));
        }
        let mut top = vec![
            ("apiVersion", json!(api)),
            ("kind", json!(kind)),
            ("metadata", obj(meta)),
        ];
        if !self.data.is_empty() {
            top.push(("data", string_map(&self.data)));
        }
        if let Some(i) = self.image {
            let mut container = json!({"name": "app", "image": pick(IMAGES, i)});
            if let Some(c) = &self.config_ref {
                container["envFrom"] = json!([{"configMapRef": {"name": c.text()}}]);
            }
            let mut spec = json!({
                "selector": {"matchLabels": string_map(&self.labels)},
                "template": {
                    "metadata": {"labels": string_map(&self.labels)},
                    "spec": {"containers": [container]},
                },
            });
            if let Some(r) = self.replicas {
                spec["replicas"] = json!(r);
            }
            top.push(("spec", spec));
        }
        obj(top)
    }
}

/// A resource file: objects, or raw text.
#[derive(Debug, Arbitrary)]
pub(crate) enum File {
    Objects(Vec<Obj>),
    Raw(String),
}

/// A patch target selector.
#[derive(Debug, Arbitrary)]
pub(crate) struct Target {
    kind: Option<u8>,
    name: Option<Word>,
    label_selector: Option<(Word, Word)>,
}

impl Target {
    fn value(&self) -> Value {
        obj(vec![
            (
                "kind",
                self.kind.map_or(Value::Null, |k| json!(pick(KINDS, k).1)),
            ),
            (
                "name",
                self.name.as_ref().map_or(Value::Null, |w| json!(w.text())),
            ),
            (
                "labelSelector",
                self.label_selector.as_ref().map_or(Value::Null, |(k, v)| {
                    json!(format!("{}={}", k.text(), v.text()))
                }),
            ),
        ])
    }
}

#[derive(Debug, Arbitrary)]
pub(crate) struct Op {
    op: u8,
    path: u8,
    from: u8,
    value: Word,
}

/// A `patches` entry.
#[derive(Debug, Arbitrary)]
pub(crate) enum Patch {
    Strategic(Option<Target>, Obj),
    Json6902(Target, Vec<Op>),
    FromFile(Option<Target>, Ref),
}

impl Patch {
    pub(crate) fn value(&self, from: usize, n: usize) -> Value {
        match self {
            Patch::Strategic(t, o) => obj(vec![
                ("patch", json!(o.value().to_string())),
                ("target", t.as_ref().map_or(Value::Null, Target::value)),
            ]),
            Patch::Json6902(t, ops) => {
                let ops: Vec<Value> = ops
                    .iter()
                    .map(|o| {
                        json!({
                            "op": pick(&["add", "remove", "replace", "move", "copy", "test"], o.op),
                            "path": pick(JSON_PATHS, o.path),
                            "from": pick(JSON_PATHS, o.from),
                            "value": o.value.text(),
                        })
                    })
                    .collect();
                json!({"patch": Value::Array(ops).to_string(), "target": t.value()})
            }
            Patch::FromFile(t, r) => obj(vec![
                ("path", json!(r.path(from, n))),
                ("target", t.as_ref().map_or(Value::Null, Target::value)),
            ]),
        }
    }
}

/// A configMapGenerator / secretGenerator entry.
#[derive(Debug, Arbitrary)]
pub(crate) struct Gen {
    name: Word,
    behavior: Option<u8>,
    literals: Vec<(Word, Word)>,
    files: Vec<Ref>,
    env: Option<Ref>,
    no_hash: bool,
}

impl Gen {
    fn value(&self, from: usize, n: usize) -> Value {
        let literals: Vec<Value> = self
            .literals
            .iter()
            .map(|(k, v)| json!(format!("{}={}", k.text(), v.text())))
            .collect();
        let files: Vec<Value> = self.files.iter().map(|r| json!(r.path(from, n))).collect();
        obj(vec![
            ("name", json!(self.name.text())),
            (
                "behavior",
                self.behavior.map_or(Value::Null, |b| {
                    json!(pick(&["create", "merge", "replace"], b))
                }),
            ),
            ("literals", json!(literals)),
            ("files", json!(files)),
            (
                "envs",
                self.env
                    .as_ref()
                    .map_or(Value::Null, |r| json!([r.path(from, n)])),
            ),
            ("options", json!({"disableNameSuffixHash": self.no_hash})),
        ])
    }
}

/// A `replacements` entry.
#[derive(Debug, Arbitrary)]
pub(crate) struct Replacement {
    source_kind: u8,
    source_name: Word,
    source_path: u8,
    targets: Vec<(Target, u8, bool)>,
}

impl Replacement {
    fn value(&self) -> Value {
        let targets: Vec<Value> = self
            .targets
            .iter()
            .map(|(t, p, create)| {
                json!({"select": t.value(), "fieldPaths": [pick(FIELD_PATHS, *p)], "options": {"create": create}})
            })
            .collect();
        json!({
            "source": {"kind": pick(KINDS, self.source_kind).1, "name": self.source_name.text(), "fieldPath": pick(FIELD_PATHS, self.source_path)},
            "targets": targets,
        })
    }
}

/// An `images` entry.
#[derive(Debug, Arbitrary)]
pub(crate) struct Image {
    name: u8,
    new_name: Option<Word>,
    new_tag: Option<Word>,
    digest: bool,
}

pub(crate) fn gen_value(i: &Image) -> Value {
    let name = pick(IMAGES, i.name);
    let base = name.split([':', '@']).next().unwrap_or(name);
    obj(vec![
        ("name", json!(base)),
        (
            "newName",
            i.new_name.as_ref().map_or(Value::Null, |w| json!(w.text())),
        ),
        (
            "newTag",
            i.new_tag.as_ref().map_or(Value::Null, |w| json!(w.text())),
        ),
        (
            "digest",
            if i.digest {
                json!("sha256:abcd")
            } else {
                Value::Null
            },
        ),
    ])
}

/// A kustomization file.
#[derive(Debug, Arbitrary)]
pub(crate) struct Kust {
    component: bool,
    resources: Vec<Ref>,
    components: Vec<Ref>,
    name_prefix: Option<Word>,
    name_suffix: Option<Word>,
    namespace: Option<Word>,
    common_labels: Vec<(Word, Word)>,
    labels: Vec<(Word, Word, bool)>,
    annotations: Vec<(Word, Word)>,
    patches: Vec<Patch>,
    strategic_files: Vec<Ref>,
    config_maps: Vec<Gen>,
    secrets: Vec<Gen>,
    replacements: Vec<Replacement>,
    images: Vec<Image>,
    replicas: Vec<(Word, u8)>,
    legacy_sort: Option<bool>,
    /// A field of any name with any string value, for what the vocabulary misses.
    extra: Option<(String, Word)>,
}

impl Kust {
    fn value(&self, from: usize, n: usize) -> Value {
        let refs = |v: &[Ref]| json!(v.iter().map(|r| r.path(from, n)).collect::<Vec<_>>());
        let list = |v: Vec<Value>| {
            if v.is_empty() {
                Value::Null
            } else {
                Value::Array(v)
            }
        };
        let kind = if self.component {
            "Component"
        } else {
            "Kustomization"
        };
        let api = if self.component {
            "kustomize.config.k8s.io/v1alpha1"
        } else {
            "kustomize.config.k8s.io/v1beta1"
        };
        let word = |w: &Option<Word>| w.as_ref().map_or(Value::Null, |w| json!(w.text()));
        let mut v = obj(vec![
            ("apiVersion", json!(api)),
            ("kind", json!(kind)),
            ("resources", refs(&self.resources)),
            ("components", if self.components.is_empty() { Value::Null } else { refs(&self.components) }),
            ("namePrefix", word(&self.name_prefix)),
            ("nameSuffix", word(&self.name_suffix)),
            ("namespace", word(&self.namespace)),
            ("commonLabels", if self.common_labels.is_empty() { Value::Null } else { string_map(&self.common_labels) }),
            ("labels", list(self.labels.iter().map(|(k, v, sel)| json!({"pairs": {k.text(): v.text()}, "includeSelectors": sel})).collect())),
            ("commonAnnotations", if self.annotations.is_empty() { Value::Null } else { string_map(&self.annotations) }),
            ("patches", list(self.patches.iter().map(|p| p.value(from, n)).collect())),
            ("patchesStrategicMerge", if self.strategic_files.is_empty() { Value::Null } else { refs(&self.strategic_files) }),
            ("configMapGenerator", list(self.config_maps.iter().map(|g| g.value(from, n)).collect())),
            ("secretGenerator", list(self.secrets.iter().map(|g| g.value(from, n)).collect())),
            ("replacements", list(self.replacements.iter().map(Replacement::value).collect())),
            ("images", list(self.images.iter().map(gen_value).collect())),
            ("replicas", list(self.replicas.iter().map(|(w, c)| json!({"name": w.text(), "count": c})).collect())),
            ("sortOptions", self.legacy_sort.map_or(Value::Null, |l| json!({"order": if l { "legacy" } else { "fifo" }}))),
        ]);
        if let (Some((k, w)), Value::Object(m)) = (&self.extra, &mut v) {
            m.insert(k.clone(), json!(w.text()));
        }
        v
    }
}

/// One directory `d<i>` of the tree.
#[derive(Debug, Arbitrary)]
pub(crate) struct Dir {
    kust: Option<Kust>,
    /// `kustomization.yaml` as raw text instead (when set and `kust` is not).
    raw_kust: Option<String>,
    files: Vec<File>,
}

impl Dir {
    pub(crate) fn render(&self, i: usize, n: usize, out: &mut Vec<(String, String)>) {
        let dir = format!("d{i}");
        if let Some(k) = &self.kust {
            out.push((
                format!("{dir}/kustomization.yaml"),
                k.value(i, n).to_string(),
            ));
        } else if let Some(raw) = &self.raw_kust {
            out.push((format!("{dir}/kustomization.yaml"), raw.clone()));
        }
        for (j, f) in self.files.iter().take(4).enumerate() {
            let text = match f {
                File::Objects(objs) => objs
                    .iter()
                    .map(|o| o.value().to_string())
                    .collect::<Vec<_>>()
                    .join("\n---\n"),
                File::Raw(s) => s.clone(),
            };
            out.push((format!("{dir}/r{j}.yaml"), text));
        }
        if self.kust.is_none() && self.raw_kust.is_none() && self.files.is_empty() {
            out.push((format!("{dir}/.keep"), String::new()));
        }
    }
}

/// The Flux overrides (`spec.targetNamespace`, `namePrefix`, `commonMetadata`, ...).
#[derive(Debug, Arbitrary)]
pub(crate) struct Ovr {
    pub(crate) target_namespace: Option<Word>,
    pub(crate) name_prefix: Option<Word>,
    pub(crate) labels: Vec<(Word, Word)>,
    pub(crate) patches: Vec<Patch>,
    pub(crate) images: Vec<Image>,
    pub(crate) components: Vec<Ref>,
    pub(crate) ignore_missing_components: bool,
    pub(crate) build_metadata: bool,
}

/// A JSON object from key/value pairs, keeping order.
pub(crate) fn obj(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        if !v.is_null() {
            m.insert(k.to_string(), v);
        }
    }
    Value::Object(m)
}

/// A string map from word pairs.
pub(crate) fn string_map(pairs: &[(Word, Word)]) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        m.insert(k.text(), json!(v.text()));
    }
    Value::Object(m)
}
