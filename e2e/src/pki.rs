//! Test PKI through the `openssl` CLI: a CA, leaf certificates (ECDSA P-256)
//! and RSA key pairs for ServiceAccount token signing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use rand::Rng;

use crate::run_cmd;

/// A certificate and its private key, both PEM files.
#[derive(Clone, Debug)]
pub(crate) struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What a leaf certificate is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Usage {
    Server,
    Client,
}

fn openssl(args: &[&str]) -> anyhow::Result<String> {
    run_cmd(Command::new("openssl").args(args))
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .with_context(|| format!("non UTF-8 path {}", p.display()))
}

fn ec_key(path: &Path) -> anyhow::Result<()> {
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        path_str(path)?,
    ])?;
    Ok(())
}

fn serial() -> String {
    // Positive 63-bit serial.
    format!("0x{:016x}", rand::rng().random::<u64>() >> 1)
}

/// Creates a self-signed CA `<dir>/<name>.crt` + `.key`.
pub(crate) fn create_ca(dir: &Path, name: &str, common_name: &str) -> anyhow::Result<CertPair> {
    let pair = CertPair {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    ec_key(&pair.key)?;
    let conf = dir.join(format!("{name}.cnf"));
    std::fs::write(
        &conf,
        "[req]\ndistinguished_name = dn\n[dn]\n[v3_ca]\n\
         basicConstraints = critical,CA:TRUE\n\
         keyUsage = critical,keyCertSign,cRLSign,digitalSignature\n\
         subjectKeyIdentifier = hash\n",
    )?;
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        path_str(&pair.key)?,
        "-subj",
        &format!("/CN={common_name}"),
        "-days",
        "3650",
        "-set_serial",
        &serial(),
        "-config",
        path_str(&conf)?,
        "-extensions",
        "v3_ca",
        "-out",
        path_str(&pair.cert)?,
    ])?;
    Ok(pair)
}

/// Issues `<dir>/<name>.crt` + `.key` signed by `ca`. `subject` is an openssl
/// subject such as `/O=system:masters/CN=admin`; `sans` are entries such as
/// `IP:127.0.0.1` or `DNS:localhost`.
pub(crate) fn issue(
    ca: &CertPair,
    dir: &Path,
    name: &str,
    subject: &str,
    sans: &[&str],
    usage: Usage,
) -> anyhow::Result<CertPair> {
    let pair = CertPair {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    ec_key(&pair.key)?;
    let csr = dir.join(format!("{name}.csr"));
    openssl(&[
        "req",
        "-new",
        "-key",
        path_str(&pair.key)?,
        "-subj",
        subject,
        "-config",
        "/dev/null",
        "-out",
        path_str(&csr)?,
    ])
    .or_else(|_| {
        // Some openssl builds insist on a distinguished_name section.
        let conf = dir.join(format!("{name}.req.cnf"));
        std::fs::write(&conf, "[req]\ndistinguished_name = dn\n[dn]\n")?;
        openssl(&[
            "req",
            "-new",
            "-key",
            path_str(&pair.key)?,
            "-subj",
            subject,
            "-config",
            path_str(&conf)?,
            "-out",
            path_str(&csr)?,
        ])
    })?;
    let mut ext = String::from(
        "basicConstraints = critical,CA:FALSE\n\
         keyUsage = critical,digitalSignature,keyEncipherment\n\
         subjectKeyIdentifier = hash\n\
         authorityKeyIdentifier = keyid\n",
    );
    ext.push_str(match usage {
        Usage::Server => "extendedKeyUsage = serverAuth\n",
        Usage::Client => "extendedKeyUsage = clientAuth\n",
    });
    if !sans.is_empty() {
        ext.push_str(&format!("subjectAltName = {}\n", sans.join(",")));
    }
    let ext_file = dir.join(format!("{name}.ext"));
    std::fs::write(&ext_file, ext)?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        path_str(&csr)?,
        "-CA",
        path_str(&ca.cert)?,
        "-CAkey",
        path_str(&ca.key)?,
        "-set_serial",
        &serial(),
        "-days",
        "3650",
        "-extfile",
        path_str(&ext_file)?,
        "-out",
        path_str(&pair.cert)?,
    ])?;
    Ok(pair)
}

/// Creates an RSA-2048 key `<dir>/<name>.key` and its public key `<name>.pub`.
pub(crate) fn rsa_key_pair(dir: &Path, name: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    let key = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        path_str(&key)?,
    ])?;
    openssl(&[
        "pkey",
        "-in",
        path_str(&key)?,
        "-pubout",
        "-out",
        path_str(&public)?,
    ])?;
    Ok((key, public))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_verify_against_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = create_ca(dir.path(), "ca", "test-ca").unwrap();
        let server = issue(
            &ca,
            dir.path(),
            "server",
            "/CN=server",
            &["IP:127.0.0.1", "DNS:localhost"],
            Usage::Server,
        )
        .unwrap();
        let client = issue(
            &ca,
            dir.path(),
            "client",
            "/O=system:masters/CN=admin",
            &[],
            Usage::Client,
        )
        .unwrap();
        for (pair, purpose) in [(&server, "sslserver"), (&client, "sslclient")] {
            let out = openssl(&[
                "verify",
                "-CAfile",
                ca.cert.to_str().unwrap(),
                "-purpose",
                purpose,
                pair.cert.to_str().unwrap(),
            ])
            .unwrap();
            assert!(out.contains("OK"), "{out}");
        }
        let text = openssl(&[
            "x509",
            "-in",
            server.cert.to_str().unwrap(),
            "-noout",
            "-text",
        ])
        .unwrap();
        assert!(text.contains("IP Address:127.0.0.1"), "{text}");
        let subject = openssl(&[
            "x509",
            "-in",
            client.cert.to_str().unwrap(),
            "-noout",
            "-subject",
        ])
        .unwrap();
        assert!(
            subject.contains("O = system:masters") && subject.contains("CN = admin"),
            "{subject}"
        );
        // A leaf must not verify as a CA for another cert.
        let other = create_ca(dir.path(), "other", "other-ca").unwrap();
        let bad = openssl(&[
            "verify",
            "-CAfile",
            other.cert.to_str().unwrap(),
            server.cert.to_str().unwrap(),
        ]);
        assert!(bad.is_err());
        let (key, public) = rsa_key_pair(dir.path(), "sa").unwrap();
        assert!(
            std::fs::read_to_string(key)
                .unwrap()
                .contains("PRIVATE KEY")
        );
        assert!(
            std::fs::read_to_string(public)
                .unwrap()
                .contains("PUBLIC KEY")
        );
    }
}
