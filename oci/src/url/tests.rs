#![allow(clippy::unwrap_used)]

use super::*;

fn repo(url: &str) -> Repository {
    Repository::parse_flux_url(url, false).unwrap()
}

fn err(url: &str) -> String {
    Repository::parse_flux_url(url, false)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_url_without_the_oci_prefix_is_refused_with_fluxs_message() {
    for url in [
        "ghcr.io/org/app",
        "https://ghcr.io/org/app",
        "OCI://ghcr.io/org/app",
        "oci:/ghcr.io/org/app",
        "",
    ] {
        assert_eq!(
            err(url),
            "URL must be in format 'oci://<domain>/<org>/<repo>'",
            "{url}"
        );
    }
}

#[test]
fn a_tag_after_the_path_is_refused_naming_the_tag() {
    assert_eq!(
        err("oci://127.0.0.1:5000/app:1.0"),
        "URL must not contain a tag; remove ':1.0'"
    );
    assert_eq!(
        err("oci://ghcr.io/org/app:v1.2.3"),
        "URL must not contain a tag; remove ':v1.2.3'"
    );
    // No registry part: the whole name is the repository.
    assert_eq!(
        err("oci://app:latest"),
        "URL must not contain a tag; remove ':latest'"
    );
    // Go's Split(...)[1]: the text between the first and the second colon.
    assert_eq!(
        err("oci://ghcr.io/app:a:b"),
        "URL must not contain a tag; remove ':a'"
    );
    assert!(matches!(
        Repository::parse_flux_url("oci://ghcr.io/app:1.0", false),
        Err(UrlError::Tag(t)) if t == "1.0"
    ));
}

#[test]
fn a_host_and_port_and_a_nested_path_are_kept_as_written() {
    let r = repo("oci://127.0.0.1:5000/apps/podinfo");
    assert_eq!(r.registry, "127.0.0.1:5000");
    assert_eq!(r.path, "apps/podinfo");
    assert!(!r.insecure);
    assert_eq!(r.to_string(), "127.0.0.1:5000/apps/podinfo");
    assert_eq!(r.scope("pull"), "repository:apps/podinfo:pull");
    let r = repo("oci://ghcr.io/a/b/c/d-e_f.g");
    assert_eq!(
        (r.registry.as_str(), r.path.as_str()),
        ("ghcr.io", "a/b/c/d-e_f.g")
    );
    assert!(
        Repository::parse_flux_url("oci://ghcr.io/org/app", true)
            .unwrap()
            .insecure
    );
}

#[test]
fn docker_hub_names_are_normalised_like_go_containerregistry() {
    let cases = [
        ("oci://docker.io/nginx", "index.docker.io", "library/nginx"),
        ("oci://docker.io/foo/bar", "index.docker.io", "foo/bar"),
        (
            "oci://index.docker.io/nginx",
            "index.docker.io",
            "library/nginx",
        ),
        (
            "oci://index.docker.io/foo/bar",
            "index.docker.io",
            "foo/bar",
        ),
        // Only the exact alias is rewritten.
        (
            "oci://registry-1.docker.io/nginx",
            "registry-1.docker.io",
            "nginx",
        ),
        ("oci://docker.io:443/xx", "docker.io:443", "xx"),
        // No '.' or ':' in the first element: all of it is a Docker Hub repository.
        ("oci://nginx", "index.docker.io", "library/nginx"),
        ("oci://localhost/xx", "index.docker.io", "localhost/xx"),
        ("oci://myorg/app", "index.docker.io", "myorg/app"),
    ];
    for (url, registry, path) in cases {
        let r = repo(url);
        assert_eq!(
            (r.registry.as_str(), r.path.as_str()),
            (registry, path),
            "{url}"
        );
    }
}

#[test]
fn invalid_repository_names_get_go_containerregistrys_messages() {
    assert_eq!(
        err("oci://ghcr.io/Org/app"),
        "repository can only contain the characters `abcdefghijklmnopqrstuvwxyz0123456789_-./`: Org/app"
    );
    assert_eq!(
        err("oci://ghcr.io/x@sha256:abc"),
        "repository can only contain the characters `abcdefghijklmnopqrstuvwxyz0123456789_-./`: x@sha256:abc"
    );
    assert_eq!(
        err("oci://ghcr.io/a"),
        "repository must be between 2 and 255 characters in length: a"
    );
    assert_eq!(
        err("oci://ghcr.io/"),
        "repository must be between 2 and 255 characters in length: "
    );
    let long = format!("oci://ghcr.io/{}", "a".repeat(256));
    assert!(err(&long).starts_with("repository must be between 2 and 255"));
    assert!(
        Repository::parse_flux_url(&format!("oci://ghcr.io/{}", "a".repeat(255)), false).is_ok()
    );
    assert_eq!(err("oci://"), "a repository name must be specified");
}

#[test]
fn registries_must_be_uri_authorities() {
    for (url, registry) in [
        ("oci://user@host.io/xx", "user@host.io"),
        ("oci://ghcr.io:tag/xx", "ghcr.io:tag"),
        ("oci://host.io:abc/xx", "host.io:abc"),
        ("oci://ho st.io/xx", "ho st.io"),
        ("oci://[fe80::1%25eth0]:5000/xx", "[fe80::1%25eth0]:5000"),
        ("oci://h.io?x/xx", "h.io?x"),
        ("oci://[::1/xx", "[::1"),
    ] {
        assert_eq!(
            err(url),
            format!("registries must be valid RFC 3986 URI authorities: {registry}"),
            "{url}"
        );
    }
    // Forms Go's url.Parse lets through.
    for (url, registry) in [
        ("oci://host.io:5000:1/xx", "host.io:5000:1"),
        ("oci://::1/xx", "::1"),
        ("oci://[::1]:5000/xx", "[::1]:5000"),
        ("oci://host.io:/xx", "host.io:"),
        ("oci://host_x.io/xx", "host_x.io"),
        ("oci://LOCALHOST:5000/aa", "LOCALHOST:5000"),
    ] {
        assert_eq!(repo(url).registry, registry, "{url}");
    }
    assert_eq!(repo("oci://ghcr.io/a//b").path, "a//b");
}

#[test]
fn scheme_policy_follows_go_containerregistrys_heuristic() {
    use Scheme::*;
    let cases = [
        ("oci://localhost:5000/xx", HttpsThenHttp),
        ("oci://LOCALHOST:5000/xx", HttpsOnly),
        ("oci://foo.localhost/xx", HttpsThenHttp),
        ("oci://foo.localhost:5000/xx", HttpsThenHttp),
        ("oci://foo.localhost:123456/xx", HttpsOnly),
        ("oci://foo.localhost.io/xx", HttpsOnly),
        ("oci://127.0.0.1:5000/xx", HttpsThenHttp),
        ("oci://127.0.0.1/xx", HttpsThenHttp),
        // Anything containing the loopback strings.
        ("oci://127.0.0.1.nip.io/xx", HttpsThenHttp),
        ("oci://x127.0.0.10:5000/xx", HttpsThenHttp),
        ("oci://127.0.0.2:5000/xx", HttpsOnly),
        ("oci://[::1]:5000/xx", HttpsThenHttp),
        ("oci://[fe80::1]:5000/xx", HttpsThenHttp),
        // RFC 1918.
        ("oci://10.1.2.3:5000/xx", HttpsThenHttp),
        ("oci://172.16.0.1:80/xx", HttpsThenHttp),
        ("oci://172.31.255.255/xx", HttpsThenHttp),
        ("oci://172.32.0.1/xx", HttpsOnly),
        ("oci://192.168.1.1/xx", HttpsThenHttp),
        ("oci://192.169.1.1/xx", HttpsOnly),
        ("oci://100.64.0.1/xx", HttpsOnly),
        ("oci://169.254.169.254/xx", HttpsOnly),
        ("oci://0.0.0.0:5000/xx", HttpsOnly),
        ("oci://ghcr.io/org/app", HttpsOnly),
        ("oci://docker.io/nginx", HttpsOnly),
    ];
    for (url, want) in cases {
        assert_eq!(repo(url).scheme_policy(), want, "{url}");
    }
    // insecure: HTTPS is still tried first (name.Insecure makes Scheme() "http", and Ping
    // tries https then http).
    let r = Repository::parse_flux_url("oci://ghcr.io/org/app", true).unwrap();
    assert_eq!(r.scheme_policy(), HttpsThenHttp);
}
