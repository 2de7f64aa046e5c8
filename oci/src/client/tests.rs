#![allow(clippy::unwrap_used)]

use reqwest::StatusCode;

use super::body::render_error;
use super::session::Session;
use super::*;
use crate::auth::Credentials;

fn client(registry_url: &str, creds: Credentials) -> Client {
    let repo = Repository::parse_flux_url(registry_url, false).unwrap();
    Client::with_credentials(repo, creds, TransportConfig::default(), Limits::default()).unwrap()
}

fn session(plain_http: bool) -> Session {
    Session {
        base: String::new(),
        plain_http,
    }
}

#[test]
fn realms_are_checked_before_anything_is_sent() {
    let public = client("oci://ghcr.io/org/app", Credentials::Anonymous);
    let local = client("oci://127.0.0.1:5000/app", Credentials::Anonymous);
    let https = session(false);
    let http = session(true);
    let ok = [
        (&public, &https, "https://ghcr.io/token?scope=x"),
        (&public, &https, "https://auth.example.com/token"),
        (&local, &http, "http://127.0.0.1:5000/token"),
        (&local, &http, "http://127.0.0.1:5001/token"),
        (&local, &https, "https://localhost:5001/token"),
        (&local, &https, "https://10.0.0.1/token"),
    ];
    for (c, s, realm) in ok {
        assert!(c.check_realm(s, realm).is_ok(), "{realm}");
    }
    let refused = [
        // Plain http for an https registry: credentials would go in clear text.
        (&public, &https, "http://auth.example.com/token"),
        (&local, &https, "http://127.0.0.1:5001/token"),
        (&public, &https, "ftp://auth.example.com/token"),
        (&public, &https, "file:///etc/passwd"),
        (&public, &https, "not a url"),
        // Public registries may not point at internal addresses.
        (&public, &https, "https://127.0.0.1/token"),
        (&public, &https, "https://10.1.2.3/token"),
        (&public, &https, "https://[::1]/token"),
        // Metadata endpoints, whoever asks.
        (&public, &https, "https://169.254.169.254/latest"),
        (&local, &http, "http://169.254.169.254/latest"),
        (&local, &http, "http://0.0.0.0:5001/token"),
        (&public, &https, "https://user:pw@auth.example.com/token"),
    ];
    for (c, s, realm) in refused {
        let e = c.check_realm(s, realm).unwrap_err();
        assert!(matches!(e, OciError::Auth(_)), "{realm}: {e}");
        assert!(!e.to_string().contains("pw@"), "{e}");
    }
}

#[test]
fn registry_error_bodies_render_like_go_containerregistry() {
    let one = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{"Tag":"latest"}}]}"#;
    assert_eq!(
        render_error(StatusCode::NOT_FOUND, "GET", one),
        "MANIFEST_UNKNOWN: manifest unknown; map[Tag:latest]"
    );
    let detail = br#"{"errors":[{"code":"X","message":"m","detail":{"b":[1,2.5,true,null],"a":"s","c":1e21,"d":0.00001}}]}"#;
    assert_eq!(
        render_error(StatusCode::BAD_REQUEST, "GET", detail),
        "X: m; map[a:s b:[1 2.5 true <nil>] c:1e+21 d:1e-05]"
    );
    let text = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":"unknown tag=nope"}]}"#;
    assert_eq!(
        render_error(StatusCode::NOT_FOUND, "GET", text),
        "MANIFEST_UNKNOWN: manifest unknown; unknown tag=nope"
    );
    let two = br#"{"errors":[{"code":"A","message":"a"},{"code":"B","message":"b"}]}"#;
    assert_eq!(
        render_error(StatusCode::BAD_REQUEST, "GET", two),
        "multiple errors returned: A: a; B: b"
    );
    assert_eq!(
        render_error(StatusCode::INTERNAL_SERVER_ERROR, "GET", b"boom\n\x1b[31m"),
        "unexpected status code 500 Internal Server Error: boom  [31m"
    );
    assert_eq!(
        render_error(StatusCode::NOT_FOUND, "HEAD", b""),
        "unexpected status code 404 Not Found (HEAD responses have no body, use GET for details)"
    );
    assert_eq!(
        render_error(StatusCode::BAD_GATEWAY, "GET", br#"{"errors":[]}"#),
        r#"unexpected status code 502 Bad Gateway: {"errors":[]}"#
    );
}

#[test]
fn secrets_are_scrubbed_from_messages() {
    let c = client(
        "oci://ghcr.io/org/app",
        Credentials::Basic {
            username: "user".into(),
            password: "hunter2".into(),
        },
    );
    c.add_secret("tok-123");
    let basic = session::basic_value("user", "hunter2");
    let msg = format!("echo: hunter2 Basic {basic} Bearer tok-123");
    let s = c.scrub(&msg);
    assert!(
        !s.contains("hunter2") && !s.contains(&basic) && !s.contains("tok-123"),
        "{s}"
    );
    assert!(s.contains("echo"));
    // Debug does not show them either.
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("hunter2"), "{dbg}");
}

#[test]
fn client_futures_can_be_spawned() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_sync<T: Send + Sync>() {}
    assert_sync::<Client>();
    let c = client("oci://ghcr.io/org/app", Credentials::Anonymous);
    let desc = crate::Descriptor::default();
    let dest = std::path::Path::new("/nonexistent/x");
    assert_send(&c.list_tags());
    assert_send(&c.resolve_digest("v1"));
    assert_send(&c.manifest("sha256:00"));
    assert_send(&c.manifest_raw("v1"));
    assert_send(&c.blob_to_file(&desc, dest, 1));
    assert_send(&c.blob_bytes(&desc, 1));
}
