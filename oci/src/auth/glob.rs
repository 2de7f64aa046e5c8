//! Go's `path/filepath.Match` for one host label: `*`, `?`, `[...]` classes (ranges, `^`
//! negation) and `\` escapes. A malformed pattern matches nothing (Go returns
//! `ErrBadPattern`, which the keychain treats as no match). Matching is linear-time
//! backtracking on the last `*`, so hostile patterns cannot blow up.

#[derive(Debug, PartialEq)]
enum Token {
    Star,
    Any,
    Lit(char),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    fn accepts(&self, c: char) -> bool {
        match self {
            Token::Star => true,
            Token::Any => c != '/',
            Token::Lit(l) => *l == c,
            Token::Class { negated, ranges } => {
                c != '/' && ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
        }
    }
}

fn escaped(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<char> {
    match chars.next()? {
        '\\' => chars.next(),
        '-' | ']' => None,
        c => Some(c),
    }
}

fn tokens(pattern: &str) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '*' => Token::Star,
            '?' => Token::Any,
            '\\' => Token::Lit(chars.next()?),
            '[' => {
                let negated = chars.next_if_eq(&'^').is_some();
                let mut ranges = Vec::new();
                loop {
                    if chars.peek() == Some(&']') && !ranges.is_empty() {
                        chars.next();
                        break;
                    }
                    let lo = escaped(&mut chars)?;
                    let hi = if chars.next_if_eq(&'-').is_some() {
                        escaped(&mut chars)?
                    } else {
                        lo
                    };
                    ranges.push((lo, hi));
                }
                Token::Class { negated, ranges }
            }
            c => Token::Lit(c),
        });
    }
    Some(out)
}

/// Whether `name` matches the glob `pattern`.
pub(super) fn matches(pattern: &str, name: &str) -> bool {
    let Some(toks) = tokens(pattern) else {
        return false;
    };
    let name: Vec<char> = name.chars().collect();
    let (mut t, mut n) = (0usize, 0usize);
    // The position after the last star seen, and the name position it resumes from.
    let mut resume: Option<(usize, usize)> = None;
    while n < name.len() {
        match toks.get(t) {
            Some(Token::Star) => {
                resume = Some((t + 1, n));
                t += 1;
            }
            Some(tok) if tok.accepts(name[n]) => {
                t += 1;
                n += 1;
            }
            _ => match resume {
                // A star never spans a separator.
                Some((rt, rn)) if name[rn] != '/' => {
                    resume = Some((rt, rn + 1));
                    t = rt;
                    n = rn + 1;
                }
                _ => return false,
            },
        }
    }
    toks[t..].iter().all(|tok| *tok == Token::Star)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_like_go_filepath_match() {
        let cases = [
            ("*", "registry", true),
            ("*", "", true),
            ("reg*", "registry", true),
            ("*try", "registry", true),
            ("r*g*y", "registry", true),
            ("r*x", "registry", false),
            ("?egistry", "registry", true),
            ("?", "", false),
            ("registry", "Registry", false),
            ("[a-c]b", "bb", true),
            ("[a-c]b", "db", false),
            ("[^a-c]b", "db", true),
            ("[^a-c]b", "ab", false),
            ("[xyz]", "y", true),
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("a*", "a/b", false),
            // Malformed patterns match nothing.
            ("[", "a", false),
            ("[]", "a", false),
            ("[a-", "a", false),
            ("a\\", "a", false),
            ("[-]", "-", false),
            ("[\\-]", "-", true),
        ];
        for (p, n, want) in cases {
            assert_eq!(matches(p, n), want, "{p:?} vs {n:?}");
        }
    }

    #[test]
    fn many_stars_against_a_long_name_stay_fast() {
        let pattern = "*a".repeat(200) + "b";
        let name = "a".repeat(5000);
        let started = std::time::Instant::now();
        assert!(!matches(&pattern, &name));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
