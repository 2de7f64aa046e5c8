//! The text sops shows when no master key recovers the data key (its `UserError` form,
//! without colours): a `Group N: FAILED` block per group, one entry per key.

/// Per group: `None` when it succeeded, else the failures of its keys, in the order tried
/// (key name, reason).
pub(crate) type GroupResults = Vec<Option<Vec<(String, String)>>>;

/// The whole message, as Flux surfaces it after "cannot get sops data key: ".
pub(crate) fn data_key_failure(groups: &GroupResults, threshold: i64) -> String {
    let blocks: Vec<String> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| group_block(i, g.as_deref()))
        .collect();
    let succeeded = groups.iter().filter(|g| g.is_none()).count();
    let trailer = if threshold == 0 {
        "Recovery failed because no master key was able to decrypt the file. In order for \
         SOPS to recover the file, at least one key has to be successful, but none were."
            .to_string()
    } else {
        format!(
            "Recovery failed because the file was encrypted with a Shamir threshold of \
             {threshold}, but only {succeeded} part(s) were successfully recovered, one for each \
             successful key group. In order for SOPS to recover the file, at least {threshold} \
             groups have to be successful. In order for a group to be successful, decryption \
             has to succeed with any of the keys in that key group."
        )
    };
    format!(
        "Failed to get the data key required to decrypt the SOPS file.\n\n{}\n\n{}",
        blocks.join("\n\n"),
        wrap(&trailer, 75)
    )
}

fn group_block(index: usize, failures: Option<&[(String, String)]>) -> String {
    let Some(failures) = failures else {
        return format!("Group {index}: SUCCESS");
    };
    let keys: Vec<String> = failures
        .iter()
        .map(|(name, reason)| {
            let mut item = prefix_lines(&wrap(reason, 60), "  | ");
            if !item.is_empty() {
                item.replace_range(..1, "-");
            }
            format!("{name}: FAILED\n{}", prefix_lines(&item, "  "))
        })
        .collect();
    format!(
        "Group {index}: FAILED\n{}",
        prefix_lines(&keys.join("\n\n"), "  ")
    )
}

/// Puts `prefix` before every line (an empty text stays empty).
fn prefix_lines(text: &str, prefix: &str) -> String {
    text.split_inclusive('\n')
        .map(|line| format!("{prefix}{line}"))
        .collect()
}

/// Word wrapping as sops does it (`go-wordwrap`): breaks only at white space, never inside
/// a word, so long words overflow `limit`.
pub(crate) fn wrap(text: &str, limit: usize) -> String {
    let mut out = String::with_capacity(text.len());
    let mut current = 0usize;
    let (mut word, mut word_len) = (String::new(), 0usize);
    let (mut space, mut space_len) = (String::new(), 0usize);
    for ch in text.chars() {
        if ch == '\n' {
            if word.is_empty() {
                if current + space_len <= limit {
                    out.push_str(&space);
                }
            } else {
                out.push_str(&space);
                out.push_str(&word);
                word.clear();
                word_len = 0;
            }
            space.clear();
            space_len = 0;
            out.push('\n');
            current = 0;
        } else if ch.is_whitespace() && ch != '\u{a0}' {
            if space.is_empty() || !word.is_empty() {
                current += space_len + word_len;
                out.push_str(&space);
                out.push_str(&word);
                space.clear();
                space_len = 0;
                word.clear();
                word_len = 0;
            }
            space.push(ch);
            space_len += 1;
        } else {
            word.push(ch);
            word_len += 1;
            if current + word_len + space_len > limit && word_len < limit {
                out.push('\n');
                current = 0;
                space.clear();
                space_len = 0;
            }
        }
    }
    if word.is_empty() {
        if current + space_len <= limit {
            out.push_str(&space);
        }
    } else {
        out.push_str(&space);
        out.push_str(&word);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn wraps_like_go_wordwrap() {
        assert_eq!(wrap("aaa bbb ccc", 7), "aaa bbb\nccc");
        assert_eq!(wrap("a verylongwordhere b", 5), "a\nverylongwordhere\nb");
        assert_eq!(wrap("x\ny z", 3), "x\ny z");
    }

    #[test]
    fn failure_block_layout() {
        let text = data_key_failure(
            &vec![Some(vec![(
                "age1abc".to_string(),
                "failed to create reader for decrypting sops data key with age: no identity matched any of the recipients".to_string(),
            )])],
            0,
        );
        assert_eq!(
            text,
            "Failed to get the data key required to decrypt the SOPS file.\n\n\
             Group 0: FAILED\n  age1abc: FAILED\n    - | failed to create reader for decrypting sops data key with\n      | age: no identity matched any of the recipients\n\n\
             Recovery failed because no master key was able to decrypt the file. In\n\
             order for SOPS to recover the file, at least one key has to be successful,\n\
             but none were."
        );
    }
}
