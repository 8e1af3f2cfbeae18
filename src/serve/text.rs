//! Text as it streams: tokens decoded a few at a time (a character may span tokens, so a
//! trailing U+FFFD waits for the next one), stop strings (text that could still become one
//! is held back) and the split of a reasoning model's output into `reasoning_content` and
//! `content` at `</think>` — the same split streamed or not.

use crate::chat::thinking::split_thinking;

/// Text decoded so far and how much of it has been handed out.
#[derive(Clone, Debug, Default)]
pub struct StreamText {
    text: String,
    sent: usize,
}

/// What [`StreamText::update`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// New text that can be shown.
    pub delta: String,
    /// A stop string appeared: the text ends before it and generation must stop.
    pub stopped: bool,
}

impl StreamText {
    /// Takes the whole decoded text so far; returns what is new and safe to show.
    pub fn update(&mut self, decoded: String, stop: &[String], last: bool) -> Update {
        self.text = decoded;
        if let Some(at) = stop.iter().filter_map(|s| self.text.find(s.as_str())).min() {
            self.text.truncate(at);
            return Update {
                delta: self.take(at.max(self.sent)),
                stopped: true,
            };
        }
        let mut end = self.text.len();
        if !last {
            end = self.text.trim_end_matches('\u{FFFD}').len();
            end -= held_for_stop(&self.text[..end], stop);
        }
        Update {
            delta: self.take(end.max(self.sent)),
            stopped: false,
        }
    }

    fn take(&mut self, end: usize) -> String {
        let delta = self.text[self.sent..end].to_string();
        self.sent = end;
        delta
    }

    /// Everything shown so far.
    pub fn shown(&self) -> &str {
        &self.text[..self.sent]
    }
}

/// Bytes at the end of `text` that begin some stop string (they may yet complete it).
fn held_for_stop(text: &str, stop: &[String]) -> usize {
    let mut held = 0;
    for s in stop {
        for n in (1..s.len()).rev() {
            if n > held && s.is_char_boundary(n) && text.ends_with(&s[..n]) {
                held = n;
                break;
            }
        }
    }
    held
}

/// `(reasoning, answer)` of a text shown so far. `open`: the prompt left the model inside
/// `<think>`. Otherwise a text that starts with `<think>` is reasoning until `</think>`,
/// and any other text is all answer. While the block is open, newlines at its end and a
/// partial `</think>` are held back, so each later split extends the earlier one.
pub fn split_reasoning(text: &str, open: bool) -> (&str, &str) {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    let body = match (open, text.strip_prefix(OPEN)) {
        (true, _) => text,
        (false, Some(rest)) => rest,
        (false, None) if OPEN.starts_with(text) => return ("", ""),
        (false, None) => return ("", text),
    };
    if body.contains(CLOSE) {
        return split_thinking(body);
    }
    let held = (1..CLOSE.len())
        .rev()
        .find(|&n| body.ends_with(&CLOSE[..n]))
        .unwrap_or(0);
    (body[..body.len() - held].trim_matches('\n'), "")
}

/// Hands out the growth of each side of [`split_reasoning`].
#[derive(Clone, Debug, Default)]
pub struct ReasoningSplit {
    pub open: bool,
    reasoning: usize,
    answer: usize,
}

impl ReasoningSplit {
    pub fn new(open: bool) -> Self {
        ReasoningSplit {
            open,
            ..ReasoningSplit::default()
        }
    }

    /// The new reasoning and answer text in `shown` since the last call.
    pub fn deltas(&mut self, shown: &str) -> (String, String) {
        let (r, a) = split_reasoning(shown, self.open);
        let dr = r
            .get(self.reasoning.min(r.len())..)
            .unwrap_or("")
            .to_string();
        let da = a.get(self.answer.min(a.len())..).unwrap_or("").to_string();
        (self.reasoning, self.answer) = (r.len().max(self.reasoning), a.len().max(self.answer));
        (dr, da)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prefix of a text split as it streams, concatenated, equals the split of the
    /// whole text.
    #[test]
    fn streamed_split_equals_the_split_of_the_whole() {
        for (text, open) in [
            (
                "<think>\nstep one\n\nstep two\n</think>\n\nThe answer.",
                false,
            ),
            ("plain answer </think> not a block", false),
            ("\nstill thinking\n</think>\n\nDone", true),
            ("<think>\ncut by max_tokens", false),
        ] {
            let mut split = ReasoningSplit::new(open);
            let (mut r, mut a) = (String::new(), String::new());
            for end in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                let (dr, da) = split.deltas(&text[..end]);
                r += &dr;
                a += &da;
            }
            let (wr, wa) = split_reasoning(text, open);
            assert_eq!((r.as_str(), a.as_str()), (wr, wa), "{text:?}");
        }
        assert_eq!(
            split_reasoning("<think>\na\n</think>\n\nb", false),
            ("a", "b")
        );
    }

    #[test]
    fn stop_strings_cut_and_hold_back() {
        let stop = vec!["END".to_string()];
        let mut s = StreamText::default();
        assert_eq!(s.update("abc E".into(), &stop, false).delta, "abc ");
        assert_eq!(s.update("abc EN".into(), &stop, false).delta, "");
        let u = s.update("abc END more".into(), &stop, false);
        assert_eq!((u.delta.as_str(), u.stopped), ("", true));
        assert_eq!(s.shown(), "abc ");
        let mut s = StreamText::default();
        assert_eq!(s.update("x\u{FFFD}".into(), &[], false).delta, "x");
        assert_eq!(s.update("x\u{e9}".into(), &[], false).delta, "\u{e9}");
    }
}
