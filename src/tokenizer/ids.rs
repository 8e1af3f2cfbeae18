//! Token-id lists as the command line takes them (`1,2,3`, ranges `151665-152063`), for
//! every subcommand that reads ids: `detokenize`, `glitch --unused`, `logits`, `generate`,
//! `router-stats` (chapter 4, source S0 5.3, and the engine of chapter 9).

use crate::error::{Error, Result, excerpt};
use crate::limits;

/// Parses an id list such as `151665-152063,7,9`. The list may hold at most
/// [`limits::IDS`] ids, counted before a range is expanded (`0-4294967295` is refused, not
/// built).
pub fn parse_id_ranges(s: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    let mut count = 0u128;
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            let t = t.trim();
            t.parse::<u32>().map_err(|_| {
                let why = if t.is_empty() {
                    "a range needs a first and a last id"
                } else if t.starts_with('-') || t.starts_with('+') {
                    "ids are written as plain non-negative integers"
                } else if t.bytes().all(|b| b.is_ascii_digit()) {
                    "token ids are 32-bit (at most 4294967295)"
                } else {
                    "not a non-negative integer"
                };
                Error::Invalid(format!("id list: {} is not a token id ({why})", excerpt(t)))
            })
        };
        let (a, b) = match part.split_once('-') {
            // `-1`: a minus sign, not a range with no start.
            Some(("", _)) => return Err(num(part).unwrap_err()),
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(Error::Invalid(format!(
                        "id list: range {} is empty",
                        excerpt(part)
                    )));
                }
                (a, b)
            }
            None => {
                let a = num(part)?;
                (a, a)
            }
        };
        count += (b - a) as u128 + 1;
        limits::check("id list", "ids", count, limits::IDS)?;
        out.extend(a..=b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_ranges() {
        assert_eq!(parse_id_ranges("3-5, 9").unwrap(), vec![3, 4, 5, 9]);
        assert!(parse_id_ranges("5-3").is_err());
        assert!(parse_id_ranges("x").is_err());
        assert!(parse_id_ranges("").unwrap().is_empty());
        let e = |s: &str| parse_id_ranges(s).unwrap_err().to_string();
        assert!(e("-1").contains("\"-1\" is not a token id"), "{}", e("-1"));
        assert!(
            e("0-4294967295").contains("above the limit"),
            "{}",
            e("0-4294967295")
        );
        assert!(e("4294967296").contains("32-bit"));
        assert!(e(&"9".repeat(1_000_000)).len() < 200);
    }
}
