#![allow(clippy::unwrap_used)]

use super::*;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn basic(u: &str, p: &str) -> Credentials {
    Credentials::Basic {
        username: u.into(),
        password: p.into(),
    }
}

fn keychain(auths: serde_json::Value) -> Keychain {
    let doc = serde_json::json!({ "auths": auths });
    Keychain::from_dockerconfigjson(doc.to_string().as_bytes()).unwrap()
}

#[test]
fn a_plain_host_key_matches_every_repository_of_that_registry() {
    let k = keychain(serde_json::json!({"127.0.0.1:5000": {"username": "u", "password": "p"}}));
    assert_eq!(k.resolve("127.0.0.1:5000/apps/podinfo"), basic("u", "p"));
    assert_eq!(k.resolve("127.0.0.1:5000"), basic("u", "p"));
    // Another port, another host.
    assert_eq!(
        k.resolve("127.0.0.1:5001/apps/podinfo"),
        Credentials::Anonymous
    );
    assert_eq!(
        k.resolve("127.0.0.2:5000/apps/podinfo"),
        Credentials::Anonymous
    );
    assert_eq!(k.resolve("127.0.0.1/apps/podinfo"), Credentials::Anonymous);
}

#[test]
fn the_auth_field_wins_over_username_and_password() {
    let k = keychain(serde_json::json!({
        "a.io": {"username": "ignored", "password": "ignored", "auth": b64("real:pass:with:colons")},
        "b.io": {"auth": b64("u:p").trim_end_matches('=')},
    }));
    assert_eq!(k.resolve("a.io/x"), basic("real", "pass:with:colons"));
    // Unpadded base64 is accepted too.
    assert_eq!(k.resolve("b.io/x"), basic("u", "p"));
}

#[test]
fn a_bad_auth_field_fails_the_keychain_without_echoing_it() {
    for auth in [b64("no-colon"), "!!!not-base64!!!".to_string()] {
        let doc = serde_json::json!({"auths": {"a.io": {"auth": auth}}});
        let e = Keychain::from_dockerconfigjson(doc.to_string().as_bytes()).unwrap_err();
        assert!(e.to_string().contains("unable to decode auth field"), "{e}");
        assert!(!e.to_string().contains(&auth), "{e}");
    }
    let e =
        Keychain::from_dockerconfigjson(br#"{"auths": {"a.io": {"password": 12}}}"#).unwrap_err();
    assert!(e.to_string().contains("'password' is not a string"), "{e}");
    let e = Keychain::from_dockerconfigjson(br#"{"auths": {"a.io": {"password": "sekrit""#)
        .unwrap_err();
    assert!(!e.to_string().contains("sekrit"), "{e}");
    assert!(Keychain::from_dockerconfigjson(b"[1]").is_err());
}

#[test]
fn tokens_are_recognised_and_registry_tokens_come_first() {
    let k = keychain(serde_json::json!({
        "id.io": {"identitytoken": "idt", "username": "u", "password": "p"},
        "reg.io": {"registrytoken": "rt", "identitytoken": "idt"},
        "half.io": {"username": "only-user"},
    }));
    assert_eq!(
        k.resolve("id.io/x"),
        Credentials::IdentityToken("idt".into())
    );
    assert_eq!(
        k.resolve("reg.io/x"),
        Credentials::RegistryToken("rt".into())
    );
    // A username without a password is no credential.
    assert_eq!(k.resolve("half.io/x"), Credentials::Anonymous);
}

#[test]
fn docker_hub_keys_in_their_usual_forms() {
    for key in [
        "https://index.docker.io/v1/",
        "index.docker.io/v1/",
        "https://index.docker.io/v2/",
        "index.docker.io",
        "http://index.docker.io",
        "*.docker.io",
    ] {
        let k = keychain(serde_json::json!({ key: {"auth": b64("hub:pw")} }));
        assert_eq!(
            k.resolve("index.docker.io/library/nginx"),
            basic("hub", "pw"),
            "{key}"
        );
    }
    // Two labels against three: like go-containerregistry's keychain, `docker.io` does not
    // match the normalised registry.
    let k = keychain(serde_json::json!({"docker.io": {"auth": b64("hub:pw")}}));
    assert_eq!(
        k.resolve("index.docker.io/library/nginx"),
        Credentials::Anonymous
    );
}

#[test]
fn keys_with_paths_are_prefixes_and_the_most_specific_key_wins() {
    let k = keychain(serde_json::json!({
        "ghcr.io": {"auth": b64("host:1")},
        "ghcr.io/org": {"auth": b64("org:2")},
        "https://ghcr.io/org/team/": {"auth": b64("team:3")},
    }));
    assert_eq!(k.resolve("ghcr.io/other/app"), basic("host", "1"));
    assert_eq!(k.resolve("ghcr.io/org/app"), basic("org", "2"));
    assert_eq!(k.resolve("ghcr.io/org/team/app"), basic("team", "3"));
    // A string prefix, not a path-segment prefix (as in go-containerregistry).
    assert_eq!(k.resolve("ghcr.io/organisation/app"), basic("org", "2"));
}

#[test]
fn wildcard_labels_match_one_label_each() {
    let k = keychain(serde_json::json!({"*.registry.io": {"auth": b64("w:1")}}));
    assert_eq!(k.resolve("eu.registry.io/app"), basic("w", "1"));
    assert_eq!(k.resolve("registry.io/app"), Credentials::Anonymous);
    assert_eq!(k.resolve("a.b.registry.io/app"), Credentials::Anonymous);
}

#[test]
fn the_first_matching_entry_wins_across_secrets() {
    let mut k = keychain(serde_json::json!({"a.io": {"auth": b64("first:1")}}));
    assert!(!k.is_anonymous());
    k.extend(keychain(
        serde_json::json!({"a.io": {"auth": b64("second:2")}, "b.io": {"auth": b64("b:3")}}),
    ));
    assert_eq!(k.resolve("a.io/x"), basic("first", "1"));
    assert_eq!(k.resolve("b.io/x"), basic("b", "3"));
    assert_eq!(k.len(), 3);
}

#[test]
fn dockercfg_and_case_insensitive_fields_are_read() {
    let raw = format!(
        r#"{{"https://a.io": {{"Auth": "{}", "email": "x@y"}}}}"#,
        b64("u:p")
    );
    let k = Keychain::from_dockercfg(raw.as_bytes()).unwrap();
    assert_eq!(k.resolve("a.io/x"), basic("u", "p"));
    let raw = format!(r#"{{"AUTHS": {{"a.io": {{"auth": "{}"}}}}}}"#, b64("u:p"));
    let k = Keychain::from_dockerconfigjson(raw.as_bytes()).unwrap();
    assert_eq!(k.resolve("a.io/x"), basic("u", "p"));
}

#[test]
fn anonymous_means_no_pull_secret_at_all() {
    assert!(Keychain::anonymous().is_anonymous());
    assert_eq!(
        Keychain::anonymous().resolve("a.io/x"),
        Credentials::Anonymous
    );
    let empty = Keychain::from_dockerconfigjson(b"").unwrap();
    assert!(!empty.is_anonymous());
    assert!(empty.is_empty());
    let no_auths = Keychain::from_dockerconfigjson(b"{}").unwrap();
    assert!(!no_auths.is_anonymous());
}

#[test]
fn an_invalid_key_fails_like_go() {
    let e = Keychain::from_dockerconfigjson(br#"{"auths": {"host.io:abc": {}}}"#).unwrap_err();
    assert!(e.to_string().contains("in dockercfg invalid"), "{e}");
}

#[test]
fn debug_output_never_shows_secrets() {
    let k = keychain(serde_json::json!({
        "a.io": {"username": "user", "password": "hunter2"},
        "b.io": {"identitytoken": "idtok-secret"},
        "c.io": {"registrytoken": "regtok-secret"},
    }));
    let all = format!(
        "{k:?} {:?} {:?} {:?}",
        k.resolve("a.io/x"),
        k.resolve("b.io/x"),
        k.resolve("c.io/x")
    );
    for secret in [
        "hunter2",
        "idtok-secret",
        "regtok-secret",
        &b64("user:hunter2"),
    ] {
        assert!(!all.contains(secret), "{all}");
    }
    assert!(all.contains("user"));
}
