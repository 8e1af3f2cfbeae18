//! The "lost in the middle" experiment (source S1 §2 and exercise 2): hide one key
//! sentence at the start, the middle or the end of a long filler document, ask for it,
//! and score how often the answer contains it. Accuracy is highest at the ends and
//! lowest in the middle for real models. This module builds the documents and scores the
//! answers for any `generate` function; `qwen3::lost_in_middle` (`anatomy lost-in-middle
//! MODEL`) runs it through the tokenizer and the forward pass. The U-shape needs a
//! checkpoint trained to answer (the exercise names Qwen2.5-0.5B), which the repository does
//! not ship, so the claim `ext.lost_in_middle` stays `needs-data`.

/// The document length S1's exercise asks for, in tokens.
pub const DOCUMENT_TOKENS: usize = 10_000;

/// Where the key sentence goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    Start,
    Middle,
    End,
}

impl Placement {
    pub const ALL: [Placement; 3] = [Placement::Start, Placement::Middle, Placement::End];

    /// `"start"`, `"middle"` or `"end"`.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Start => "start",
            Placement::Middle => "middle",
            Placement::End => "end",
        }
    }
}

/// One question: a document with the key sentence placed, the question and the answer.
#[derive(Clone, Debug)]
pub struct Trial {
    pub placement: Placement,
    /// The vault number `k` the question asks about.
    pub vault: usize,
    /// The key sentence, as it appears in the document.
    pub key: String,
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
    sentences.insert(at, key.clone());
    Trial {
        placement,
        vault: k,
        key,
        document: sentences.join(" "),
        question: format!("What is the access code for vault {k}? Answer with the four digits."),
        answer: code,
    }
}
// ANCHOR_END: build

/// The trials of one run: vaults `0 .. trials_per_placement` at the start, then the
/// same vaults in the middle, then at the end.
pub fn trials(words: usize, trials_per_placement: usize) -> Vec<Trial> {
    each_trial(words, trials_per_placement).collect()
}

/// [`trials`] one at a time, so a caller that only measures them holds one document.
pub fn each_trial(words: usize, trials_per_placement: usize) -> impl Iterator<Item = Trial> {
    Placement::ALL
        .into_iter()
        .flat_map(move |p| (0..trials_per_placement).map(move |k| build_trial(words, p, k)))
}

impl Trial {
    /// A reply is right when it states the four digits as a number of their own.
    pub fn is_answered_by(&self, reply: &str) -> bool {
        states_code(reply, &self.answer)
    }
}

/// Whether `reply` contains `code` not run into other digits: a model that counts
/// "123456789…" has not answered 1234.
pub fn states_code(reply: &str, code: &str) -> bool {
    let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
    reply.match_indices(code).any(|(at, _)| {
        !digit(reply[..at].chars().next_back()) && !digit(reply[at + code.len()..].chars().next())
    })
}

/// Accuracy at start, middle and end from `(placement, correct)` pairs (0 where a
/// placement has no trial).
pub fn accuracy(results: &[(Placement, bool)]) -> [(Placement, f64); 3] {
    Placement::ALL.map(|placement| {
        let (n, ok) = results
            .iter()
            .filter(|(p, _)| *p == placement)
            .fold((0usize, 0usize), |(n, ok), (_, c)| {
                (n + 1, ok + usize::from(*c))
            });
        (placement, ok as f64 / n.max(1) as f64)
    })
}

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
    let results: Vec<(Placement, bool)> = trials(words, trials_per_placement)
        .iter()
        .map(|t| {
            (
                t.placement,
                t.is_answered_by(&generate(&t.document, &t.question)),
            )
        })
        .collect();
    accuracy(&results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_inside_a_longer_number_is_not_an_answer() {
        let t = build_trial(50, Placement::Start, 0);
        assert!(t.is_answered_by(&format!("The code is {}.", t.answer)));
        assert!(t.is_answered_by(&t.answer));
        assert!(!t.is_answered_by(&format!("{}56789000", t.answer)));
        assert!(!t.is_answered_by(&format!("0{}", t.answer)));
        assert!(t.is_answered_by(&format!("9, then {}", t.answer)));
    }

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

    #[test]
    fn trials_come_in_placement_order_and_accuracy_counts_each() {
        let t = trials(200, 2);
        let order: Vec<(Placement, usize)> = t.iter().map(|t| (t.placement, t.vault)).collect();
        use Placement::*;
        assert_eq!(
            order,
            [
                (Start, 0),
                (Start, 1),
                (Middle, 0),
                (Middle, 1),
                (End, 0),
                (End, 1)
            ]
        );
        assert!(t.iter().all(|t| t.document.contains(&t.key)));
        assert!(t[0].is_answered_by(&format!("It is {}.", t[0].answer)));
        assert!(!t[0].is_answered_by("I do not know."));
        let acc = accuracy(&[(Start, true), (Start, false), (End, true)]);
        assert_eq!(acc.map(|(_, a)| a), [0.5, 0.0, 1.0]);
    }
}
