//! The registry's configuration file (ocirepository.md §8) and the htpasswd line.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::bin::registry_bin_dir;
use super::error::RegistryError;

/// The `service` the Bearer challenge names (the token server records what clients send).
pub const BEARER_SERVICE: &str = "rflux-test-registry";

/// TLS files of one instance.
#[derive(Clone, Debug)]
pub(super) struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Set for mTLS: the CA client certificates must chain to.
    pub client_ca: Option<PathBuf>,
}

/// What goes into the config besides the address.
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub data_dir: PathBuf,
    pub tls: Option<TlsFiles>,
    pub htpasswd: Option<PathBuf>,
    /// `http://localhost:<port>/token` for `auth: silly`.
    pub token_realm: Option<String>,
    /// `validation.manifests.indexes.platforms`: `all` when set, else `none`.
    pub validate_index_children: bool,
}

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn quoted_path(p: &Path) -> String {
    quoted(&p.to_string_lossy())
}

/// The config YAML for an instance listening on `127.0.0.1:<port>`.
pub(super) fn render(s: &Settings, port: u16) -> String {
    let mut y = String::new();
    y.push_str("version: 0.1\n");
    y.push_str("log:\n  level: info\n  formatter: text\n");
    y.push_str("storage:\n");
    y.push_str(&format!(
        "  filesystem:\n    rootdirectory: {}\n",
        quoted_path(&s.data_dir)
    ));
    y.push_str("  delete:\n    enabled: true\n");
    // No background upload purging while a test runs.
    y.push_str("  maintenance:\n    uploadpurging:\n      enabled: false\n");
    y.push_str("validation:\n  manifests:\n    indexes:\n");
    y.push_str(if s.validate_index_children {
        "      platforms: all\n"
    } else {
        "      platforms: none\n"
    });
    y.push_str("http:\n");
    y.push_str(&format!(
        "  addr: {}\n",
        quoted(&format!("127.0.0.1:{port}"))
    ));
    y.push_str("  secret: \"rflux-e2e-registry-secret\"\n");
    if let Some(tls) = &s.tls {
        y.push_str("  tls:\n");
        y.push_str(&format!("    certificate: {}\n", quoted_path(&tls.cert)));
        y.push_str(&format!("    key: {}\n", quoted_path(&tls.key)));
        if let Some(ca) = &tls.client_ca {
            y.push_str(&format!("    clientcas:\n      - {}\n", quoted_path(ca)));
            y.push_str("    clientauth: require-and-verify-client-cert\n");
        }
    }
    if let Some(path) = &s.htpasswd {
        y.push_str("auth:\n  htpasswd:\n    realm: \"basic-realm\"\n");
        y.push_str(&format!("    path: {}\n", quoted_path(path)));
    } else if let Some(realm) = &s.token_realm {
        y.push_str("auth:\n  silly:\n");
        y.push_str(&format!("    realm: {}\n", quoted(realm)));
        y.push_str(&format!("    service: {}\n", quoted(BEARER_SERVICE)));
    }
    y
}

/// `user:<bcrypt hash>\n`: from Apache's `htpasswd` when installed, else from
/// `rflux-htpasswd` (built by `e2e/registry/build.sh`). The lowest bcrypt cost keeps each
/// authenticated request cheap (the registry checks the hash on every request).
pub(super) fn htpasswd_line(user: &str, password: &str) -> Result<String, RegistryError> {
    if user.is_empty() || user.contains([':', '\n', '\r']) || password.contains(['\n', '\r']) {
        return Err(RegistryError::Htpasswd(
            "the user must be non-empty without ':' or newlines, the password without newlines"
                .into(),
        ));
    }
    let line = if let Some(tool) = find_in_path("htpasswd") {
        let out = Command::new(tool)
            .args(["-nbB", "-C", "4", user, password])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| RegistryError::Htpasswd(format!("running htpasswd: {e}")))?;
        if !out.status.success() {
            return Err(RegistryError::Htpasswd(format!(
                "htpasswd failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        helper_line(user, password)?
    };
    let line = line.trim();
    let valid = line
        .strip_prefix(user)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|hash| ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p)));
    if !valid {
        return Err(RegistryError::Htpasswd(format!(
            "not a bcrypt htpasswd line for {user:?}: {line:?}"
        )));
    }
    Ok(format!("{line}\n"))
}

fn helper_line(user: &str, password: &str) -> Result<String, RegistryError> {
    use std::io::Write;
    let helper = registry_bin_dir().join("rflux-htpasswd");
    if !helper.is_file() {
        return Err(RegistryError::Htpasswd(format!(
            "neither Apache's htpasswd nor {} is installed: build it with `e2e/registry/build.sh`",
            helper.display()
        )));
    }
    let mut child = Command::new(&helper)
        .arg(user)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RegistryError::Htpasswd(format!("running {}: {e}", helper.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(format!("{password}\n").as_bytes())
            .map_err(|e| RegistryError::Htpasswd(format!("writing the password: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| RegistryError::Htpasswd(format!("running {}: {e}", helper.display())))?;
    if !out.status.success() {
        return Err(RegistryError::Htpasswd(format!(
            "{} failed ({}): {}",
            helper.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            data_dir: PathBuf::from("/tmp/x y/data"),
            tls: None,
            htpasswd: None,
            token_realm: None,
            validate_index_children: false,
        }
    }

    #[test]
    fn http_config_has_the_mandatory_parts() {
        let y = render(&settings(), 5000);
        assert!(y.starts_with("version: 0.1\n"), "{y}");
        assert!(y.contains("rootdirectory: \"/tmp/x y/data\""), "{y}");
        assert!(y.contains("  delete:\n    enabled: true\n"), "{y}");
        assert!(y.contains("addr: \"127.0.0.1:5000\""), "{y}");
        assert!(y.contains("secret: "), "{y}");
        assert!(!y.contains("tls:") && !y.contains("auth:"), "{y}");
        assert!(y.contains("indexes:\n      platforms: none\n"), "{y}");
    }

    #[test]
    fn tls_auth_sections() {
        let mut s = settings();
        s.tls = Some(TlsFiles {
            cert: "/p/s.crt".into(),
            key: "/p/s.key".into(),
            client_ca: Some("/p/ca.crt".into()),
        });
        s.token_realm = Some("http://127.0.0.1:1/token".into());
        let y = render(&s, 1);
        assert!(y.contains("certificate: \"/p/s.crt\""), "{y}");
        assert!(y.contains("clientcas:\n      - \"/p/ca.crt\""), "{y}");
        assert!(
            y.contains("auth:\n  silly:\n    realm: \"http://127.0.0.1:1/token\""),
            "{y}"
        );
        assert!(y.contains(&format!("service: \"{BEARER_SERVICE}\"")), "{y}");
        s.tls = None;
        s.token_realm = None;
        s.htpasswd = Some("/p/htpasswd".into());
        let y = render(&s, 1);
        assert!(
            y.contains("auth:\n  htpasswd:\n    realm: \"basic-realm\"\n    path: \"/p/htpasswd\""),
            "{y}"
        );
    }

    #[test]
    fn htpasswd_refuses_bad_users() {
        for user in ["", "a:b", "a\nb"] {
            assert!(htpasswd_line(user, "pw").is_err(), "{user:?}");
        }
        assert!(htpasswd_line("u", "p\nw").is_err());
    }
}
