//! The "lost in the middle" experiment (source S1 §2 and exercise 2): hide one key
//! sentence at the start, the middle or the end of a long filler document, ask for it,
//! and score how often the answer contains it. Accuracy is highest at the ends and
//! lowest in the middle for real models; measuring that needs a real checkpoint, so this
//! module builds the prompts and scores the answers for any `generate` function, and
//! the claim `ext.lost_in_middle` stays `needs-data`.

/// Where the key sentence goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Start,
    Middle,
    End,
}

impl Placement {
    pub const ALL: [Placement; 3] = [Placement::Start, Placement::Middle, Placement::End];
}

/// One question: a document with the key sentence placed, the question and the answer.
#[derive(Clone, Debug)]
pub struct Trial {
    pub placement: Placement,
    pub document: String,
    pub question: String,
    pub answer: String,
}

const FILLER: [&str; 6] = [
    "The committee reviewed the quarterly figures and found them in line with the forecast.",
    "Rain fell steadily over the valley while the river rose a little each hour.",
    "Several volunteers repainted the fences along the northern edge of the park.",
    "The library extended its opening hours during the examination period.",
    "A new timetable for the regional trains took effect at the start of the month.",
    "Local bakers reported that demand for rye bread had grown over the winter.",
];

// ANCHOR: build
/// Builds a document of about `words` words of filler with the sentence "The access
/// code for vault {k} is {code}." at the given placement, for key `k`.
pub fn build_trial(words: usize, placement: Placement, k: usize) -> Trial {
    let code = format!("{:04}", (k * 7919 + 1234) % 10_000);
    let key = format!("The access code for vault {k} is {code}.");
    let mut sentences = Vec::new();
    let mut count = 0;
    let mut i = k;
    while count < words {
        let s = FILLER[i % FILLER.len()];
        count += s.split_whitespace().count();
        sentences.push(s.to_string());
        i += 1;
    }
    let at = match placement {
        Placement::Start => 0,
        Placement::Middle => sentences.len() / 2,
        Placement::End => sentences.len(),
    };
    sentences.insert(at, key);
    Trial {
        placement,
        document: sentences.join(" "),
        question: format!("What is the access code for vault {k}? Answer with the four digits."),
        answer: code,
    }
}
// ANCHOR_END: build

/// Runs `trials_per_placement` trials at each placement through `generate(document,
/// question) → answer` and returns the accuracy at start, middle and end.
pub fn accuracy_by_placement<F>(
    words: usize,
    trials_per_placement: usize,
    mut generate: F,
) -> [(Placement, f64); 3]
where
    F: FnMut(&str, &str) -> String,
{
    Placement::ALL.map(|placement| {
        let correct = (0..trials_per_placement)
            .filter(|&k| {
                let t = build_trial(words, placement, k);
                generate(&t.document, &t.question).contains(&t.answer)
            })
            .count();
        (
            placement,
            correct as f64 / trials_per_placement.max(1) as f64,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sits_where_asked() {
        let start = build_trial(2000, Placement::Start, 3);
        assert!(start.document.starts_with("The access code for vault 3"));
        let end = build_trial(2000, Placement::End, 3);
        assert!(end.document.ends_with(&format!("is {}.", end.answer)));
        let mid = build_trial(2000, Placement::Middle, 3);
        let pos = mid.document.find("access code").unwrap() as f64 / mid.document.len() as f64;
        assert!((0.4..0.6).contains(&pos), "middle placement at {pos}");
    }

    #[test]
    fn a_reader_that_only_sees_the_ends_scores_a_u_shape() {
        // A stand-in "model" that reads only the first and last 400 characters.
        let reader = |doc: &str, _q: &str| {
            let (head, tail) = (&doc[..400], &doc[doc.len() - 400..]);
            format!("{head} {tail}")
        };
        let acc = accuracy_by_placement(3000, 5, reader);
        assert_eq!(acc.map(|(_, a)| a), [1.0, 0.0, 1.0]);
    }
}
