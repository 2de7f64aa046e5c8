//! Why Argo-style planning refuses its input.
//!
//! Argo itself ignores most invalid annotation values (a bad wave gives 0, an unknown hook type
//! or sync option is skipped), and so do we; those become [`super::plan::Plan::notes`]. The
//! errors here are the cases we refuse: objects that cannot be identified, sync options we do
//! not implement (ignoring them would change what the user asked for), and invalid values of
//! our own Kustomization annotations.

/// The longest annotation value quoted in a message.
const QUOTE_MAX: usize = 80;

/// A refusal of the Argo-style planning.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgoError {
    /// An object lacks `apiVersion`, `kind` or a name.
    #[error("object #{index} has no {field}")]
    MissingField {
        /// Position of the object in its input list.
        index: usize,
        /// The missing field.
        field: &'static str,
    },
    /// An object asks for a sync option we do not implement.
    #[error("{object}: sync option {option:?} is not supported: {reason}")]
    RefusedSyncOption {
        /// `Kind/namespace/name` of the object.
        object: String,
        /// The option, as written.
        option: String,
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// A Kustomization-level sync option we do not implement.
    #[error("annotation {key}: option {option:?} is not supported: {reason}")]
    RefusedAppOption {
        /// The annotation.
        key: &'static str,
        /// The option, as written.
        option: String,
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// One of our Kustomization annotations has an invalid value.
    #[error("annotation {key}: {value:?} is not valid: {expected}")]
    InvalidAnnotation {
        /// The annotation.
        key: &'static str,
        /// The value (cut to a few dozen characters).
        value: String,
        /// What is accepted.
        expected: String,
    },
}

/// `text` cut to [`QUOTE_MAX`] characters for a message.
pub(crate) fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_in_messages() {
        let long = "x".repeat(500);
        let q = quote(&long);
        assert_eq!(q.chars().count(), QUOTE_MAX + 1);
        assert!(q.ends_with('…'));
        assert_eq!(quote("short"), "short");
    }
}
