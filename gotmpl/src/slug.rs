//! gosimple/slug `Make` (language "en") as Flux Operator configures it: max length 63 with
//! smart truncation.

const MAX_LENGTH: usize = 63;

/// `slug.Make(s)`.
pub(crate) fn make(s: &str) -> String {
    let mut sub = String::with_capacity(s.len());
    for c in s.trim().chars() {
        match c {
            '&' => sub.push_str("and"),
            '@' => sub.push_str("at"),
            '"' | '\'' | '\u{2019}' => {}
            '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}' => sub.push('-'),
            c => sub.push(c),
        }
    }
    let ascii = deunicode::deunicode_with_tofu(&sub, "").to_lowercase();
    let mut out = String::with_capacity(ascii.len());
    for c in ascii.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            c
        } else {
            '-'
        };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let out = out.trim_matches(['-', '_']).to_string();
    if out.len() <= MAX_LENGTH {
        return out;
    }
    let b = out.as_bytes();
    for i in (0..=MAX_LENGTH).rev() {
        if b[i] == b'-' {
            return out[..i].to_string();
        }
    }
    out[..MAX_LENGTH].to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::make;

    #[test]
    fn spec_examples() {
        assert_eq!(make(">=1.0.0-rc.0"), "1-0-0-rc-0");
        assert_eq!(make(">=1.0.0"), "1-0-0");
        assert_eq!(make("  Hello & World @ Home "), "hello-and-world-at-home");
        assert_eq!(make("Ünïcödé—dash"), "unicode-dash");
        let long = "word-".repeat(20);
        assert!(make(&long).len() <= 63);
        assert!(!make(&long).ends_with('-'));
    }
}
