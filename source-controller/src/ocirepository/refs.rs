//! Which manifest `spec.ref` names (pure): Flux's precedence (digest, semver, tag, `latest`),
//! semver selection among the registry's tags, and the revision strings.

use regex::Regex;
use rflux_common::api::ocirepository::{DEFAULT_OCI_TAG, OciRepositoryRef};

use crate::gitrepository::semver::{Constraint, parse_version};

/// What `spec.ref` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefChoice {
    /// A manifest digest (`sha256:<hex>`).
    Digest(String),
    /// The highest tag matching a constraint, among the tags matching an optional filter.
    Semver {
        constraint: String,
        filter: Option<String>,
    },
    /// A tag.
    Tag(String),
}

/// Errors resolving the reference (Flux's `ReadOperationFailed` messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("semver '{constraint}' parse error: {detail}")]
    Constraint { constraint: String, detail: String },
    #[error("failed to compile regex '{filter}': {detail}")]
    Filter { filter: String, detail: String },
    #[error("no match found for semver: {0}")]
    NoMatch(String),
    #[error("digest '{0}' is not of the form sha256:<64 hex>")]
    Digest(String),
}

impl RefChoice {
    /// Flux's precedence: digest, then semver, then tag; nothing set means `latest`.
    pub fn from_spec(r: Option<&OciRepositoryRef>) -> Self {
        let set = |v: Option<&String>| v.filter(|s| !s.is_empty()).cloned();
        let Some(r) = r else {
            return RefChoice::Tag(DEFAULT_OCI_TAG.to_string());
        };
        if let Some(d) = set(r.digest.as_ref()) {
            return RefChoice::Digest(d);
        }
        if let Some(c) = set(r.semver.as_ref()) {
            return RefChoice::Semver {
                constraint: c,
                filter: set(r.semver_filter.as_ref()),
            };
        }
        RefChoice::Tag(set(r.tag.as_ref()).unwrap_or_else(|| DEFAULT_OCI_TAG.to_string()))
    }
}

/// The highest tag satisfying `constraint`, among the tags matching `filter` (a Go-style regular
/// expression applied to the raw tag). Tags parse loosely (an optional `v`, three numeric parts);
/// the original tag string is returned.
pub fn select_semver_tag(
    tags: &[String],
    constraint: &str,
    filter: Option<&str>,
) -> Result<String, RefError> {
    let c = Constraint::parse(constraint).map_err(|e| RefError::Constraint {
        constraint: constraint.to_string(),
        detail: e.to_string(),
    })?;
    let re = match filter {
        Some(f) => Some(Regex::new(f).map_err(|e| RefError::Filter {
            filter: f.to_string(),
            detail: e.to_string(),
        })?),
        None => None,
    };
    let mut best: Option<(&str, semver::Version)> = None;
    for t in tags {
        if re.as_ref().is_some_and(|re| !re.is_match(t)) || !three_parts(t) {
            continue;
        }
        let Some(v) = parse_version(t) else { continue };
        if !c.matches(&v) {
            continue;
        }
        if best.as_ref().is_none_or(|(_, b)| v > *b) {
            best = Some((t, v));
        }
    }
    best.map(|(t, _)| t.to_string())
        .ok_or_else(|| RefError::NoMatch(constraint.to_string()))
}

/// Whether the version core (before any `-` or `+`) has exactly three dot-separated parts, as
/// Flux's strict version parsing wants.
fn three_parts(tag: &str) -> bool {
    let t = tag.strip_prefix('v').unwrap_or(tag);
    let core = t.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks a `ref.digest` value.
pub fn check_digest(d: &str) -> Result<(), RefError> {
    let ok = d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    });
    if ok {
        Ok(())
    } else {
        Err(RefError::Digest(d.to_string()))
    }
}

/// The revision Flux writes: `<tag>@<digest>` for tags and semver, the bare digest for a digest
/// reference.
pub fn revision(tag: Option<&str>, digest: &str) -> String {
    match tag {
        Some(t) => format!("{t}@{digest}"),
        None => digest.to_string(),
    }
}

/// The artifact's file name: the part of the revision after the last `@` (prefix included),
/// plus `.tar.gz`.
pub fn artifact_file_name(revision: &str) -> String {
    let digest = revision.rsplit('@').next().unwrap_or(revision);
    format!("{digest}.tar.gz")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tags(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn precedence_is_digest_semver_tag_latest() {
        let r = |v: serde_json::Value| serde_json::from_value::<OciRepositoryRef>(v).unwrap();
        assert_eq!(RefChoice::from_spec(None), RefChoice::Tag("latest".into()));
        assert_eq!(
            RefChoice::from_spec(Some(&r(serde_json::json!({})))),
            RefChoice::Tag("latest".into())
        );
        let all = r(serde_json::json!({"digest": "sha256:a", "semver": "1.x", "tag": "t"}));
        assert_eq!(
            RefChoice::from_spec(Some(&all)),
            RefChoice::Digest("sha256:a".into())
        );
        let sv = r(serde_json::json!({"semver": "1.x", "semverFilter": "x", "tag": "t"}));
        assert_eq!(
            RefChoice::from_spec(Some(&sv)),
            RefChoice::Semver {
                constraint: "1.x".into(),
                filter: Some("x".into())
            }
        );
        let t = r(serde_json::json!({"tag": "t", "semver": ""}));
        assert_eq!(RefChoice::from_spec(Some(&t)), RefChoice::Tag("t".into()));
    }

    #[test]
    fn semver_selection_matches_the_flux_worked_example() {
        let t = tags(&["6.0.0", "v6.1.0", "6.2.0-rc.1", "latest", "6.3", "7.0.0.1"]);
        assert_eq!(select_semver_tag(&t, ">=6.0.0", None).unwrap(), "v6.1.0");
        assert_eq!(
            select_semver_tag(&t, ">=6.0.0-0", None).unwrap(),
            "6.2.0-rc.1"
        );
        assert_eq!(
            select_semver_tag(&t, ">=6.0.0-0", Some(".*-rc.*")).unwrap(),
            "6.2.0-rc.1"
        );
        assert_eq!(
            select_semver_tag(&t, ">=6.0.0", Some(".*-rc.*"))
                .unwrap_err()
                .to_string(),
            "no match found for semver: >=6.0.0"
        );
        assert!(matches!(
            select_semver_tag(&t, "not a constraint", None),
            Err(RefError::Constraint { .. })
        ));
        assert!(matches!(
            select_semver_tag(&t, ">=1.0.0", Some("(")),
            Err(RefError::Filter { .. })
        ));
    }

    #[test]
    fn revisions_and_file_names() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(revision(Some("latest"), &d), format!("latest@{d}"));
        assert_eq!(revision(None, &d), d);
        assert_eq!(
            artifact_file_name(&format!("v1@{d}")),
            format!("{d}.tar.gz")
        );
        assert_eq!(artifact_file_name(&d), format!("{d}.tar.gz"));
        assert!(check_digest(&d).is_ok());
        assert!(check_digest("sha256:abc").is_err());
        assert!(check_digest(&format!("sha512:{}", "a".repeat(64))).is_err());
    }
}
