//! Object preparation that reads the cluster (Flux Operator's, §7.1 steps 2–4), done with the
//! ResourceSet's (impersonated) client, in this order:
//! - `fluxcd.controlplane.io/copyFrom: ns/name` on a `v1` ConfigMap or Secret: its data comes
//!   from that object (a Secret's as `stringData`, and its `type` when the template sets none);
//! - `fluxcd.controlplane.io/convertKubeConfigFrom: ns/name[:key]` on a `v1` ConfigMap: the
//!   server and CA of the first cluster of that kubeconfig Secret (key `kubeconfig`, else
//!   `value`) become `data.address` and `data.ca.crt`, unless the template set them;
//! - `fluxcd.controlplane.io/checksumFrom: Kind/ns/name,…` on any `metadata.annotations` of an
//!   object tree: the sibling annotation `fluxcd.controlplane.io/checksum` is set to a sha256
//!   over the referenced ConfigMaps and Secrets (rendered ones from the render, the others read
//!   once from the cluster and returned, sorted, for `status.externalChecksumRefs`).
//!
//! The parsing and transforms are pure; [`prepare_from_cluster`] does the reads.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use rflux_common::api::resourceset::{
    CHECKSUM_ANNOTATION, CHECKSUM_FROM_ANNOTATION, CONVERT_KUBECONFIG_FROM_ANNOTATION,
    COPY_FROM_ANNOTATION,
};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// A failure, in Flux Operator's words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

fn is_v1(o: &Value, kind: &str) -> bool {
    o.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && o.get("kind").and_then(Value::as_str) == Some(kind)
}

/// `ns/name`.
fn split_ref(v: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = v.split('/').collect();
    (parts.len() == 2).then(|| (parts[0].to_string(), parts[1].to_string()))
}

/// `ns/name` or `ns/name:key` (a colon after the slash starts the key).
pub fn parse_convert_ref(v: &str) -> Result<(String, String, Option<String>), SourceError> {
    let (name_ref, key) = match (v.rfind(':'), v.find('/')) {
        (Some(c), Some(s)) if c > 0 && s > 0 && c > s => (&v[..c], Some(v[c + 1..].to_string())),
        _ => (v, None),
    };
    let (ns, name) = split_ref(name_ref).ok_or_else(|| {
        SourceError(format!(
            "invalid {CONVERT_KUBECONFIG_FROM_ANNOTATION} annotation value '{v}' must be in the format 'namespace/name' or 'namespace/name:key'"
        ))
    })?;
    Ok((ns, name, key))
}

/// The server and CA (PEM text) of the first cluster of a kubeconfig.
pub fn kubeconfig_fields(text: &str) -> Result<(String, String), String> {
    let doc = rflux_kustomize::yaml::parse_one(text, "kubeconfig")
        .map_err(|e| format!("failed to parse kubeconfig YAML: {e}"))?;
    let clusters = doc
        .get("clusters")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or("no clusters found in kubeconfig")?;
    let mut first = None;
    for c in clusters {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let server = c
            .pointer("/cluster/server")
            .and_then(Value::as_str)
            .unwrap_or("");
        if server.is_empty() {
            return Err(format!(
                "server field is empty in kubeconfig cluster \"{name}\""
            ));
        }
        let ca = c
            .pointer("/cluster/certificate-authority-data")
            .and_then(Value::as_str)
            .unwrap_or("");
        if ca.is_empty() {
            return Err(format!(
                "certificate-authority-data field is empty in kubeconfig cluster \"{name}\""
            ));
        }
        let ca = B64.decode(ca.trim()).map_err(|e| {
            format!("failed to parse kubeconfig YAML: certificate-authority-data: {e}")
        })?;
        first.get_or_insert((
            server.to_string(),
            String::from_utf8_lossy(&ca).into_owned(),
        ));
    }
    first.ok_or_else(|| "no clusters found in kubeconfig".to_string())
}

/// `data` as a string map (the keys a ConfigMap or Secret holds), missing as empty.
fn string_map(o: &Value, field: &str) -> Map<String, Value> {
    o.get(field)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The canonical bytes of a rendered or live ConfigMap/Secret, key by key: ConfigMap `data` and
/// decoded `binaryData`; Secret decoded `data` overlaid by `stringData`.
pub fn canonical(kind: &str, o: &Value) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut out = BTreeMap::new();
    let ns = o
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = o
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let decode = |field: &str, k: &str, v: &Value| {
        B64.decode(v.as_str().unwrap_or("")).map_err(|e| {
            format!("failed to decode base64 in {kind}/{ns}/{name} {field}[{k:?}]: {e}")
        })
    };
    match kind {
        "ConfigMap" => {
            for (k, v) in string_map(o, "data") {
                out.insert(k, v.as_str().unwrap_or("").as_bytes().to_vec());
            }
            for (k, v) in string_map(o, "binaryData") {
                let d = decode("binaryData", &k, &v)?;
                out.insert(k, d);
            }
        }
        "Secret" => {
            for (k, v) in string_map(o, "data") {
                let d = decode("data", &k, &v)?;
                out.insert(k, d);
            }
            for (k, v) in string_map(o, "stringData") {
                out.insert(k, v.as_str().unwrap_or("").as_bytes().to_vec());
            }
        }
        other => return Err(format!("unsupported kind {other:?}")),
    }
    Ok(out)
}

/// The references of one `checksumFrom` value, as `(Kind, ns, name)`.
pub fn parse_checksum_refs(v: &str) -> Result<Vec<(String, String, String)>, SourceError> {
    let mut out = Vec::new();
    for r in v.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        let p: Vec<&str> = r.split('/').collect();
        if p.len() != 3 || p.iter().any(|s| s.is_empty()) {
            return Err(SourceError(format!(
                "invalid {CHECKSUM_FROM_ANNOTATION} reference '{r}' must be in the format 'Kind/namespace/name'"
            )));
        }
        if p[0] != "ConfigMap" && p[0] != "Secret" {
            return Err(SourceError(format!(
                "unsupported kind '{}' in {CHECKSUM_FROM_ANNOTATION}, only ConfigMap and Secret are allowed",
                p[0]
            )));
        }
        out.push((p[0].to_string(), p[1].to_string(), p[2].to_string()));
    }
    Ok(out)
}

/// Every `checksumFrom` value in an object tree (on maps named `metadata`).
fn checksum_values(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(m) => {
            if let Some(v) = m
                .get("metadata")
                .and_then(|md| md.get("annotations"))
                .and_then(|a| a.get(CHECKSUM_FROM_ANNOTATION))
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
            {
                out.push(v.to_string());
            }
            m.values().for_each(|v| checksum_values(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| checksum_values(v, out)),
        _ => {}
    }
}

/// `sha256:` over the referenced data.
fn checksum(
    refs: &[(String, String, String)],
    data: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
) -> String {
    let mut h = Sha256::new();
    for (kind, ns, name) in refs {
        let key = format!("{kind}/{ns}/{name}");
        h.update(key.as_bytes());
        h.update([0]);
        for (k, v) in data.get(&key).into_iter().flatten() {
            h.update(k.as_bytes());
            h.update([0]);
            h.update(v);
            h.update([0]);
        }
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// Sets the checksum annotation next to every `checksumFrom` in the tree.
fn set_checksums(
    node: &mut Value,
    data: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
) -> Result<(), SourceError> {
    match node {
        Value::Object(m) => {
            if let Some(ann) = m
                .get_mut("metadata")
                .and_then(|md| md.get_mut("annotations"))
                .and_then(Value::as_object_mut)
                && let Some(v) = ann
                    .get(CHECKSUM_FROM_ANNOTATION)
                    .and_then(Value::as_str)
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
            {
                let refs = parse_checksum_refs(&v)?;
                ann.insert(
                    CHECKSUM_ANNOTATION.into(),
                    Value::String(checksum(&refs, data)),
                );
            }
            for v in m.values_mut() {
                set_checksums(v, data)?;
            }
        }
        Value::Array(a) => {
            for v in a {
                set_checksums(v, data)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// What the three steps read from the cluster, as `Kind/namespace/name`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterReads {
    /// `checksumFrom` references not rendered by the ResourceSet (`status.externalChecksumRefs`).
    pub external_checksum: Vec<String>,
    /// Every ConfigMap and Secret read: `copyFrom` and `convertKubeConfigFrom` sources and the
    /// external checksum references (a change of one reconciles the ResourceSet).
    pub all: BTreeSet<String>,
}

/// The `Kind/ns/name` a `copyFrom` or `convertKubeConfigFrom` annotation of `o` reads.
fn source_ref(o: &Value) -> Option<String> {
    if let Some(v) = annotation(o, COPY_FROM_ANNOTATION)
        && o.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && let Some(kind) = o
            .get("kind")
            .and_then(Value::as_str)
            .filter(|k| *k == "ConfigMap" || *k == "Secret")
        && let Some((ns, name)) = split_ref(v)
    {
        return Some(format!("{kind}/{ns}/{name}"));
    }
    let v = annotation(o, CONVERT_KUBECONFIG_FROM_ANNOTATION).filter(|_| is_v1(o, "ConfigMap"))?;
    let (ns, name, _) = parse_convert_ref(v).ok()?;
    Some(format!("Secret/{ns}/{name}"))
}

/// Runs the three steps on `objects` with `client`; returns what was read.
pub async fn prepare_from_cluster(
    client: &Client,
    objects: &mut [&mut Value],
) -> Result<ClusterReads, SourceError> {
    let mut reads = ClusterReads::default();
    reads
        .all
        .extend(objects.iter().filter_map(|o| source_ref(o)));
    for o in objects.iter_mut() {
        copy_from(client, o).await?;
    }
    for o in objects.iter_mut() {
        convert_kubeconfig(client, o).await?;
    }
    // checksumFrom: rendered ConfigMaps/Secrets first, then the cluster for the rest.
    let mut values = Vec::new();
    for o in objects.iter() {
        checksum_values(o, &mut values);
    }
    if values.is_empty() {
        return Ok(reads);
    }
    let mut data: BTreeMap<String, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    for o in objects.iter() {
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind == "ConfigMap" || kind == "Secret" {
            let ns = o
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            let name = o
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            data.insert(
                format!("{kind}/{ns}/{name}"),
                canonical(kind, o).map_err(SourceError)?,
            );
        }
    }
    let mut external = BTreeSet::new();
    for v in &values {
        for (kind, ns, name) in parse_checksum_refs(v)? {
            let key = format!("{kind}/{ns}/{name}");
            if data.contains_key(&key) {
                continue;
            }
            let live = get_json(client, &kind, &ns, &name).await.map_err(|e| {
                SourceError(format!(
                    "failed to resolve {CHECKSUM_FROM_ANNOTATION} reference {kind}/{ns}/{name}: {e}"
                ))
            })?;
            data.insert(key.clone(), canonical(&kind, &live).map_err(SourceError)?);
            external.insert(key);
        }
    }
    for o in objects.iter_mut() {
        set_checksums(o, &data)?;
    }
    reads.all.extend(external.iter().cloned());
    reads.external_checksum = external.into_iter().collect();
    Ok(reads)
}

async fn get_json(client: &Client, kind: &str, ns: &str, name: &str) -> Result<Value, String> {
    let v = match kind {
        "ConfigMap" => serde_json::to_value(
            Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .map_err(|e| e.to_string())?,
        ),
        _ => serde_json::to_value(
            Api::<Secret>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .map_err(|e| e.to_string())?,
        ),
    };
    v.map_err(|e| e.to_string())
}

async fn copy_from(client: &Client, o: &mut Value) -> Result<(), SourceError> {
    let Some(source) = annotation(o, COPY_FROM_ANNOTATION).map(str::to_string) else {
        return Ok(());
    };
    if o.get("apiVersion").and_then(Value::as_str) != Some("v1") {
        return Ok(());
    }
    let kind = o
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind != "ConfigMap" && kind != "Secret" {
        return Ok(());
    }
    let (ns, name) = split_ref(&source).ok_or_else(|| {
        SourceError(format!(
            "invalid {COPY_FROM_ANNOTATION} annotation value '{source}' must be in the format 'namespace/name'"
        ))
    })?;
    let live = get_json(client, &kind, &ns, &name)
        .await
        .map_err(|e| SourceError(format!("failed to copy data from {kind}/{source}: {e}")))?;
    apply_copy(o, &kind, &live);
    Ok(())
}

/// Copies a live ConfigMap's or Secret's data into the rendered object (pure).
pub fn apply_copy(o: &mut Value, kind: &str, live: &Value) {
    let Some(m) = o.as_object_mut() else {
        return;
    };
    if kind == "ConfigMap" {
        m.insert("data".into(), Value::Object(string_map(live, "data")));
        let bin = string_map(live, "binaryData");
        if !bin.is_empty() {
            m.insert("binaryData".into(), Value::Object(bin));
        }
        return;
    }
    if !m.contains_key("type") {
        let t = live
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .unwrap_or("Opaque");
        m.insert("type".into(), Value::String(t.to_string()));
    }
    let data: Map<String, Value> = string_map(live, "data")
        .into_iter()
        .map(|(k, v)| {
            let text = B64
                .decode(v.as_str().unwrap_or(""))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            (k, Value::String(text))
        })
        .collect();
    m.insert("stringData".into(), Value::Object(data));
}

async fn convert_kubeconfig(client: &Client, o: &mut Value) -> Result<(), SourceError> {
    if !is_v1(o, "ConfigMap") {
        return Ok(());
    }
    let Some(source) = annotation(o, CONVERT_KUBECONFIG_FROM_ANNOTATION).map(str::to_string) else {
        return Ok(());
    };
    let (ns, name, key) = parse_convert_ref(&source)?;
    let name_ref = format!("{ns}/{name}");
    let secret = get_json(client, "Secret", &ns, &name)
        .await
        .map_err(|e| SourceError(format!("failed to get kubeconfig Secret/{name_ref}: {e}")))?;
    let data = canonical("Secret", &secret).map_err(SourceError)?;
    let bytes = match &key {
        Some(k) => data.get(k).ok_or_else(|| {
            SourceError(format!(
                "kubeconfig Secret/{name_ref} does not have '{k}' field"
            ))
        })?,
        None => data
            .get("kubeconfig")
            .or_else(|| data.get("value"))
            .ok_or_else(|| {
                SourceError(format!(
                    "kubeconfig Secret/{name_ref} does not have 'kubeconfig' or 'value' field"
                ))
            })?,
    };
    let (server, ca) = kubeconfig_fields(&String::from_utf8_lossy(bytes)).map_err(|e| {
        SourceError(format!(
            "failed to extract fields from kubeconfig Secret/{source}: {e}"
        ))
    })?;
    if let Some(m) = o.as_object_mut() {
        let d = m.entry("data").or_insert_with(|| Value::Object(Map::new()));
        if let Some(d) = d.as_object_mut() {
            d.entry("address").or_insert(Value::String(server));
            d.entry("ca.crt").or_insert(Value::String(ca));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_sources_of_copy_and_convert() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"annotations": {COPY_FROM_ANNOTATION: "ns/src"}}});
        assert_eq!(source_ref(&cm).as_deref(), Some("ConfigMap/ns/src"));
        let s = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"annotations": {COPY_FROM_ANNOTATION: "ns/src"}}});
        assert_eq!(source_ref(&s).as_deref(), Some("Secret/ns/src"));
        let conv = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"annotations": {CONVERT_KUBECONFIG_FROM_ANNOTATION: "ns/kc:value"}}});
        assert_eq!(source_ref(&conv).as_deref(), Some("Secret/ns/kc"));
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"annotations": {COPY_FROM_ANNOTATION: "ns/src"}}});
        assert_eq!(source_ref(&other), None);
    }

    #[test]
    fn convert_refs_and_kubeconfigs() {
        assert_eq!(
            parse_convert_ref("ns/kc").unwrap(),
            ("ns".into(), "kc".into(), None)
        );
        assert_eq!(
            parse_convert_ref("ns/kc:value.yaml").unwrap(),
            ("ns".into(), "kc".into(), Some("value.yaml".into()))
        );
        assert!(parse_convert_ref("kc").is_err());
        let ca = B64.encode("-----BEGIN CERTIFICATE-----\nX\n");
        let kc = format!(
            "apiVersion: v1\nclusters:\n- name: a\n  cluster:\n    server: https://a:6443\n    certificate-authority-data: {ca}\n- name: b\n  cluster:\n    server: https://b\n    certificate-authority-data: {ca}\n"
        );
        assert_eq!(
            kubeconfig_fields(&kc).unwrap(),
            (
                "https://a:6443".into(),
                "-----BEGIN CERTIFICATE-----\nX\n".into()
            )
        );
        let no_ca = "clusters:\n- name: a\n  cluster:\n    server: https://a\n";
        assert_eq!(
            kubeconfig_fields(no_ca).unwrap_err(),
            "certificate-authority-data field is empty in kubeconfig cluster \"a\""
        );
        assert_eq!(
            kubeconfig_fields("clusters: []").unwrap_err(),
            "no clusters found in kubeconfig"
        );
    }

    #[test]
    fn copy_into_configmaps_and_secrets() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"old": "x"}});
        apply_copy(
            &mut cm,
            "ConfigMap",
            &json!({"data": {"a": "1"}, "binaryData": {"b": "AQI="}}),
        );
        assert_eq!(cm["data"], json!({"a": "1"}));
        assert_eq!(cm["binaryData"], json!({"b": "AQI="}));
        let mut s = json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"old": "x"}});
        apply_copy(
            &mut s,
            "Secret",
            &json!({"type": "", "data": {"token": B64.encode("t0k")}}),
        );
        assert_eq!(s["type"], "Opaque");
        assert_eq!(s["stringData"], json!({"token": "t0k"}));
        let mut typed = json!({"kind": "Secret", "type": "kubernetes.io/tls"});
        apply_copy(&mut typed, "Secret", &json!({"type": "Opaque", "data": {}}));
        assert_eq!(typed["type"], "kubernetes.io/tls");
    }

    #[test]
    fn checksums_are_set_on_every_metadata_and_change_with_the_data() {
        let refs = parse_checksum_refs("ConfigMap/ns/a, Secret/ns/s").unwrap();
        assert_eq!(refs.len(), 2);
        assert!(
            parse_checksum_refs("Deployment/ns/x")
                .unwrap_err()
                .0
                .contains("only ConfigMap and Secret")
        );
        assert!(parse_checksum_refs("ConfigMap/x").is_err());
        let mut data = BTreeMap::new();
        data.insert(
            "ConfigMap/ns/a".to_string(),
            canonical("ConfigMap", &json!({"data": {"k": "v"}})).unwrap(),
        );
        data.insert(
            "Secret/ns/s".to_string(),
            canonical(
                "Secret",
                &json!({"data": {"p": B64.encode("1")}, "stringData": {"p": "2"}}),
            )
            .unwrap(),
        );
        assert_eq!(data["Secret/ns/s"]["p"], b"2".to_vec(), "stringData wins");
        let mut d = json!({"kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"metadata": {"annotations": {CHECKSUM_FROM_ANNOTATION: "ConfigMap/ns/a,Secret/ns/s"}}}}});
        set_checksums(&mut d, &data).unwrap();
        let sum = d["spec"]["template"]["metadata"]["annotations"][CHECKSUM_ANNOTATION]
            .as_str()
            .unwrap()
            .to_string();
        // The digest input spelled out.
        let mut want = Sha256::new();
        want.update(b"ConfigMap/ns/a\0k\0v\0Secret/ns/s\0p\x002\0");
        assert_eq!(sum, format!("sha256:{}", hex::encode(want.finalize())));
        data.get_mut("ConfigMap/ns/a")
            .unwrap()
            .insert("k".into(), b"w".to_vec());
        set_checksums(&mut d, &data).unwrap();
        assert_ne!(
            d["spec"]["template"]["metadata"]["annotations"][CHECKSUM_ANNOTATION],
            json!(sum)
        );
        let mut values = Vec::new();
        checksum_values(&d, &mut values);
        assert_eq!(values, ["ConfigMap/ns/a,Secret/ns/s"]);
    }
}
