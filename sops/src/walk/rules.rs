//! Which values are encrypted (reference §5): the document's one rule, evaluated per leaf
//! from its path (map keys) and the comments that precede it.

use regex::Regex;

use crate::metadata::Rule;

/// A rule ready to evaluate; a regex that does not compile never matches (as in sops).
pub(crate) enum Rules {
    UnencryptedSuffix(String),
    EncryptedSuffix(String),
    UnencryptedRegex(Option<Regex>),
    EncryptedRegex(Option<Regex>),
    UnencryptedComment(Option<Regex>),
    EncryptedComment(Option<Regex>),
}

impl Rules {
    pub(crate) fn new(rule: &Rule) -> Rules {
        match rule {
            Rule::UnencryptedSuffix(s) => Rules::UnencryptedSuffix(s.clone()),
            Rule::EncryptedSuffix(s) => Rules::EncryptedSuffix(s.clone()),
            Rule::UnencryptedRegex(r) => Rules::UnencryptedRegex(go_regex(r)),
            Rule::EncryptedRegex(r) => Rules::EncryptedRegex(go_regex(r)),
            Rule::UnencryptedCommentRegex(r) => Rules::UnencryptedComment(go_regex(r)),
            Rule::EncryptedCommentRegex(r) => Rules::EncryptedComment(go_regex(r)),
        }
    }

    /// sops' `shouldBeEncrypted`: `path` holds the map keys down to the value, `comments`
    /// the comments seen so far at each enclosing level.
    pub(crate) fn encrypted(
        &self,
        path: &[&str],
        comments: &[Vec<String>],
        is_comment: bool,
    ) -> bool {
        let matches = |re: &Option<Regex>, s: &str| re.as_ref().is_some_and(|r| r.is_match(s));
        match self {
            Rules::UnencryptedSuffix(s) => !path.iter().any(|p| p.ends_with(s.as_str())),
            Rules::EncryptedSuffix(s) => path.iter().any(|p| p.ends_with(s.as_str())),
            Rules::UnencryptedRegex(re) => !path.iter().any(|p| matches(re, p)),
            Rules::EncryptedRegex(re) => path.iter().any(|p| matches(re, p)),
            Rules::UnencryptedComment(re) => !comments.iter().flatten().any(|c| matches(re, c)),
            Rules::EncryptedComment(re) => {
                let last_level = comments.len().saturating_sub(1);
                let last_len = comments.last().map_or(0, Vec::len);
                comments.iter().enumerate().any(|(i, level)| {
                    level.iter().enumerate().any(|(j, c)| {
                        // A comment that matches does not encrypt itself.
                        let itself = is_comment && i == last_level && j + 1 == last_len;
                        !itself && matches(re, c)
                    })
                })
            }
        }
    }
}

/// Compiles an RE2 pattern with Go's meaning of the Perl classes: `\d`, `\w`, `\s` and `\b`
/// are ASCII in Go, Unicode in Rust, so they are rewritten to explicit ASCII classes.
pub(crate) fn go_regex(pattern: &str) -> Option<Regex> {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(next) = chars.next() else {
            out.push('\\');
            break;
        };
        match next {
            'd' => out.push_str("[0-9]"),
            'D' => out.push_str("[^0-9]"),
            'w' => out.push_str("[0-9A-Za-z_]"),
            'W' => out.push_str("[^0-9A-Za-z_]"),
            's' => out.push_str(r"[\t\n\f\r ]"),
            'S' => out.push_str(r"[^\t\n\f\r ]"),
            'b' => out.push_str(r"(?-u:\b)"),
            'B' => out.push_str(r"(?-u:\B)"),
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    regex::RegexBuilder::new(&out)
        .size_limit(1 << 20)
        .build()
        .ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn go_classes_are_ascii() {
        let d = go_regex(r"^\d+$").unwrap();
        assert!(d.is_match("123"));
        assert!(!d.is_match("١٢٣"), "Arabic-Indic digits are not \\d in Go");
        let w = go_regex(r"^[\w-]+$").unwrap();
        assert!(w.is_match("a_b-c"));
        assert!(!w.is_match("é"));
        assert!(go_regex(r"\bdata\b").unwrap().is_match("x data y"));
        assert!(go_regex(r"a\\d").unwrap().is_match(r"a\d"));
        assert!(
            go_regex("^.$").unwrap().is_match("é"),
            "`.` is a whole character"
        );
        assert!(go_regex("(").is_none());
    }

    #[test]
    fn rule_semantics() {
        let path = ["data", "password"];
        let r = Rules::new(&Rule::EncryptedRegex("^(data|stringData)$".into()));
        assert!(r.encrypted(&path, &[], false));
        assert!(!r.encrypted(&["metadata", "name"], &[], false));
        let r = Rules::new(&Rule::UnencryptedSuffix("_unencrypted".into()));
        assert!(!r.encrypted(&["a_unencrypted", "b"], &[], false));
        assert!(r.encrypted(&[], &[], true));
        let r = Rules::new(&Rule::EncryptedRegex("(".into()));
        assert!(!r.encrypted(&path, &[], false));
        let r = Rules::new(&Rule::EncryptedCommentRegex("sops:enc".into()));
        let stack = vec![vec![], vec!["sops:enc".to_string()]];
        assert!(r.encrypted(&path, &stack, false));
        assert!(
            !r.encrypted(&path, &stack, true),
            "the marker comment stays plain"
        );
    }
}
