//! Reading a tiktoken vocabulary file (chapter 4, source S0 5.3), such as the shipped
//! `data/qwen.tiktoken`: one token per line as `base64(bytes) rank`, where the rank is
//! both the id and the merge priority ([`MergeRule::ByteRank`]).

use super::vocab::{MergeRule, Vocab};
use crate::error::{Error, Result, excerpt};
use base64::Engine;

/// Parses a tiktoken vocabulary: one `base64(bytes) rank` per line, blank lines ignored.
/// `what` names the file in errors.
// ANCHOR: tiktoken_loader
pub fn parse_tiktoken(text: &[u8], what: &str) -> Result<Vocab> {
    let text = std::str::from_utf8(text)
        .map_err(|e| Error::field(what, "contents", format!("not UTF-8 text: {e}")))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = || format!("line {}", n + 1);
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split(' ');
        let (Some(token), Some(rank), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(Error::field(
                what,
                at(),
                format!("expected `base64 rank`, got {}", excerpt(line)),
            ));
        };
        let bytes = b64.decode(token).map_err(|e| {
            Error::field(
                what,
                at(),
                format!("invalid base64 {}: {e}", excerpt(token)),
            )
        })?;
        let rank: u32 = rank.parse().map_err(|_| {
            Error::field(
                what,
                at(),
                format!("rank {} is not a non-negative integer", excerpt(rank)),
            )
        })?;
        entries.push((bytes, rank));
    }
    Vocab::new(entries, MergeRule::ByteRank, true, what)
}
// ANCHOR_END: tiktoken_loader

#[cfg(test)]
mod tests {
    use super::*;

    fn line(bytes: &[u8], rank: u32) -> String {
        format!(
            "{} {rank}\n",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    }

    fn all_bytes() -> String {
        (0..=255u8).map(|b| line(&[b], b as u32)).collect()
    }

    #[test]
    fn tiktoken_ok_and_bad_lines() {
        let good = all_bytes() + &line(b"ab", 256) + "\n";
        let v = parse_tiktoken(good.as_bytes(), "t").unwrap();
        assert_eq!(v.n_tokens(), 257);
        assert_eq!(v.id(b"ab"), Some(256));
        let err = |s: String| parse_tiktoken(s.as_bytes(), "t").unwrap_err().to_string();
        assert!(err(all_bytes() + "YWI=\n").contains("line 257"));
        assert!(err(all_bytes() + "YWI= x\n").contains("not a non-negative integer"));
        assert!(err(all_bytes() + "@@@ 300\n").contains("invalid base64"));
        assert!(err(all_bytes() + &line(b"ab", 5)).contains("duplicate id"));
        assert!(err(all_bytes() + &line(b"a", 300)).contains("also has id"));
        assert!(err(line(b"a", 0)).contains("0x00 is not a token"));
        assert!(err(String::new()).contains("no tokens"));
        assert!(
            parse_tiktoken(&[0xff, 0xfe], "t")
                .unwrap_err()
                .to_string()
                .contains("not UTF-8")
        );
    }
}
