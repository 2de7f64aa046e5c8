//! The test PKI of a TLS registry: a CA, a server certificate for `127.0.0.1`/`localhost` and
//! a client certificate (from `crate::pki`, through `openssl`).

use std::path::{Path, PathBuf};

use super::error::{RegistryError, Result};
use crate::pki::{self, Usage};

/// The test PKI of a TLS registry (all PEM files in the registry's directory).
#[derive(Clone, Debug)]
pub(super) struct Tls {
    pub ca_cert: PathBuf,
    pub ca_pem: String,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_cert_pem: String,
    pub client_key: PathBuf,
    pub client_key_pem: String,
}

/// A CA, a server certificate for `127.0.0.1`/`localhost` and a client certificate.
pub(super) fn make_pki(dir: &Path) -> Result<Tls> {
    let pki_dir = dir.join("pki");
    std::fs::create_dir_all(&pki_dir)
        .map_err(|e| RegistryError::io(format!("creating {}", pki_dir.display()), e))?;
    let ca =
        pki::create_ca(&pki_dir, "ca", "rflux test registry CA").map_err(RegistryError::Pki)?;
    let server = pki::issue(
        &ca,
        &pki_dir,
        "server",
        "/CN=127.0.0.1",
        &["IP:127.0.0.1", "DNS:localhost"],
        Usage::Server,
    )
    .map_err(RegistryError::Pki)?;
    let client = pki::issue(
        &ca,
        &pki_dir,
        "client",
        "/CN=rflux-registry-client",
        &[],
        Usage::Client,
    )
    .map_err(RegistryError::Pki)?;
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .map_err(|e| RegistryError::io(format!("reading {}", p.display()), e))
    };
    Ok(Tls {
        ca_pem: read(&ca.cert)?,
        ca_cert: ca.cert,
        server_cert: server.cert,
        server_key: server.key,
        client_cert_pem: read(&client.cert)?,
        client_key_pem: read(&client.key)?,
        client_cert: client.cert,
        client_key: client.key,
    })
}
