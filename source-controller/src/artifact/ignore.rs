//! Flux-compatible exclusion rules (`.sourceignore`, `spec.ignore` and the built-in defaults).
//!
//! The semantics follow the gitignore matcher Flux uses (the go-git `plumbing/format/gitignore`
//! package, forked by Flux into `pkg/sourceignore`), which differs from `git` itself in a few
//! places, so this module implements its own matcher instead of using the `ignore` crate:
//!
//! * a pattern is scoped to a *domain*: the path components of the directory holding the
//!   `.sourceignore` file (empty for `spec.ignore` and the defaults);
//! * patterns are evaluated last to first and the first one that matches decides (a `!` pattern
//!   re-includes);
//! * a pattern without `/` is matched against every component of the path, so `foo/` excludes
//!   everything below any directory named `foo`;
//! * a pattern with `/` is matched component by component from the start of its domain; `**`
//!   matches any number of directories, a leading `/` only anchors;
//! * each component is matched with git's `wildmatch` (`*`, `?`, `[...]` with `!`/`^` negation,
//!   ranges and `[:class:]`, `\` escapes); a malformed pattern never matches.
//!
//! Paths are handled as raw bytes so that non UTF-8 file names work.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::error::ArtifactError;

/// Name of the per-directory ignore file.
pub const IGNORE_FILE: &str = ".sourceignore";
/// VCS patterns, always applied.
pub const EXCLUDE_VCS: &str = ".git/,.gitignore,.gitmodules,.gitattributes";
/// File extensions excluded by default.
pub const EXCLUDE_EXT: &str = "*.jpg,*.jpeg,*.gif,*.png,*.wmv,*.flv,*.tar.gz,*.zip";
/// CI configuration excluded by default.
pub const EXCLUDE_CI: &str = ".github/,.circleci/,.travis.yml,.gitlab-ci.yml,appveyor.yml,.drone.yml,cloudbuild.yaml,codeship-services.yml,codeship-steps.yml";
/// Tool configuration excluded by default.
pub const EXCLUDE_EXTRA: &str = "**/.goreleaser.yml,**/.sops.yaml,**/.flux.yaml";

/// Outcome of matching one pattern against one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchResult {
    NoMatch,
    Exclude,
    Include,
}

/// One parsed ignore pattern with its domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    domain: Vec<Vec<u8>>,
    segments: Vec<Vec<u8>>,
    inclusion: bool,
    dir_only: bool,
    is_glob: bool,
}

impl Pattern {
    /// Parses one pattern line (comments and blank lines must be filtered by the caller;
    /// [`read_patterns`] does that). `domain` is the list of path components of the directory the
    /// pattern is scoped to, relative to the archive root.
    pub fn parse(line: &[u8], domain: &[Vec<u8>]) -> Pattern {
        let mut p = line;
        let mut inclusion = false;
        if let Some(rest) = p.strip_prefix(b"!") {
            inclusion = true;
            p = rest;
        }
        if !p.ends_with(b"\\ ") {
            while let Some(rest) = p.strip_suffix(b" ") {
                p = rest;
            }
        }
        let mut dir_only = false;
        if let Some(rest) = p.strip_suffix(b"/") {
            dir_only = true;
            p = rest;
        }
        let is_glob = p.contains(&b'/');
        let segments = p.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
        Pattern {
            domain: domain.to_vec(),
            segments,
            inclusion,
            dir_only,
            is_glob,
        }
    }

    /// Whether this is a `!` (re-include) pattern.
    pub fn is_inclusion(&self) -> bool {
        self.inclusion
    }

    /// Matches `path` (components relative to the archive root) against this pattern.
    pub fn matches<C: AsRef<[u8]>>(&self, path: &[C], is_dir: bool) -> MatchResult {
        if path.len() <= self.domain.len() {
            return MatchResult::NoMatch;
        }
        if self
            .domain
            .iter()
            .zip(path)
            .any(|(d, p)| d.as_slice() != p.as_ref())
        {
            return MatchResult::NoMatch;
        }
        let rest = &path[self.domain.len()..];
        let hit = if self.is_glob {
            self.glob_match(rest, is_dir)
        } else {
            self.simple_name_match(rest, is_dir)
        };
        match (hit, self.inclusion) {
            (false, _) => MatchResult::NoMatch,
            (true, true) => MatchResult::Include,
            (true, false) => MatchResult::Exclude,
        }
    }

    fn simple_name_match<C: AsRef<[u8]>>(&self, path: &[C], is_dir: bool) -> bool {
        let Some(pat) = self.segments.first() else {
            return false;
        };
        let last = path.len().saturating_sub(1);
        for (i, name) in path.iter().enumerate() {
            if !wildmatch(pat, name.as_ref()) {
                continue;
            }
            if self.dir_only && !is_dir && i == last {
                return false;
            }
            // A re-include only applies to the entry it names, not to what lies below it.
            if i < last && self.inclusion {
                continue;
            }
            return true;
        }
        false
    }

    fn glob_match<C: AsRef<[u8]>>(&self, mut path: &[C], is_dir: bool) -> bool {
        let mut matched = false;
        let mut can_traverse = false;
        let mut trailing_star = false;
        let last = self.segments.len().saturating_sub(1);
        for (i, seg) in self.segments.iter().enumerate() {
            if seg.is_empty() {
                can_traverse = false;
                continue;
            }
            if seg.as_slice() == b"**" {
                if i == last {
                    matched = !path.is_empty() || is_dir;
                    trailing_star = matched;
                    break;
                }
                can_traverse = true;
                continue;
            }
            let Some((first, _)) = path.split_first() else {
                return false;
            };
            if can_traverse {
                can_traverse = false;
                loop {
                    let Some((e, tail)) = path.split_first() else {
                        return false;
                    };
                    path = tail;
                    if wildmatch(seg, e.as_ref()) {
                        matched = true;
                        break;
                    }
                    if path.is_empty() {
                        return false;
                    }
                }
            } else {
                if !wildmatch(seg, first.as_ref()) {
                    return false;
                }
                matched = true;
                path = &path[1..];
                // A file cannot satisfy a pattern that still expects more directories.
                if path.is_empty() && i < last {
                    matched = false;
                }
            }
        }
        if matched && (path.is_empty() || trailing_star) {
            if self.dir_only && !is_dir {
                matched = false;
            }
        } else if matched && self.inclusion {
            matched = false;
        }
        matched
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wild {
    Match,
    NoMatch,
    AbortAll,
}

/// git `wildmatch` without `WM_PATHNAME`/`WM_CASEFOLD`, on a single path component.
pub fn wildmatch(pattern: &[u8], text: &[u8]) -> bool {
    dowild(pattern, text) == Wild::Match
}

fn dowild(p: &[u8], t: &[u8]) -> Wild {
    let (mut pi, mut ti) = (0usize, 0usize);
    while pi < p.len() {
        let pc = p[pi];
        if ti >= t.len() && pc != b'*' {
            return Wild::AbortAll;
        }
        let tc = t.get(ti).copied().unwrap_or(0);
        match pc {
            b'\\' => {
                if pi + 1 >= p.len() {
                    return Wild::NoMatch;
                }
                pi += 1;
                if tc != p[pi] {
                    return Wild::NoMatch;
                }
                pi += 1;
                ti += 1;
            }
            b'?' => {
                pi += 1;
                ti += 1;
            }
            b'*' => {
                while pi < p.len() && p[pi] == b'*' {
                    pi += 1;
                }
                if pi >= p.len() {
                    return Wild::Match;
                }
                while ti < t.len() {
                    let r = dowild(&p[pi..], &t[ti..]);
                    if r != Wild::NoMatch {
                        return r;
                    }
                    ti += 1;
                }
                return Wild::AbortAll;
            }
            b'[' => match match_class(p, pi, tc) {
                ClassResult::Abort => return Wild::AbortAll,
                ClassResult::Done { matched, end } => {
                    if !matched {
                        return Wild::NoMatch;
                    }
                    pi = end + 1;
                    ti += 1;
                }
            },
            _ => {
                if tc != pc {
                    return Wild::NoMatch;
                }
                pi += 1;
                ti += 1;
            }
        }
    }
    if ti < t.len() {
        Wild::NoMatch
    } else {
        Wild::Match
    }
}

enum ClassResult {
    Abort,
    /// `end` is the index of the closing `]`; `matched` already accounts for negation.
    Done {
        matched: bool,
        end: usize,
    },
}

/// Evaluates the bracket expression starting at `p[open] == b'['` against byte `tc`.
fn match_class(p: &[u8], open: usize, tc: u8) -> ClassResult {
    let mut pi = open + 1;
    let Some(&first) = p.get(pi) else {
        return ClassResult::Abort;
    };
    let mut pc = first;
    let negated = pc == b'!' || pc == b'^';
    if negated {
        pi += 1;
        let Some(&c) = p.get(pi) else {
            return ClassResult::Abort;
        };
        pc = c;
    }
    let mut prev: Option<u8> = None;
    let mut matched = false;
    loop {
        // `cur` becomes `prev` for the next member; `None` means "cannot start a range".
        let cur: Option<u8>;
        if pc == b'\\' {
            pi += 1;
            let Some(&c) = p.get(pi) else {
                return ClassResult::Abort;
            };
            if tc == c {
                matched = true;
            }
            cur = Some(c);
        } else if pc == b'-' && prev.is_some() && pi + 1 < p.len() && p[pi + 1] != b']' {
            pi += 1;
            let mut hi = p[pi];
            if hi == b'\\' {
                pi += 1;
                let Some(&c) = p.get(pi) else {
                    return ClassResult::Abort;
                };
                hi = c;
            }
            let lo = prev.unwrap_or(0);
            if tc >= lo && tc <= hi {
                matched = true;
            }
            cur = None;
        } else if pc == b'[' && p.get(pi + 1) == Some(&b':') {
            let start = pi + 2;
            let mut end = start;
            while end < p.len() && p[end] != b']' {
                end += 1;
            }
            if end >= p.len() {
                return ClassResult::Abort;
            }
            if end == start || p[end - 1] != b':' {
                // Not a `[:class:]`: the `[` is a literal member.
                if tc == b'[' {
                    matched = true;
                }
                cur = Some(b'[');
            } else {
                match posix_class(&p[start..end - 1], tc) {
                    None => return ClassResult::Abort,
                    Some(true) => matched = true,
                    Some(false) => {}
                }
                pi = end;
                cur = None;
            }
        } else {
            if tc == pc {
                matched = true;
            }
            cur = Some(pc);
        }
        prev = cur;
        pi += 1;
        let Some(&next) = p.get(pi) else {
            return ClassResult::Abort;
        };
        if next == b']' {
            break;
        }
        pc = next;
    }
    ClassResult::Done {
        matched: matched != negated,
        end: pi,
    }
}

fn posix_class(name: &[u8], c: u8) -> Option<bool> {
    let r = match name {
        b"alnum" => c.is_ascii_alphanumeric(),
        b"alpha" => c.is_ascii_alphabetic(),
        b"blank" => c == b' ' || c == b'\t',
        b"cntrl" => c < 0x20 || c == 0x7f,
        b"digit" => c.is_ascii_digit(),
        b"graph" => c > b' ' && c < 0x7f,
        b"lower" => c.is_ascii_lowercase(),
        b"print" => (b' '..0x7f).contains(&c),
        b"punct" => c.is_ascii_punctuation(),
        b"space" => matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'),
        b"upper" => c.is_ascii_uppercase(),
        b"xdigit" => c.is_ascii_hexdigit(),
        _ => return None,
    };
    Some(r)
}

/// Reads patterns from the text of an ignore file or `spec.ignore`: one per line, lines starting
/// with `#` and blank lines skipped, a trailing `\r` dropped.
pub fn read_patterns(text: &[u8], domain: &[Vec<u8>]) -> Vec<Pattern> {
    text.split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.starts_with(b"#") && !l.trim_ascii().is_empty())
        .map(|l| Pattern::parse(l, domain))
        .collect()
}

fn split_list(list: &str) -> Vec<Pattern> {
    list.split(',')
        .map(|p| Pattern::parse(p.as_bytes(), &[]))
        .collect()
}

/// The VCS patterns, always in force.
pub fn vcs_patterns() -> Vec<Pattern> {
    split_list(EXCLUDE_VCS)
}

/// The default patterns, in force only when no user pattern exists.
pub fn default_patterns() -> Vec<Pattern> {
    let mut v = split_list(EXCLUDE_EXT);
    v.extend(split_list(EXCLUDE_CI));
    v.extend(split_list(EXCLUDE_EXTRA));
    v
}

/// Loads the `.sourceignore` files of `dir` and all its sub-directories (except `.git`, and
/// without following symlinks), each scoped to its directory, in walk order (a directory's own
/// file first, then its sub-directories in byte order).
pub fn load_ignore_patterns(dir: &Path) -> Result<Vec<Pattern>, ArtifactError> {
    let mut out = Vec::new();
    let mut domain = Vec::new();
    load_rec(dir, &mut domain, &mut out)?;
    Ok(out)
}

fn load_rec(
    dir: &Path,
    domain: &mut Vec<Vec<u8>>,
    out: &mut Vec<Pattern>,
) -> Result<(), ArtifactError> {
    let file = dir.join(IGNORE_FILE);
    match fs::read(&file) {
        Ok(bytes) => out.extend(read_patterns(&bytes, domain)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::IsADirectory) => {}
        Err(e) => return Err(ArtifactError::io("read", file, e)),
    }
    let rd = fs::read_dir(dir).map_err(|e| ArtifactError::io("read dir", dir, e))?;
    let mut subdirs = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| ArtifactError::io("read dir", dir, e))?;
        let ft = entry
            .file_type()
            .map_err(|e| ArtifactError::io("stat", entry.path(), e))?;
        let name = entry.file_name();
        if ft.is_dir() && name.as_bytes() != b".git" {
            subdirs.push(name);
        }
    }
    subdirs.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    for name in subdirs {
        domain.push(name.as_bytes().to_vec());
        let r = load_rec(&dir.join(&name), domain, out);
        domain.pop();
        r?;
    }
    Ok(())
}

/// The complete, ordered rule set used while archiving.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IgnoreRules {
    patterns: Vec<Pattern>,
    has_inclusion: bool,
}

impl IgnoreRules {
    /// No rules at all: nothing is excluded (not even `.git`).
    pub fn none() -> Self {
        IgnoreRules::default()
    }

    /// Uses exactly `patterns` (no VCS or default patterns added).
    pub fn exact(patterns: Vec<Pattern>) -> Self {
        let has_inclusion = patterns.iter().any(Pattern::is_inclusion);
        IgnoreRules {
            patterns,
            has_inclusion,
        }
    }

    /// Flux's rule set for the given user patterns (`.sourceignore` files then `spec.ignore`):
    /// the VCS patterns always come first; the default patterns are added only when there is no
    /// user pattern at all.
    pub fn flux(user: Vec<Pattern>) -> Self {
        let mut all = vcs_patterns();
        if user.is_empty() {
            all.extend(default_patterns());
        }
        all.extend(user);
        IgnoreRules::exact(all)
    }

    /// Loads the `.sourceignore` files below `dir` and appends `spec_ignore` (highest priority),
    /// then builds Flux's rule set ([`IgnoreRules::flux`]).
    pub fn load(dir: &Path, spec_ignore: Option<&str>) -> Result<Self, ArtifactError> {
        let mut user = load_ignore_patterns(dir)?;
        if let Some(spec) = spec_ignore {
            user.extend(read_patterns(spec.as_bytes(), &[]));
        }
        Ok(IgnoreRules::flux(user))
    }

    /// The patterns in evaluation order (lowest priority first).
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Whether `path` (components relative to the archive root) is excluded. The root itself
    /// (an empty path) is never excluded.
    pub fn is_excluded<C: AsRef<[u8]>>(&self, path: &[C], is_dir: bool) -> bool {
        for p in self.patterns.iter().rev() {
            match p.matches(path, is_dir) {
                MatchResult::NoMatch => continue,
                MatchResult::Exclude => return true,
                MatchResult::Include => return false,
            }
        }
        false
    }

    /// True when everything below an excluded directory is guaranteed to be excluded too (no
    /// `!` pattern exists), so a walker may skip the directory without reading it.
    pub fn can_prune_excluded_dirs(&self) -> bool {
        !self.has_inclusion
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn comps(p: &str) -> Vec<&[u8]> {
        p.split('/').map(str::as_bytes).collect()
    }

    fn pat(s: &str) -> Pattern {
        Pattern::parse(s.as_bytes(), &[])
    }

    fn m(p: &str, path: &str, dir: bool) -> MatchResult {
        pat(p).matches(&comps(path), dir)
    }

    #[test]
    fn wildmatch_basics() {
        assert!(wildmatch(b"*.yaml", b"a.yaml"));
        assert!(!wildmatch(b"*.yaml", b"a.yml"));
        assert!(wildmatch(b"a?c", b"abc"));
        assert!(!wildmatch(b"a?c", b"ac"));
        assert!(wildmatch(b"[abc]x", b"bx"));
        assert!(!wildmatch(b"[!abc]x", b"bx"));
        assert!(wildmatch(b"[^abc]x", b"dx"));
        assert!(wildmatch(b"[a-c]", b"b"));
        assert!(!wildmatch(b"[a-c]", b"d"));
        assert!(wildmatch(b"[]]", b"]"));
        assert!(wildmatch(b"[a-]", b"-"));
        assert!(wildmatch(b"[[:digit:]]*", b"7up"));
        assert!(!wildmatch(b"[[:digit:]]*", b"up"));
        assert!(!wildmatch(b"[[:bogus:]]", b"a"));
        assert!(wildmatch(b"\\*", b"*"));
        assert!(!wildmatch(b"\\*", b"a"));
        assert!(!wildmatch(b"[abc", b"a"));
        assert!(wildmatch(b"**", b""));
        assert!(wildmatch(b"a*b*c", b"aXXbYYc"));
        assert!(!wildmatch(b"a*b*c", b"aXXbYY"));
        assert!(wildmatch(b"", b""));
        assert!(!wildmatch(b"", b"x"));
    }

    #[test]
    fn simple_patterns_match_any_component() {
        assert_eq!(m("*.png", "a/b/c.png", false), MatchResult::Exclude);
        assert_eq!(m("foo/", "x/foo", true), MatchResult::Exclude);
        assert_eq!(m("foo/", "x/foo", false), MatchResult::NoMatch);
        assert_eq!(m("foo/", "x/foo/bar.txt", false), MatchResult::Exclude);
        assert_eq!(
            m(".git/", ".git/objects/ab/cd", false),
            MatchResult::Exclude
        );
        assert_eq!(m("!keep", "dir/keep", false), MatchResult::Include);
        assert_eq!(m("!keep", "keep/inner", false), MatchResult::NoMatch);
    }

    #[test]
    fn glob_patterns_are_anchored() {
        assert_eq!(m("/a/b", "a/b", false), MatchResult::Exclude);
        assert_eq!(m("/a/b", "x/a/b", false), MatchResult::NoMatch);
        assert_eq!(m("a/b", "a/b/c/d", false), MatchResult::Exclude);
        assert_eq!(m("a/b", "a", true), MatchResult::NoMatch);
        assert_eq!(m("**/x.yaml", "p/q/x.yaml", false), MatchResult::Exclude);
        assert_eq!(m("**/x.yaml", "x.yaml", false), MatchResult::Exclude);
        assert_eq!(m("a/**", "a/q/r", false), MatchResult::Exclude);
        assert_eq!(m("a/**", "a", true), MatchResult::Exclude);
        assert_eq!(m("a/**", "a", false), MatchResult::NoMatch);
        assert_eq!(m("a/**/z", "a/1/2/z", false), MatchResult::Exclude);
        assert_eq!(m("a/**/z", "a/1/2/y", false), MatchResult::NoMatch);
        assert_eq!(m("a/b/", "a/b", false), MatchResult::NoMatch);
        assert_eq!(m("a/b/", "a/b", true), MatchResult::Exclude);
        assert_eq!(m("!a/b", "a/b/c", false), MatchResult::NoMatch);
    }

    #[test]
    fn domain_scopes_patterns() {
        let d = vec![b"sub".to_vec()];
        let p = Pattern::parse(b"*.txt", &d);
        assert_eq!(p.matches(&comps("sub/a.txt"), false), MatchResult::Exclude);
        assert_eq!(p.matches(&comps("a.txt"), false), MatchResult::NoMatch);
        assert_eq!(
            p.matches(&comps("other/a.txt"), false),
            MatchResult::NoMatch
        );
        // The domain directory itself is never matched by its own patterns.
        let p = Pattern::parse(b"sub", &d);
        assert_eq!(p.matches(&comps("sub"), true), MatchResult::NoMatch);
    }

    #[test]
    fn trailing_spaces_and_comments() {
        let ps = read_patterns(b"# c\n\n  \nfoo  \r\nbar\\ \n!baz\n", &[]);
        assert_eq!(ps.len(), 3);
        assert_eq!(ps[0].matches(&comps("foo"), false), MatchResult::Exclude);
        assert_eq!(ps[1].matches(&comps("bar "), false), MatchResult::Exclude);
        assert_eq!(ps[1].matches(&comps("bar"), false), MatchResult::NoMatch);
        assert!(ps[2].is_inclusion());
    }

    #[test]
    fn defaults_only_without_user_patterns() {
        let r = IgnoreRules::flux(vec![]);
        assert!(r.is_excluded(&comps("img/logo.png"), false));
        assert!(r.is_excluded(&comps(".github"), true));
        assert!(r.is_excluded(&comps("deep/.sops.yaml"), false));
        assert!(r.is_excluded(&comps(".git/config"), false));
        assert!(!r.is_excluded(&comps("deploy/app.yaml"), false));
        let r = IgnoreRules::flux(read_patterns(b"*.md", &[]));
        assert!(!r.is_excluded(&comps("img/logo.png"), false));
        assert!(r.is_excluded(&comps("README.md"), false));
        assert!(r.is_excluded(&comps(".gitignore"), false));
        assert!(r.is_excluded(&comps(".git"), true));
        let empty: [&[u8]; 0] = [];
        assert!(!r.is_excluded(&empty, true));
    }

    #[test]
    fn later_patterns_win() {
        let r = IgnoreRules::exact(read_patterns(b"*.yaml\n!keep.yaml\n", &[]));
        assert!(r.is_excluded(&comps("a.yaml"), false));
        assert!(!r.is_excluded(&comps("x/keep.yaml"), false));
        assert!(!r.can_prune_excluded_dirs());
        let r = IgnoreRules::exact(read_patterns(b"!keep.yaml\n*.yaml\n", &[]));
        assert!(r.is_excluded(&comps("keep.yaml"), false));
    }
}
