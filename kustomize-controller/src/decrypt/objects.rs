//! After the build: Flux's `DecryptResource` on every built object, and the apply-time guard
//! that keeps a still-encrypted Secret out of the cluster.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rflux_sops::{Format, Keys, MacCheck, SopsError};
use serde_json::Value;

use crate::substitute::object_id;

/// The per-object opt-out: `kustomize.toolkit.fluxcd.io/decrypt: Disabled` (any case).
pub const DECRYPT_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/decrypt";

/// The order in which a Secret value's format markers are tried. Flux scans a Go map, so its
/// pick is arbitrary when several match; ours is fixed.
const MARKER_ORDER: [Format; 4] = [Format::Yaml, Format::Json, Format::Dotenv, Format::Ini];

/// Why an object could not be decrypted: `decryption failed for '<Kind>.<version>.<group>/<name>': …`.
#[derive(Debug, thiserror::Error)]
#[error("decryption failed for '{object}': {detail}")]
pub struct ObjectError {
    /// Flux's object id, e.g. `Secret.v1.[noGrp]/db`.
    pub object: String,
    pub detail: String,
}

/// Decrypts, in place, every object that carries a `sops` block and every Secret `data` value
/// that holds a SOPS document. Returns how many objects were changed.
pub fn decrypt_objects(objects: &mut [Value], keys: &Keys) -> Result<usize, ObjectError> {
    let mut changed = 0;
    for obj in objects.iter_mut() {
        if opted_out(obj) {
            continue;
        }
        let fail = |detail: String| ObjectError {
            object: object_id(obj),
            detail,
        };
        if has_sops_mac(obj) {
            let plain = rflux_sops::decrypt_object(obj, keys).map_err(|e| {
                fail(format!(
                    "failed to decrypt and format '{}' {} data: {e}",
                    ns_name(obj),
                    kind(obj)
                ))
            })?;
            *obj = plain;
            changed += 1;
        } else if kind(obj) == "Secret" {
            let mut n = 0;
            let id = ns_name(obj);
            let object = object_id(obj);
            if let Some(Value::Object(data)) = obj.get_mut("data") {
                for (key, value) in data.iter_mut() {
                    let Some(text) = value.as_str() else { continue };
                    let detail = |e: SopsError| ObjectError {
                        object: object.clone(),
                        detail: format!(
                            "failed to decrypt and format '{id}' Secret field '{key}': {e}"
                        ),
                    };
                    if let Some(plain) = decrypt_value(key, text, keys).map_err(detail)? {
                        *value = Value::String(plain);
                        n += 1;
                    }
                }
            }
            if n > 0 {
                changed += 1;
            }
        }
    }
    Ok(changed)
}

/// A Secret data value that is a SOPS document, decrypted and base64-encoded again; `None` when
/// it is not base64 or holds no marker (left as it is, as in Flux). Its bytes are as sops wrote
/// them, so the MAC is checked.
fn decrypt_value(key: &str, text: &str, keys: &Keys) -> Result<Option<String>, SopsError> {
    // Go's decoder skips CR and LF inside the text
    let compact: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    let Ok(bytes) = STANDARD.decode(compact.as_bytes()) else {
        return Ok(None);
    };
    let bytes = rflux_sops::Zeroizing::new(bytes);
    let Some(input) = MARKER_ORDER.into_iter().find(|f| f.has_marker(&bytes)) else {
        return Ok(None);
    };
    let plain = rflux_sops::decrypt(&bytes, input, Format::for_path(key), keys, MacCheck::Verify)?;
    Ok(Some(STANDARD.encode(plain.as_slice())))
}

/// Flux's guard before the apply: a v1 Secret that still has a `sops` block (and is not opted
/// out) is refused, whether or not decryption is configured.
pub fn refuse_encrypted(objects: &[Value]) -> Result<(), String> {
    for obj in objects {
        if obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
            && kind(obj) == "Secret"
            && obj.get("sops").is_some()
            && !opted_out(obj)
        {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let id = match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() => format!("Secret/{ns}/{name}"),
                _ => format!("Secret/{name}"),
            };
            return Err(format!(
                "{id} is SOPS encrypted, configuring decryption is required for this secret to be reconciled"
            ));
        }
    }
    Ok(())
}

fn opted_out(obj: &Value) -> bool {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(DECRYPT_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|v| v.eq_ignore_ascii_case("disabled"))
}

/// A top-level `sops` map with a non-empty `mac`: a whole object sops encrypted.
fn has_sops_mac(obj: &Value) -> bool {
    obj.get("sops")
        .and_then(|s| s.get("mac"))
        .and_then(Value::as_str)
        .is_some_and(|m| !m.is_empty())
}

fn kind(obj: &Value) -> &str {
    obj.get("kind").and_then(Value::as_str).unwrap_or_default()
}

fn ns_name(obj: &Value) -> String {
    let get = |f: &str| {
        obj.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    format!("{}/{}", get("namespace"), get("name"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_guard_refuses_an_encrypted_v1_secret_unless_opted_out() {
        let enc = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "apps"}, "sops": {"mac": ""}});
        assert_eq!(
            refuse_encrypted(std::slice::from_ref(&enc)).unwrap_err(),
            "Secret/apps/db is SOPS encrypted, configuring decryption is required for this secret to be reconciled"
        );
        let mut off = enc.clone();
        off["metadata"]["annotations"] = json!({DECRYPT_ANNOTATION: "Disabled"});
        assert!(refuse_encrypted(&[off]).is_ok());
        // other kinds are the API server's business, as in Flux
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "sops": {}});
        assert!(refuse_encrypted(&[cm]).is_ok());
    }

    #[test]
    fn plain_objects_and_values_are_left_alone() {
        let mut objs = vec![
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"a": "aGVsbG8=", "b": "not base64!", "c": 3}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "sops": {"mac": ""}}),
        ];
        let before = objs.clone();
        assert_eq!(decrypt_objects(&mut objs, &Keys::default()).unwrap(), 0);
        assert_eq!(objs, before);
    }

    #[test]
    fn an_undecryptable_value_names_the_object_and_the_field() {
        let doc = "A=ENC[AES256_GCM,data:eA==,iv:eA==,tag:eA==,type:str]\nsops_age__list_0__map_enc=x\nsops_mac=ENC[AES256_GCM,data:eA==,iv:eA==,tag:eA==,type:str]\nsops_lastmodified=2024-01-01T00:00:00Z\n";
        let mut objs = vec![json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "apps"},
            "data": {"app.env": STANDARD.encode(doc)}})];
        let e = decrypt_objects(&mut objs, &Keys::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("decryption failed for 'Secret.v1.[noGrp]/db': failed to decrypt and format 'apps/db' Secret field 'app.env': "),
            "{e}"
        );
    }
}
