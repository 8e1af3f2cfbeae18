//! Chapter 8's figure (source S0 5.7): a conversation rendered by the Qwen3 template and
//! tokenised, then a reply generated under a thinking budget, drawn token by token.

use super::{Area, DrawResult, Key, LABEL, TITLE, font, legend_on_top, px, text_size};
use crate::chat::thinking::{QWEN3_THINK_END, QWEN3_THINK_START};
use crate::chat::{ChatOptions, Message, ThinkingBudget, generate_with_budget, render};
use crate::tokenizer::Tokenizer;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The budget the figure spends.
const BUDGET: usize = 16;

/// Where a token comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Segment {
    System,
    User,
    Header,
    Thinking,
    Injected,
    Answer,
}

impl Segment {
    const ALL: [Segment; 6] = [
        Segment::System,
        Segment::User,
        Segment::Header,
        Segment::Thinking,
        Segment::Injected,
        Segment::Answer,
    ];

    fn color(self) -> RGBColor {
        match self {
            Segment::System => RGBColor(214, 226, 242),
            Segment::User => RGBColor(210, 236, 210),
            Segment::Header => RGBColor(250, 236, 190),
            Segment::Thinking => RGBColor(228, 214, 244),
            Segment::Injected => RGBColor(250, 205, 205),
            Segment::Answer => RGBColor(255, 222, 184),
        }
    }

    fn name(self) -> String {
        match self {
            Segment::System => "system turn".into(),
            Segment::User => "user turn".into(),
            Segment::Header => "assistant header (prompt ends)".into(),
            Segment::Thinking => format!("model's thinking, numbered to N = {BUDGET}"),
            Segment::Injected => "early-stop text, injected by the loop".into(),
            Segment::Answer => "model's answer".into(),
        }
    }
}

/// One token as drawn: its text (newline shown as ↵, space as ·), where it comes from,
/// whether it is an added token (ChatML marker or think tag), and its number among the
/// thinking tokens.
struct Cell {
    text: String,
    segment: Segment,
    added: bool,
    thinking: Option<usize>,
}

/// A scripted model that thinks without end (cycling through `thought`) and, once its think
/// block is closed, writes `answer` and stops with `im_end`.
fn scripted(
    thought: Vec<u32>,
    answer: Vec<u32>,
    im_end: u32,
    prompt_len: usize,
) -> impl FnMut(&[u32]) -> crate::Result<u32> {
    let mut answered = 0;
    move |ctx: &[u32]| {
        let out = &ctx[prompt_len..];
        Ok(if out.contains(&QWEN3_THINK_END) {
            answered += 1;
            *answer.get(answered - 1).unwrap_or(&im_end)
        } else if out.contains(&QWEN3_THINK_START) {
            thought[(out.len() - 1) % thought.len()]
        } else {
            QWEN3_THINK_START
        })
    }
}

/// The template's rendering of a system and a user turn, tokenised, then the reply a scripted
/// model writes under a budget of [`BUDGET`] thinking tokens: each token a box coloured by
/// where it comes from, with the point where the loop injects the early-stop text marked.
pub(super) fn chat_budget(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let tok = Tokenizer::qwen()?;
    let system = Message::new("system", "You are a helpful assistant.");
    let user = Message::new("user", "What is 6 × 7?");
    let plain = ChatOptions::default();
    let opts = ChatOptions {
        add_generation_prompt: true,
        enable_thinking: None,
    };
    // Each prefix of the conversation ends on a special token's newline, so its tokens are
    // a prefix of the whole prompt's: the lengths give the segments.
    let system_len = tok
        .encode(&render(std::slice::from_ref(&system), &[], &plain)?)?
        .len();
    let user_end = tok
        .encode(&render(&[system.clone(), user.clone()], &[], &plain)?)?
        .len();
    let prompt = tok.encode(&render(&[system, user], &[], &opts)?)?;
    let im_end = *prompt.get(system_len - 2).ok_or("a short system turn")?;
    let budget = ThinkingBudget::new(BUDGET, QWEN3_THINK_START, QWEN3_THINK_END, |t| {
        tok.encode(t)
    })?;
    let thought = tok.encode("\nSix sevens: 7, 14, 21, 28, 35, 42. Check it as 7 × 6 instead.")?;
    let answer = tok.encode("6 × 7 = 42.")?;
    let model = scripted(thought, answer, im_end, prompt.len());
    let g = generate_with_budget(&prompt, 128, &[im_end], &budget, model)?;
    let cut = g.injected_at.ok_or("the budget was not spent")?;
    let injected_end = cut + budget.early_stop_ids.len();

    let mut cells = Vec::new();
    for (i, &id) in prompt.iter().chain(&g.ids).enumerate() {
        let segment = match i {
            i if i < system_len => Segment::System,
            i if i < user_end => Segment::User,
            i if i < prompt.len() => Segment::Header,
            i if i - prompt.len() < cut => Segment::Thinking,
            i if i - prompt.len() < injected_end => Segment::Injected,
            _ => Segment::Answer,
        };
        let text = String::from_utf8_lossy(tok.token_bytes(id)?)
            .replace('\n', "↵")
            .replace(' ', "·");
        let thinking = (segment == Segment::Thinking && i > prompt.len()).then(|| i - prompt.len());
        cells.push(Cell {
            text,
            segment,
            added: tok.vocab.token(id).is_none(),
            thinking,
        });
    }

    let root = root.titled(
        &format!(
            "A thinking budget of N = {BUDGET}: the rendered prompt and the reply, token by token"
        ),
        font(TITLE),
    )?;
    let keys: Vec<(Key, String)> = Segment::ALL
        .iter()
        .map(|s| (Key::Fill(s.color()), s.name()))
        .collect();
    let body = legend_on_top(&root, &keys)?;
    draw_cells(&body, &cells, prompt.len(), cut + prompt.len())
}

/// Lays the cells out in rows (a new row after each newline token and where the width runs
/// out), labels the prompt and the output, numbers the thinking tokens and marks `cut`.
fn draw_cells(area: &Area, cells: &[Cell], prompt_len: usize, cut: usize) -> DrawResult {
    let text_style = TextStyle::from(font(LABEL)).pos(Pos::new(HPos::Center, VPos::Center));
    let small = TextStyle::from(font(10.0)).pos(Pos::new(HPos::Center, VPos::Top));
    let (width, _) = area.dim_in_pixel();
    let (gutter, pad, gap) = (px(62.0), px(6.0), px(4.0));
    let (box_h, pitch) = (px(21.0), px(38.0));
    let right = width as i32 - px(8.0);
    let (mut x, mut y) = (gutter, px(6.0));
    let mut row_has_cells = false;
    for (i, c) in cells.iter().enumerate() {
        let w = text_size(area, &c.text, &text_style)?.0 + 2 * pad;
        let new_turn = i == prompt_len;
        if row_has_cells && (x + w > right || new_turn) {
            x = gutter;
            y += pitch;
        }
        if new_turn {
            // The generated part starts on its own row, under a rule.
            let rule = y - (pitch - box_h) / 2;
            area.draw(&PathElement::new(
                vec![(px(4.0), rule), (right, rule)],
                BLACK.mix(0.5).stroke_width(1),
            ))?;
        }
        if i == 0 || new_turn {
            let label = if i == 0 { "prompt" } else { "output" };
            let style = TextStyle::from(font(LABEL)).pos(Pos::new(HPos::Left, VPos::Center));
            area.draw(&Text::new(label, (px(4.0), y + box_h / 2), style))?;
        }
        let border = if c.added {
            BLACK.stroke_width(2)
        } else {
            BLACK.mix(0.35).stroke_width(1)
        };
        area.draw(&Rectangle::new(
            [(x, y), (x + w, y + box_h)],
            c.segment.color().filled(),
        ))?;
        area.draw(&Rectangle::new([(x, y), (x + w, y + box_h)], border))?;
        area.draw(&Text::new(
            c.text.clone(),
            (x + w / 2, y + box_h / 2),
            text_style.clone(),
        ))?;
        if let Some(n) = c.thinking {
            area.draw(&Text::new(
                n.to_string(),
                (x + w / 2, y + box_h + px(2.0)),
                small.clone(),
            ))?;
        }
        if i == cut {
            // The loop's cut: a bar before the first injected token, and what happened.
            let red = RGBColor(200, 30, 40);
            area.draw(&PathElement::new(
                vec![
                    (x - gap / 2 - 1, y - px(5.0)),
                    (x - gap / 2 - 1, y + box_h + px(5.0)),
                ],
                red.stroke_width(4),
            ))?;
            let note = TextStyle::from(font(10.0))
                .color(&red)
                .pos(Pos::new(HPos::Left, VPos::Top));
            area.draw(&Text::new(
                "budget spent: the loop appends the early-stop text",
                (x + px(2.0), y + box_h + px(2.0)),
                note,
            ))?;
        }
        x += w + gap;
        row_has_cells = true;
        if c.text.ends_with('↵') {
            x = gutter;
            y += pitch;
            row_has_cells = false;
        }
    }
    Ok(())
}
