//! `oci`: the pure parsers of `rflux-oci` that read what a registry or a tenant sends: the
//! `oci://` URL of a spec, a manifest or index (classified by its content type, then parsed), and
//! a pull Secret's Docker config.
//!
//! Property: no panic; a parsed image manifest's digest is the one given; every descriptor of a
//! parsed manifest or index has a `sha256:` digest of 64 hex digits (what the client fetches by).

use rflux_oci::manifest::{self, Kind};
use rflux_oci::{Keychain, Repository};

/// First byte selects the parser (mod 3); for manifests the second byte's low bit selects the
/// content type sent with it (none, or the one the body claims).
pub fn oci(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            let text = String::from_utf8_lossy(body);
            for insecure in [false, true] {
                if let Ok(repo) = Repository::parse_flux_url(&text, insecure) {
                    let _ = repo.scheme_policy();
                    assert!(!repo.registry.is_empty(), "a parsed URL names a registry");
                }
            }
        }
        1 => {
            let Some((&ct, raw)) = body.split_first() else {
                return;
            };
            let content_type = (ct % 2 == 1).then_some(manifest::OCI_MANIFEST);
            let Ok((media_type, kind)) = manifest::classify(content_type, raw) else {
                return;
            };
            let digest = manifest::sha256_digest(raw);
            match kind {
                Kind::Image => {
                    if let Ok(m) = manifest::parse_image(raw.to_vec(), media_type, digest.clone()) {
                        assert_eq!(m.digest, digest);
                        for d in m.layers.iter().chain([&m.config]) {
                            assert!(manifest::validate_digest(&d.digest).is_ok(), "{}", d.digest);
                        }
                    }
                }
                Kind::Index => {
                    if let Ok(idx) = manifest::parse_index(raw) {
                        for d in &idx.manifests {
                            assert!(manifest::validate_digest(&d.digest).is_ok(), "{}", d.digest);
                        }
                        let _ = idx.child_for(manifest::DEFAULT_OS, manifest::DEFAULT_ARCHITECTURE);
                    }
                }
                Kind::Schema1 => {}
            }
        }
        _ => {
            if let Ok(k) = Keychain::from_dockerconfigjson(body) {
                for target in [
                    "docker.io/library/x",
                    "127.0.0.1:5000/a/b",
                    "ghcr.io/org/repo",
                ] {
                    let _ = k.resolve(target);
                }
            }
            if let Ok(k) = Keychain::from_dockercfg(body) {
                let _ = k.resolve("registry.example/x");
            }
        }
    }
}
