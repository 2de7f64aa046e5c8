//! The token flows against a scripted registry and token server: refresh on a new challenge,
//! OAuth2 identity tokens (and their fallback), registry tokens, Basic after an anonymous ping.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rflux_oci::{Client, Keychain, Limits, OciError, Repository, TransportConfig};
use support::{FakeServer, Reply, Seen};

/// A registry whose `/v2/` asks for a Bearer token from its own `/token`, and whose tag list
/// accepts only `Bearer <accepted>`. `token` answers the token requests.
async fn bearer_registry(
    accepted: &'static str,
    token: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
) -> FakeServer {
    let host: Arc<OnceLock<String>> = Arc::new(OnceLock::new());
    let h = host.clone();
    let challenge = move |scope: Option<&str>| {
        let mut c = format!(
            "Bearer realm=\"http://{}/token\",service=\"svc\"",
            h.get().unwrap()
        );
        if let Some(s) = scope {
            c.push_str(&format!(",scope=\"{s}\""));
        }
        c
    };
    let srv = FakeServer::start(move |req| {
        if req.path.starts_with("/token") {
            token(req)
        } else if req.path == "/v2/" {
            Reply::new(401).header("WWW-Authenticate", &challenge(None))
        } else if req.header("authorization") == Some(&format!("Bearer {accepted}")) {
            Reply::new(200).body(r#"{"name":"app","tags":["a"]}"#)
        } else {
            Reply::new(401).header(
                "WWW-Authenticate",
                &challenge(Some("repository:app:pull,push")),
            )
        }
    })
    .await;
    host.set(srv.host()).unwrap();
    srv
}

fn client(srv: &FakeServer, keychain: Keychain) -> Client {
    let repo = Repository::parse_flux_url(&format!("oci://{}/app", srv.host()), false).unwrap();
    let cfg = TransportConfig {
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    Client::new(repo, keychain, cfg, Limits::default()).unwrap()
}

fn keychain(host: &str, entry: serde_json::Value) -> Keychain {
    let doc = serde_json::json!({"auths": {host: entry}});
    Keychain::from_dockerconfigjson(doc.to_string().as_bytes()).unwrap()
}

fn query_values(path: &str, key: &str) -> Vec<String> {
    let url = reqwest::Url::parse(&format!("http://x{path}")).unwrap();
    url.query_pairs()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .collect()
}

fn token_requests(srv: &FakeServer) -> Vec<Seen> {
    srv.requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/token"))
        .collect()
}

#[tokio::test]
async fn a_new_challenge_gets_a_new_token_with_its_scope_and_one_retry() {
    let issued = Arc::new(AtomicUsize::new(0));
    let i = issued.clone();
    let srv = bearer_registry("tok-2", move |_| {
        let n = i.fetch_add(1, Ordering::SeqCst) + 1;
        Reply::new(200).body(format!(r#"{{"token":"tok-{n}"}}"#))
    })
    .await;
    let c = client(&srv, Keychain::anonymous());
    assert_eq!(c.list_tags().await.unwrap(), ["a"]);
    let tokens = token_requests(&srv);
    assert_eq!(tokens.len(), 2);
    assert_eq!(
        query_values(&tokens[0].path, "scope"),
        ["repository:app:pull"]
    );
    assert_eq!(query_values(&tokens[0].path, "service"), ["svc"]);
    // The challenge's scope goes first.
    assert_eq!(
        query_values(&tokens[1].path, "scope"),
        ["repository:app:pull,push", "repository:app:pull"]
    );
    // Anonymous: no credentials to the token server.
    assert!(tokens.iter().all(|t| t.header("authorization").is_none()));

    // A registry that keeps refusing: one retry, then Unauthorized.
    let srv = bearer_registry("never", |_| Reply::new(200).body(r#"{"token":"t"}"#)).await;
    let c = client(&srv, Keychain::anonymous());
    let e = c.list_tags().await.unwrap_err();
    assert!(matches!(e, OciError::Unauthorized { .. }), "{e}");
    let tag_requests = srv
        .requests()
        .iter()
        .filter(|r| r.path.contains("tags/list"))
        .count();
    assert_eq!(tag_requests, 2);
}

#[tokio::test]
async fn basic_credentials_go_to_the_token_server_and_the_token_to_the_registry() {
    let srv = bearer_registry("tok-basic", |req| match req.header("authorization") {
        Some(a) if a.starts_with("Basic ") => Reply::new(200).body(r#"{"token":"tok-basic"}"#),
        _ => Reply::new(401),
    })
    .await;
    let kc = keychain(
        &srv.host(),
        serde_json::json!({"username": "u", "password": "p"}),
    );
    let c = client(&srv, kc);
    assert_eq!(c.list_tags().await.unwrap(), ["a"]);
    let tags = srv
        .requests()
        .into_iter()
        .find(|r| r.path.contains("tags/list"))
        .unwrap();
    assert_eq!(tags.header("authorization"), Some("Bearer tok-basic"));

    // Wrong credentials: the token server's 401 is the answer.
    let kc = keychain(
        &srv.host(),
        serde_json::json!({"username": "u", "password": "p"}),
    );
    let srv2 = bearer_registry("x", |_| Reply::new(401).body("no")).await;
    let e = client(&srv2, kc).list_tags().await.unwrap_err();
    assert!(
        matches!(&e, OciError::Unauthorized { url, .. } if url.ends_with("/token")),
        "{e}"
    );
}

#[tokio::test]
async fn identity_tokens_use_the_oauth2_refresh_grant() {
    let srv = bearer_registry("acc-1", |req| {
        let body = String::from_utf8_lossy(&req.body).to_string();
        if req.method == "POST" && body.contains("refresh_token=id-tok") {
            Reply::new(200).body(r#"{"access_token":"acc-1","refresh_token":"r-2"}"#)
        } else {
            Reply::new(400)
        }
    })
    .await;
    let kc = keychain(&srv.host(), serde_json::json!({"identitytoken": "id-tok"}));
    let c = client(&srv, kc);
    assert_eq!(c.list_tags().await.unwrap(), ["a"]);
    let tokens = token_requests(&srv);
    assert_eq!(tokens.len(), 1);
    let form = String::from_utf8_lossy(&tokens[0].body).to_string();
    for part in [
        "grant_type=refresh_token",
        "service=svc",
        "scope=repository%3Aapp%3Apull",
        "client_id=",
    ] {
        assert!(form.contains(part), "{form}");
    }
    assert_eq!(
        tokens[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
}

#[tokio::test]
async fn a_token_server_without_oauth2_gets_the_get_flow() {
    let srv = bearer_registry("tok-get", |req| {
        if req.method == "POST" {
            Reply::new(404)
        } else {
            Reply::new(200).body(r#"{"token":"tok-get"}"#)
        }
    })
    .await;
    let kc = keychain(&srv.host(), serde_json::json!({"identitytoken": "id-tok"}));
    let c = client(&srv, kc);
    assert_eq!(c.list_tags().await.unwrap(), ["a"]);
    let methods: Vec<String> = token_requests(&srv).into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["POST", "GET"]);
}

#[tokio::test]
async fn a_registry_token_is_used_as_is() {
    let srv = bearer_registry("reg-tok", |_| Reply::new(500)).await;
    let kc = keychain(&srv.host(), serde_json::json!({"registrytoken": "reg-tok"}));
    let c = client(&srv, kc);
    assert_eq!(c.list_tags().await.unwrap(), ["a"]);
    assert!(token_requests(&srv).is_empty());
}

#[tokio::test]
async fn basic_credentials_are_sent_even_when_the_ping_needs_none() {
    let srv = FakeServer::start(|req| {
        if req.path == "/v2/" {
            Reply::new(200)
        } else if req
            .header("authorization")
            .is_some_and(|a| a.starts_with("Basic "))
        {
            Reply::new(200).body(r#"{"tags":["a"]}"#)
        } else {
            Reply::new(401).header("WWW-Authenticate", "Basic realm=\"r\"")
        }
    })
    .await;
    let kc = keychain(
        &srv.host(),
        serde_json::json!({"username": "u", "password": "p"}),
    );
    assert_eq!(client(&srv, kc).list_tags().await.unwrap(), ["a"]);
    let e = client(&srv, Keychain::anonymous())
        .list_tags()
        .await
        .unwrap_err();
    assert!(matches!(e, OciError::Unauthorized { .. }), "{e}");
}
