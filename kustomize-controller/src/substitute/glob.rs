//! Shell globs for the prefix and suffix operators (`#`, `##`, `%`, `%%`): Go `path.Match`
//! syntax (`*`, `?`, `[...]` classes with ranges and `^` negation, `\` escapes), except that
//! `*` also matches `/`. Matching works on characters.
//!
//! A glob is a list of fixed-length segments separated by stars: `S0*S1*...*Sk`. A text
//! matches when `S0` matches at its start, `Sk` at its end, and `S1..Sk-1` fit in between in
//! order; placing each middle segment at its leftmost (or rightmost) possible position is
//! optimal, so one pass over the text decides, and the shortest or longest matching prefix
//! (suffix) follows from where the last (first) segment can go. Segments made of literals are
//! found with a linear-time (Knuth–Morris–Pratt) search; segments with `?` or classes are
//! compared at each position, with every comparison charged to the [`Budget`].

use super::budget::{Budget, BudgetError};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// `?`
    Any,
    Lit(char),
    /// `[...]`
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Tok {
    fn matches(&self, c: char) -> bool {
        match self {
            Tok::Any => true,
            Tok::Lit(l) => *l == c,
            Tok::Class { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated
            }
        }
    }

    /// Work units of one comparison.
    fn cost(&self) -> u64 {
        match self {
            Tok::Class { ranges, .. } => 1 + ranges.len() as u64,
            _ => 1,
        }
    }
}

/// A malformed pattern (an unterminated class or escape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPattern;

/// A parsed glob: the segments between stars (one segment when there is no star).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    segs: Vec<Vec<Tok>>,
}

impl Glob {
    /// Parses `pattern` (one work unit per character).
    pub fn parse(
        pattern: &str,
        budget: &mut Budget,
    ) -> Result<Result<Glob, BadPattern>, BudgetError> {
        budget.work_units(pattern.len() as u64)?;
        Ok(parse(pattern))
    }

    /// Whether the whole of `text` matches.
    #[cfg(test)]
    pub fn matches(&self, text: &str, budget: &mut Budget) -> Result<bool, BudgetError> {
        let c = chars(text, budget)?;
        Ok(self.prefix_end(&c, true, 0, budget)? == Some(c.len()))
    }

    /// The byte offset after the shortest (or longest) non-empty prefix of `text` that
    /// matches, if any.
    pub fn prefix(
        &self,
        text: &str,
        longest: bool,
        budget: &mut Budget,
    ) -> Result<Option<usize>, BudgetError> {
        let c = chars(text, budget)?;
        Ok(self
            .prefix_end(&c, longest, 1, budget)?
            .map(|e| byte_offset(text, e)))
    }

    /// The byte offset where the shortest (or longest) non-empty suffix of `text` that
    /// matches starts, if any.
    pub fn suffix(
        &self,
        text: &str,
        longest: bool,
        budget: &mut Budget,
    ) -> Result<Option<usize>, BudgetError> {
        let c = chars(text, budget)?;
        Ok(self
            .suffix_start(&c, longest, 1, budget)?
            .map(|b| byte_offset(text, b)))
    }

    /// The end (in characters) of the shortest or longest prefix of at least `min_end`
    /// characters that matches.
    fn prefix_end(
        &self,
        c: &[char],
        longest: bool,
        min_end: usize,
        budget: &mut Budget,
    ) -> Result<Option<usize>, BudgetError> {
        let n = c.len();
        let (first, rest) = match self.segs.split_first() {
            Some(split) => split,
            None => return Ok(None),
        };
        let Some((last, middle)) = rest.split_last() else {
            // No star: only a prefix as long as the pattern can match.
            let l = first.len();
            let ok = l >= min_end && l <= n && matches_at(c, first, 0, budget)?;
            return Ok(ok.then_some(l));
        };
        if first.len() > n || !matches_at(c, first, 0, budget)? {
            return Ok(None);
        }
        let mut pos = first.len();
        for seg in middle {
            match find(c, seg, pos, n, Dir::Forward, budget)? {
                Some(s) => pos = s + seg.len(),
                None => return Ok(None),
            }
        }
        // `pos` is the least end of the middle segments: any end `e` with `last` matching just
        // before it, at or after `pos`, is a match.
        let l = last.len();
        if longest {
            if l == 0 {
                return Ok((n >= min_end).then_some(n));
            }
            let found = find(c, last, pos, n, Dir::Backward, budget)?;
            Ok(found.map(|s| s + l).filter(|&e| e >= min_end))
        } else {
            if l == 0 {
                let e = pos.max(min_end);
                return Ok((e <= n).then_some(e));
            }
            let lo = pos.max(min_end.saturating_sub(l));
            Ok(find(c, last, lo, n, Dir::Forward, budget)?.map(|s| s + l))
        }
    }

    /// The start (in characters) of the shortest or longest suffix of at least `min_len`
    /// characters that matches.
    fn suffix_start(
        &self,
        c: &[char],
        longest: bool,
        min_len: usize,
        budget: &mut Budget,
    ) -> Result<Option<usize>, BudgetError> {
        let n = c.len();
        if n < min_len {
            return Ok(None);
        }
        let max_start = n - min_len;
        let (last, rest) = match self.segs.split_last() {
            Some(split) => split,
            None => return Ok(None),
        };
        let Some((first, middle)) = rest.split_first() else {
            let l = last.len();
            let ok = l >= min_len && l <= n && matches_at(c, last, n - l, budget)?;
            return Ok(ok.then(|| n - l));
        };
        if last.len() > n || !matches_at(c, last, n - last.len(), budget)? {
            return Ok(None);
        }
        let mut pos = n - last.len();
        for seg in middle.iter().rev() {
            match find(c, seg, 0, pos, Dir::Backward, budget)? {
                Some(s) => pos = s,
                None => return Ok(None),
            }
        }
        // `pos` is the greatest start of the middle segments: any start `b` with `first`
        // matching at `b` and ending at or before `pos` is a match.
        let l = first.len();
        if longest {
            if l == 0 {
                return Ok(Some(0));
            }
            let found = find(c, first, 0, pos, Dir::Forward, budget)?;
            Ok(found.filter(|&b| b <= max_start))
        } else {
            if l == 0 {
                return Ok(Some(pos.min(max_start)));
            }
            let hi = pos.min(max_start.saturating_add(l));
            find(c, first, 0, hi, Dir::Backward, budget)
        }
    }
}

fn parse(pattern: &str) -> Result<Glob, BadPattern> {
    let p: Vec<char> = pattern.chars().collect();
    let mut segs = vec![Vec::new()];
    let mut i = 0;
    while i < p.len() {
        let tok = match p[i] {
            '*' => {
                // Consecutive stars are one star.
                if !segs.last().is_some_and(Vec::is_empty) || segs.len() == 1 {
                    segs.push(Vec::new());
                }
                i += 1;
                continue;
            }
            '?' => {
                i += 1;
                Tok::Any
            }
            '\\' => {
                let c = *p.get(i + 1).ok_or(BadPattern)?;
                i += 2;
                Tok::Lit(c)
            }
            '[' => {
                let (tok, next) = parse_class(&p, i + 1)?;
                i = next;
                tok
            }
            c => {
                i += 1;
                Tok::Lit(c)
            }
        };
        if let Some(seg) = segs.last_mut() {
            seg.push(tok);
        }
    }
    Ok(Glob { segs })
}

/// A class after its `[`; returns the token and the index after its `]`.
fn parse_class(p: &[char], mut i: usize) -> Result<(Tok, usize), BadPattern> {
    let mut negated = false;
    if p.get(i) == Some(&'^') {
        negated = true;
        i += 1;
    }
    let mut ranges = Vec::new();
    loop {
        match p.get(i) {
            None => return Err(BadPattern),
            Some(']') if !ranges.is_empty() => return Ok((Tok::Class { negated, ranges }, i + 1)),
            _ => {}
        }
        let (lo, next) = class_char(p, i)?;
        i = next;
        let mut hi = lo;
        if p.get(i) == Some(&'-') {
            let (h, next) = class_char(p, i + 1)?;
            hi = h;
            i = next;
        }
        ranges.push((lo, hi));
    }
}

/// A character inside `[...]` (possibly `\`-escaped); `-` and `]` must be escaped.
fn class_char(p: &[char], i: usize) -> Result<(char, usize), BadPattern> {
    match p.get(i) {
        None | Some('-' | ']') => Err(BadPattern),
        Some('\\') => p.get(i + 1).map(|&c| (c, i + 2)).ok_or(BadPattern),
        Some(&c) => Ok((c, i + 1)),
    }
}

fn chars(text: &str, budget: &mut Budget) -> Result<Vec<char>, BudgetError> {
    budget.work_units(text.len() as u64)?;
    Ok(text.chars().collect())
}

/// The byte offset of the character at index `index` (`text.len()` past the end).
fn byte_offset(text: &str, index: usize) -> usize {
    text.char_indices()
        .nth(index)
        .map_or(text.len(), |(offset, _)| offset)
}

/// Whether `seg` matches `c` at `start` (the caller checks that it fits).
fn matches_at(
    c: &[char],
    seg: &[Tok],
    start: usize,
    budget: &mut Budget,
) -> Result<bool, BudgetError> {
    budget.work_units(seg.iter().map(Tok::cost).sum())?;
    Ok(seg.iter().zip(&c[start..]).all(|(t, &ch)| t.matches(ch)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// The least start.
    Forward,
    /// The greatest start.
    Backward,
}

/// The least (`Forward`) or greatest (`Backward`) `s` with `lo <= s`, `s + seg.len() <= hi`
/// and `seg` matching at `s`.
fn find(
    c: &[char],
    seg: &[Tok],
    lo: usize,
    hi: usize,
    dir: Dir,
    budget: &mut Budget,
) -> Result<Option<usize>, BudgetError> {
    let l = seg.len();
    if lo > hi || hi - lo < l {
        return Ok(None);
    }
    if l == 0 {
        return Ok(Some(if dir == Dir::Forward { lo } else { hi }));
    }
    let literal: Option<Vec<char>> = seg
        .iter()
        .map(|t| match t {
            Tok::Lit(ch) => Some(*ch),
            _ => None,
        })
        .collect();
    match literal {
        Some(needle) => kmp(&c[lo..hi], &needle, dir, budget).map(|o| o.map(|s| lo + s)),
        None => {
            let last_start = hi - l;
            let mut check = |s: usize| matches_at(c, seg, s, budget);
            match dir {
                Dir::Forward => {
                    for s in lo..=last_start {
                        if check(s)? {
                            return Ok(Some(s));
                        }
                    }
                }
                Dir::Backward => {
                    for s in (lo..=last_start).rev() {
                        if check(s)? {
                            return Ok(Some(s));
                        }
                    }
                }
            }
            Ok(None)
        }
    }
}

/// Knuth–Morris–Pratt: the first (`Forward`) or last (`Backward`) occurrence of `needle` in
/// `hay`, in time linear in both (one work unit per step). `Backward` runs the same search
/// over both sequences reversed.
fn kmp(
    hay: &[char],
    needle: &[char],
    dir: Dir,
    budget: &mut Budget,
) -> Result<Option<usize>, BudgetError> {
    let m = needle.len();
    let at = |i: usize| match dir {
        Dir::Forward => needle[i],
        Dir::Backward => needle[m - 1 - i],
    };
    budget.work_units(2 * m as u64)?;
    // fail[i]: length of the longest proper border of needle[..=i].
    let mut fail = vec![0usize; m];
    let mut k = 0;
    for i in 1..m {
        while k > 0 && at(i) != at(k) {
            k = fail[k - 1];
        }
        if at(i) == at(k) {
            k += 1;
        }
        fail[i] = k;
    }
    let n = hay.len();
    let mut k = 0;
    let mut steps = 0u64;
    for j in 0..n {
        let ch = match dir {
            Dir::Forward => hay[j],
            Dir::Backward => hay[n - 1 - j],
        };
        while k > 0 && ch != at(k) {
            k = fail[k - 1];
            steps += 1;
        }
        if ch == at(k) {
            k += 1;
        }
        steps += 1;
        if steps >= 4096 {
            budget.work_units(steps)?;
            steps = 0;
        }
        if k == m {
            budget.work_units(steps)?;
            // The match covers j+1-m..=j in search order.
            return Ok(Some(match dir {
                Dir::Forward => j + 1 - m,
                Dir::Backward => n - 1 - j,
            }));
        }
    }
    budget.work_units(steps)?;
    Ok(None)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn glob(p: &str) -> Result<Glob, BadPattern> {
        parse(p)
    }

    fn m(p: &str, s: &str) -> bool {
        glob(p)
            .map(|g| g.matches(s, &mut Budget::default()).unwrap())
            .unwrap_or(false)
    }

    #[test]
    fn glob_basics() {
        assert!(m("*", ""));
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(m("*/", "path/to/"));
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "ac"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[^a-c]x", "bx"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("*.txt", "a.b.txt"));
        assert!(m("a**b", "axxb"));
        assert!(m("*a*a*", "aa"));
        assert!(!m("*a*a*", "a"));
        assert!(m("é*ü", "éxü"));
        assert_eq!(glob("[a"), Err(BadPattern));
        assert_eq!(glob("x\\"), Err(BadPattern));
        assert_eq!(glob("[]"), Err(BadPattern));
        assert_eq!(glob("a**b").unwrap().segs.len(), 2);
    }

    /// A reference matcher: dynamic programming over (pattern, text) positions.
    fn reference(p: &str, s: &[char]) -> bool {
        let toks: Vec<Option<Tok>> = {
            let g = glob(p).unwrap();
            let mut out = Vec::new();
            for (i, seg) in g.segs.iter().enumerate() {
                if i > 0 {
                    out.push(None);
                }
                out.extend(seg.iter().cloned().map(Some));
            }
            out
        };
        let (tn, sn) = (toks.len(), s.len());
        let mut dp = vec![vec![false; sn + 1]; tn + 1];
        dp[tn][sn] = true;
        for t in (0..tn).rev() {
            for i in (0..=sn).rev() {
                dp[t][i] = match &toks[t] {
                    None => dp[t + 1][i] || (i < sn && dp[t][i + 1]),
                    Some(tok) => i < sn && tok.matches(s[i]) && dp[t + 1][i + 1],
                };
            }
        }
        dp[0][0]
    }

    /// Every pattern operator agrees with the reference on all small texts over a small
    /// alphabet (a deterministic pseudo-random sample of patterns).
    #[test]
    fn agrees_with_reference() {
        let atoms = ["a", "b", "*", "?", "[ab]", "[^a]", "ab", "é"];
        let texts: Vec<String> = {
            let mut all = vec![String::new()];
            let mut frontier = vec![String::new()];
            for _ in 0..4 {
                let mut next = Vec::new();
                for t in &frontier {
                    for c in ["a", "b", "é"] {
                        next.push(format!("{t}{c}"));
                    }
                }
                all.extend(next.iter().cloned());
                frontier = next;
            }
            all
        };
        let mut seed = 7u64;
        for _ in 0..400 {
            let mut p = String::new();
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 60) as usize % 5;
            for k in 0..len {
                let r = (seed >> (8 * k + 3)) as usize;
                p.push_str(atoms[r % atoms.len()]);
            }
            let g = glob(&p).unwrap();
            for t in &texts {
                let c: Vec<char> = t.chars().collect();
                let b = &mut Budget::default();
                assert_eq!(g.matches(t, b).unwrap(), reference(&p, &c), "{p} ~ {t}");
                let prefixes: Vec<usize> =
                    (1..=c.len()).filter(|&e| reference(&p, &c[..e])).collect();
                let suffixes: Vec<usize> =
                    (0..c.len()).filter(|&s| reference(&p, &c[s..])).collect();
                let bo = |i: usize| byte_offset(t, i);
                assert_eq!(
                    g.prefix(t, false, b).unwrap(),
                    prefixes.first().map(|&e| bo(e)),
                    "{p} # {t}"
                );
                assert_eq!(
                    g.prefix(t, true, b).unwrap(),
                    prefixes.last().map(|&e| bo(e)),
                    "{p} ## {t}"
                );
                assert_eq!(
                    g.suffix(t, false, b).unwrap(),
                    suffixes.last().map(|&s| bo(s)),
                    "{p} % {t}"
                );
                assert_eq!(
                    g.suffix(t, true, b).unwrap(),
                    suffixes.first().map(|&s| bo(s)),
                    "{p} %% {t}"
                );
            }
        }
    }

    #[test]
    fn literal_segments_are_linear() {
        let text = "a".repeat(100_000);
        for p in ["*b", "b*", "*a*b", "*aab*", "a*ab"] {
            let g = glob(p).unwrap();
            let mut b = Budget::default();
            for longest in [false, true] {
                g.prefix(&text, longest, &mut b).unwrap();
                g.suffix(&text, longest, &mut b).unwrap();
            }
            assert!(b.work() < 40 * 100_000, "{p}: {} units", b.work());
        }
    }
}
