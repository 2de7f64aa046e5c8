//! `apiVersion` strings.

/// Splits `apiVersion` into group and version: `apps/v1` → `("apps", "v1")`, and the core
/// group's `v1` → `("", "v1")`.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_group_and_version() {
        assert_eq!(split_api_version("apps/v1"), ("apps", "v1"));
        assert_eq!(split_api_version("v1"), ("", "v1"));
        assert_eq!(split_api_version(""), ("", ""));
        assert_eq!(
            split_api_version("kustomize.toolkit.fluxcd.io/v1"),
            ("kustomize.toolkit.fluxcd.io", "v1")
        );
    }
}
