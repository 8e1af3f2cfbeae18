//! Token-id lists as the command line takes them (`1,2,3`, ranges `151665-152063`), for
//! every subcommand that reads ids: `detokenize`, `glitch --unused`, `logits`, `generate`,
//! `router-stats` (chapter 4, source S0 5.3, and the engine of chapter 9).

use crate::error::{Error, Result};

/// Parses an id list such as `151665-152063,7,9`.
pub fn parse_id_ranges(s: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| Error::Invalid(format!("id list: {t:?} is not a token id")))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(Error::Invalid(format!("id list: range {part:?} is empty")));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
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
    }
}
