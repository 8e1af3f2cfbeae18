//! The pre-tokenizer's split, with Hugging Face's delimiter behaviours (chapter 4).
//!
//! A `Split` pre-tokenizer in a `tokenizer.json` cuts the text with a pattern and says what
//! becomes of the text it matches — the *delimiter* — and of the text between matches
//! (`tokenizers`' `SplitDelimiterBehavior`; `invert: true` swaps the two roles first):
//!
//! | behaviour            | `the-final--countdown` split on `-`        |
//! |----------------------|--------------------------------------------|
//! | `Isolated`           | `the` `-` `final` `-` `-` `countdown`      |
//! | `Removed`            | `the` `final` `countdown`                  |
//! | `MergedWithPrevious` | `the-` `final-` `-` `countdown`            |
//! | `MergedWithNext`     | `the` `-final` `-` `-countdown`            |
//! | `Contiguous`         | `the` `-` `final` `--` `countdown`         |
//!
//! Text the pattern does not match is never dropped (except the delimiters under
//! `Removed`): a byte-level pattern that does not cover the text — Qwen's covers every
//! character — still gives every byte to BPE, as Hugging Face does. (tiktoken drops such
//! text; with Qwen's pattern there is none.) Empty pieces are left out.

use crate::error::{Error, Result};

/// What becomes of the text a `Split` pattern matches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitBehavior {
    /// Every match is a piece of its own, and so is the text between matches.
    #[default]
    Isolated,
    /// Matches are dropped.
    Removed,
    /// A match joins the piece before it.
    MergedWithPrevious,
    /// A match joins the piece after it.
    MergedWithNext,
    /// Adjacent matches form one piece.
    Contiguous,
}

impl SplitBehavior {
    /// The behaviour as `tokenizer.json` names it.
    pub fn parse(name: &str) -> Option<SplitBehavior> {
        Some(match name {
            "Isolated" => SplitBehavior::Isolated,
            "Removed" => SplitBehavior::Removed,
            "MergedWithPrevious" => SplitBehavior::MergedWithPrevious,
            "MergedWithNext" => SplitBehavior::MergedWithNext,
            "Contiguous" => SplitBehavior::Contiguous,
            _ => return None,
        })
    }
}

/// How the pre-tokenizer's pattern cuts the text: the behaviour, and whether the pattern
/// matches the delimiters (`false`) or the pieces between them (`invert: true`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitRule {
    pub behavior: SplitBehavior,
    pub invert: bool,
}

/// Calls `piece` with each piece of `text`, in order, under `rule`. `name` names the
/// tokenizer in the error a failing regex gives (fancy-regex can run out of backtracking).
pub fn for_each_piece<'t>(
    regex: &fancy_regex::Regex,
    rule: SplitRule,
    text: &'t str,
    name: &str,
    mut piece: impl FnMut(&'t str),
) -> Result<()> {
    let fail = |e: fancy_regex::Error| Error::Invalid(format!("{name}: pre-tokenizer failed: {e}"));
    if rule == SplitRule::default() {
        // The common case (Qwen, GPT-2): matches and the gaps between them, in order.
        let mut prev = 0;
        for m in regex.find_iter(text) {
            let m = m.map_err(fail)?;
            if prev < m.start() {
                piece(&text[prev..m.start()]);
            }
            if !m.as_str().is_empty() {
                piece(m.as_str());
            }
            prev = m.end();
        }
        if prev < text.len() {
            piece(&text[prev..]);
        }
        return Ok(());
    }
    // (start, end, is_delimiter) covering the whole text, as `tokenizers`' find_matches.
    let mut spans: Vec<(usize, usize, bool)> = Vec::new();
    let mut prev = 0;
    for m in regex.find_iter(text) {
        let m = m.map_err(fail)?;
        if prev != m.start() {
            spans.push((prev, m.start(), rule.invert));
        }
        spans.push((m.start(), m.end(), !rule.invert));
        prev = m.end();
    }
    if prev != text.len() {
        spans.push((prev, text.len(), rule.invert));
    }
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    let mut previous_match = false;
    match rule.behavior {
        SplitBehavior::Isolated => out.extend(spans.iter().map(|s| (s.0, s.1))),
        SplitBehavior::Removed => out.extend(spans.iter().filter(|s| !s.2).map(|s| (s.0, s.1))),
        SplitBehavior::Contiguous => {
            for &(s, e, is_match) in &spans {
                match out.last_mut() {
                    Some(last) if is_match == previous_match => last.1 = e,
                    _ => out.push((s, e)),
                }
                previous_match = is_match;
            }
        }
        SplitBehavior::MergedWithPrevious => {
            for &(s, e, is_match) in &spans {
                match out.last_mut() {
                    Some(last) if is_match && !previous_match => last.1 = e,
                    _ => out.push((s, e)),
                }
                previous_match = is_match;
            }
        }
        SplitBehavior::MergedWithNext => {
            for &(s, e, is_match) in spans.iter().rev() {
                match out.last_mut() {
                    Some(last) if is_match && !previous_match => last.0 = s,
                    _ => out.push((s, e)),
                }
                previous_match = is_match;
            }
            out.reverse();
        }
    }
    for (s, e) in out {
        if s < e {
            piece(&text[s..e]);
        }
    }
    Ok(())
}

/// `text` cut around every numeric character (Unicode categories Nd, Nl, No — llama.cpp's
/// `\p{N}`): each such character alone, flagged `true`, and the stretches between them.
pub fn digit_fragments(text: &str) -> impl Iterator<Item = (&str, bool)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let end = if first.is_numeric() {
            first.len_utf8()
        } else {
            rest.find(char::is_numeric).unwrap_or(rest.len())
        };
        let (fragment, tail) = rest.split_at(end);
        rest = tail;
        Some((fragment, first.is_numeric()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(behavior: SplitBehavior, invert: bool, pattern: &str, text: &str) -> Vec<String> {
        let re = fancy_regex::Regex::new(pattern).unwrap();
        let mut out = Vec::new();
        for_each_piece(&re, SplitRule { behavior, invert }, text, "t", |p| {
            out.push(p.to_string())
        })
        .unwrap();
        out
    }

    /// The examples of `tokenizers`' `NormalizedString::split` documentation (empty
    /// pieces left out, as `PreTokenizedString::split` leaves them out).
    #[test]
    fn behaviours_match_hugging_face() {
        use SplitBehavior::*;
        let t = "the-final--countdown";
        assert_eq!(
            pieces(Removed, false, "-", t),
            ["the", "final", "countdown"]
        );
        assert_eq!(
            pieces(Isolated, false, "-", t),
            ["the", "-", "final", "-", "-", "countdown"]
        );
        assert_eq!(
            pieces(MergedWithPrevious, false, "-", t),
            ["the-", "final-", "-", "countdown"]
        );
        assert_eq!(
            pieces(MergedWithNext, false, "-", t),
            ["the", "-final", "-", "-countdown"]
        );
        assert_eq!(
            pieces(Contiguous, false, "-", t),
            ["the", "-", "final", "--", "countdown"]
        );
        // Inverted: the pattern matches the pieces, so the dashes are the delimiters.
        assert_eq!(
            pieces(Removed, true, "[a-z]+", t),
            ["the", "final", "countdown"]
        );
        // Unmatched text is kept as its own piece.
        assert_eq!(
            pieces(Isolated, false, "[a-z]+", "ab12cd"),
            ["ab", "12", "cd"]
        );
        assert_eq!(pieces(Isolated, false, "x*", "ab"), ["a", "b"]);
    }

    #[test]
    fn digit_fragments_isolate_each_numeric_character() {
        let cut: Vec<_> = digit_fragments("a 12²x").collect();
        assert_eq!(
            cut,
            [
                ("a ", false),
                ("1", true),
                ("2", true),
                ("²", true),
                ("x", false)
            ]
        );
        assert_eq!(digit_fragments("").count(), 0);
    }
}
