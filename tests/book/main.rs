//! Checks on the mdBook in `book/`: the claims appendix is the registry's current table,
//! every `{{#include}}` resolves (file and anchor), every claim id the book cites exists,
//! every erratum it cites is explained in an Erratum box, and the numbers the chapters
//! derive beyond the registry (figure captions, errata, exercise answers) are recomputed.

use llm_anatomy::claims::{self, Status};
use llm_anatomy::long_context::{memory, scaling};
use llm_anatomy::position::{decay, rope};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- claims:begin -->";
const END: &str = "<!-- claims:end -->";

fn book_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("book")
        .join("src")
}

/// Every Markdown file of the book, with its text, sorted by name.
fn pages() -> Vec<(PathBuf, String)> {
    let mut pages: Vec<(PathBuf, String)> = fs::read_dir(book_src())
        .expect("book/src exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| {
            let text = fs::read_to_string(&p).expect("readable page");
            (p, text)
        })
        .collect();
    pages.sort();
    pages
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Lines outside fenced code blocks, with their 1-based line numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            out.push((i + 1, line));
        }
    }
    out
}

/// Inline code spans (single backticks) of a prose line.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

// ------------------------------------------------------------------ (a) the appendix

#[test]
fn appendix_is_the_current_claims_table() {
    let path = book_src().join("appendix-claims.md");
    let text = fs::read_to_string(&path).expect("book/src/appendix-claims.md exists");
    let begin = text
        .find(BEGIN)
        .unwrap_or_else(|| panic!("{} lacks the marker {BEGIN}", path.display()));
    let end = text
        .find(END)
        .unwrap_or_else(|| panic!("{} lacks the marker {END}", path.display()));
    assert!(begin < end, "{BEGIN} must come before {END}");
    let block = text[begin + BEGIN.len()..end]
        .strip_prefix('\n')
        .expect("a newline after the begin marker");
    let expected = claims::markdown_table(&claims::all());
    assert!(
        block == expected,
        "book/src/appendix-claims.md is out of date with the claims registry.\n\
         Regenerate it with `bash scripts/update-book-claims.sh`, which writes the output of\n\
         `cargo run --release -q -- tour --markdown --skip-figures` between the markers.\n\
         --- in the book ---\n{block}\n--- registry ---\n{expected}"
    );
}

// ------------------------------------------------------------------ (b) includes

/// `(line number, directive body)` for every `{{#include …}}` / `{{#rustdoc_include …}}`.
fn includes(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find("{{#") {
            let after = &rest[start + 3..];
            let Some(close) = after.find("}}") else {
                break;
            };
            let body = after[..close].trim();
            if let Some(arg) = body
                .strip_prefix("include ")
                .or_else(|| body.strip_prefix("rustdoc_include "))
            {
                out.push((i + 1, arg.trim().to_string()));
            }
            rest = &after[close + 2..];
        }
    }
    out
}

fn is_line_range(s: &str) -> bool {
    s.split(':')
        .all(|part| part.chars().all(|c| c.is_ascii_digit()))
}

#[test]
fn every_include_points_at_an_existing_file_and_anchor() {
    let mut checked = 0;
    for (page, text) in pages() {
        let dir = page.parent().unwrap();
        for (line, arg) in includes(&text) {
            let (file, selector) = match arg.split_once(':') {
                Some((f, s)) => (f, Some(s)),
                None => (arg.as_str(), None),
            };
            let target = dir.join(file);
            let where_ = format!("{}:{line}: {{{{#include {arg}}}}}", name(&page));
            assert!(
                target.is_file(),
                "{where_}: no such file {}",
                target.display()
            );
            let source = fs::read_to_string(&target).expect("readable include");
            if let Some(anchor) = selector.filter(|s| !is_line_range(s)) {
                let opens = source
                    .lines()
                    .filter(|l| l.trim() == format!("// ANCHOR: {anchor}"))
                    .count();
                let closes = source
                    .lines()
                    .filter(|l| l.trim() == format!("// ANCHOR_END: {anchor}"))
                    .count();
                assert!(
                    opens == 1 && closes == 1,
                    "{where_}: {} must contain `ANCHOR: {anchor}` and `ANCHOR_END: {anchor}` once each (found {opens} and {closes})",
                    target.display()
                );
                let start = source.find(&format!("ANCHOR: {anchor}")).unwrap();
                let stop = source.find(&format!("ANCHOR_END: {anchor}")).unwrap();
                assert!(start < stop, "{where_}: ANCHOR_END before ANCHOR");
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "the book includes nothing");
}

/// Every `// ANCHOR:` in src/ marks a listing some page shows; an anchor no page includes
/// is a stale marker (delete it, or show the code).
#[test]
fn every_anchor_in_src_is_included_by_a_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut included = BTreeSet::new();
    for (page, text) in pages() {
        for (_, arg) in includes(&text) {
            if let Some((file, anchor)) = arg.split_once(':') {
                let target = page.parent().unwrap().join(file);
                if let Ok(target) = target.canonicalize() {
                    included.insert((target, anchor.to_string()));
                }
            }
        }
    }
    let mut orphans = Vec::new();
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("readable src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = fs::read_to_string(&path).expect("readable source");
            let canonical = path.canonicalize().expect("canonical path");
            for (i, line) in text.lines().enumerate() {
                if let Some(anchor) = line.trim().strip_prefix("// ANCHOR: ")
                    && !included.contains(&(canonical.clone(), anchor.trim().to_string()))
                {
                    let rel = path.strip_prefix(root).unwrap().display().to_string();
                    orphans.push(format!("{rel}:{}: ANCHOR: {anchor}", i + 1));
                }
            }
        }
    }
    orphans.sort();
    assert!(
        orphans.is_empty(),
        "anchors no page includes:\n{}",
        orphans.join("\n")
    );
}

#[test]
fn code_listings_sit_in_ignored_rust_blocks() {
    // A listing is not a standalone program, so rustdoc/mdbook test must not try to run it.
    for (page, text) in pages() {
        let mut fence: Option<String> = None;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            if let Some(info) = t.strip_prefix("```") {
                fence = match fence {
                    None => Some(info.trim().to_string()),
                    Some(_) => None,
                };
                continue;
            }
            if line.contains("{{#include") && line.contains(".rs") {
                let info = fence.as_deref().unwrap_or("(no code block)");
                assert!(
                    info.starts_with("rust") && info.contains("ignore"),
                    "{}:{}: a Rust listing must be inside a ```rust,ignore block, found {info:?}",
                    name(&page),
                    i + 1
                );
            }
        }
    }
}

#[test]
fn figures_are_included_on_their_own_line_and_render_as_one_html_block() {
    let mut figures = 0;
    for (page, text) in pages() {
        let dir = page.parent().unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (line, arg) in includes(&text) {
            if !arg.ends_with(".svg") {
                continue;
            }
            let at = format!("{}:{line}", name(&page));
            let own = lines[line - 1].trim();
            assert_eq!(
                own,
                format!("{{{{#include {arg}}}}}"),
                "{at}: a figure include must be alone on its line"
            );
            // An HTML block cannot interrupt a paragraph: blank lines around the figure.
            assert!(
                line >= 2 && lines[line - 2].trim().is_empty(),
                "{at}: blank line needed before the figure"
            );
            assert!(
                lines.get(line).is_none_or(|l| l.trim().is_empty()),
                "{at}: blank line needed after the figure"
            );
            let svg = fs::read_to_string(dir.join(&arg)).expect("figure exists");
            assert!(
                svg.starts_with("<svg"),
                "{at}: {arg} must start with <svg so Markdown passes it through as HTML"
            );
            // A blank line would end the HTML block and the rest would render as text.
            assert!(
                !svg.lines().any(|l| l.trim().is_empty()),
                "{at}: {arg} contains a blank line"
            );
            assert!(svg.len() < 1_200_000, "{at}: {arg} is {} bytes", svg.len());
            figures += 1;
        }
    }
    assert!(figures >= 5, "expected the five figures of chapters 1–3");
}

#[test]
fn summary_links_existing_pages() {
    let summary = fs::read_to_string(book_src().join("SUMMARY.md")).expect("SUMMARY.md");
    let mut links = 0;
    for line in summary.lines() {
        let mut rest = line;
        while let Some(open) = rest.find("](") {
            let after = &rest[open + 2..];
            let close = after.find(')').expect("closed link");
            let target = &after[..close];
            assert!(
                book_src().join(target).is_file(),
                "SUMMARY.md links {target}, which does not exist"
            );
            links += 1;
            rest = &after[close + 1..];
        }
    }
    assert!(links >= 5, "SUMMARY.md lists only {links} pages");
}

// ------------------------------------------------------------------ (c) claim ids

const FILE_EXTENSIONS: &[&str] = &[
    "rs",
    "md",
    "json",
    "svg",
    "ipynb",
    "py",
    "sh",
    "toml",
    "txt",
    "html",
    "png",
    "safetensors",
    "tiktoken",
];

/// Inline code spans shaped like a claim id: `prefix.rest` where `prefix` is one of the
/// registry's prefixes (`rope`, `ext`, …) and `rest` is lower-case words and dots.
fn cited_ids(text: &str, prefixes: &BTreeSet<String>) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (line, l) in prose_lines(text) {
        for span in code_spans(l) {
            let Some((prefix, rest)) = span.split_once('.') else {
                continue;
            };
            let shaped = !rest.is_empty()
                && rest
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
            let last = rest.rsplit('.').next().unwrap_or("");
            if prefixes.contains(prefix) && shaped && !FILE_EXTENSIONS.contains(&last) {
                out.push((line, span.to_string()));
            }
        }
    }
    out
}

fn prefixes() -> BTreeSet<String> {
    claims::entries()
        .map(|e| e.id.split('.').next().unwrap().to_string())
        .collect()
}

#[test]
fn every_cited_claim_id_exists() {
    let known: BTreeSet<&str> = claims::entries().map(|e| e.id).collect();
    let prefixes = prefixes();
    let mut cited = 0;
    for (page, text) in pages() {
        for (line, id) in cited_ids(&text, &prefixes) {
            assert!(
                known.contains(id.as_str()),
                "{}:{line}: cites `{id}`, which is not in the claims registry",
                name(&page)
            );
            cited += 1;
        }
    }
    assert!(cited > 20, "the book cites only {cited} claim ids");
}

#[test]
fn every_cited_erratum_is_explained_in_an_erratum_box() {
    let errata: BTreeSet<String> = claims::all()
        .into_iter()
        .filter(|c| c.status == Status::Erratum)
        .map(|c| c.id.to_string())
        .collect();
    let prefixes = prefixes();
    // Chapter pages (NN-name.md); the introduction and the appendix only mention ids.
    for (page, text) in pages() {
        if !name(&page).starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let cited: BTreeSet<String> = cited_ids(&text, &prefixes)
            .into_iter()
            .map(|(_, id)| id)
            .filter(|id| errata.contains(id))
            .collect();
        let boxes: String = text
            .split("<div class=\"erratum\">")
            .skip(1)
            .map(|b| b.split("</div>").next().unwrap_or(""))
            .collect();
        for id in cited {
            assert!(
                boxes.contains(&format!("`{id}`")),
                "{} cites the erratum `{id}` but no <div class=\"erratum\"> box explains it",
                name(&page)
            );
        }
    }
}

#[test]
fn every_erratum_of_a_written_chapter_has_a_box() {
    // Once a chapter cites claims of a prefix (`rope`, `ext`, …), every erratum with that
    // prefix must be explained in some chapter's Erratum box.
    let prefixes = prefixes();
    let chapters: Vec<(PathBuf, String)> = pages()
        .into_iter()
        .filter(|(p, _)| name(p).starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    let written: BTreeSet<String> = chapters
        .iter()
        .flat_map(|(_, t)| cited_ids(t, &prefixes))
        .map(|(_, id)| id.split('.').next().unwrap().to_string())
        .collect();
    let boxes: String = chapters
        .iter()
        .flat_map(|(_, t)| {
            t.split("<div class=\"erratum\">")
                .skip(1)
                .map(|b| b.split("</div>").next().unwrap_or("").to_string())
        })
        .collect();
    let mut explained = 0;
    for c in claims::all() {
        let prefix = c.id.split('.').next().unwrap();
        if c.status == Status::Erratum && written.contains(prefix) {
            assert!(
                boxes.contains(&format!("`{}`", c.id)),
                "the erratum `{}` has no Erratum box in the book's chapters",
                c.id
            );
            explained += 1;
        }
    }
    assert!(
        explained >= 6,
        "expected the six errata of chapters 1–3, found {explained}"
    );
}

// ------------------------------------------------------------------ (d) derived numbers

/// Rounds to `digits` decimals for comparison with a number as printed in the book.
fn rounded(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

#[test]
fn chapter1_numbers() {
    let f = rope::inv_freq(128, 1e4);
    // Exercise 2 and Figure 1.1: plane 16 turns at 0.1 rad/token, wavelength 62.8;
    // plane 0 every 6.3 tokens, plane 48 every 6 283.
    assert_eq!(rounded(f[16], 12), 0.1);
    assert_eq!(rounded(rope::wavelength(f[16]), 1), 62.8);
    assert_eq!(rounded(rope::wavelength(f[0]), 1), 6.3);
    assert_eq!(rope::wavelength(f[48]).round(), 6283.0);
    // Exercise 3 and the clock erratum: θ = 0.03 sits at i ≈ 24.4; plane 24 has
    // θ ≈ 0.0316 and a wavelength of ≈ 199 tokens.
    let i = -(0.03f64.ln()) / 1e4f64.ln() * 64.0;
    assert_eq!(rounded(i, 1), 24.4);
    assert_eq!(rounded(f[24], 4), 0.0316);
    assert_eq!(rope::wavelength(f[24]).round(), 199.0);
    // The hour-hand erratum: the slowest plane is faster than 1/base by base^(2/d).
    let slow = |base: f64| rope::inv_freq(128, base)[63] * base;
    assert_eq!(rounded(slow(1e4), 3), 1.155);
    assert_eq!(rounded(slow(1e6), 2), 1.24);
}

#[test]
fn chapter2_numbers() {
    // "≈ 43 of 64" at τ = 10, about two thirds.
    assert_eq!(decay::decay_sum(128, 1e4, 0.0), 64.0);
    let s10 = decay::decay_sum(128, 1e4, 10.0);
    assert_eq!(s10.round(), 43.0);
    assert!((s10 / 64.0 - 2.0 / 3.0).abs() < 0.02);
    // Exercise 2: the law reaches zero at base·e^(−γ) ≈ 5,600; the fitted line near 5,300.
    let euler_gamma = 0.577_215_664_901_532_9_f64;
    let zero = 1e4 * (-euler_gamma).exp();
    assert_eq!((zero / 100.0).round() * 100.0, 5600.0);
    let fit = decay::fit_decay(128, 1e4, 1e4, 200);
    let fitted_zero = (-fit.log_intercept / fit.log_slope).exp();
    assert_eq!((fitted_zero / 100.0).round() * 100.0, 5300.0);
    assert_eq!(rounded(fit.predicted_log_slope, 2), -6.95);
    // Exercise 3: base 10⁶ predicts slope −4.63, flatter than −6.95.
    let fit6 = decay::fit_decay(128, 1e6, 1e4, 200);
    assert_eq!(rounded(fit6.predicted_log_slope, 2), -4.63);
    assert!(fit6.log_slope > fit.log_slope);
}

#[test]
fn chapter3_numbers() {
    let f = rope::inv_freq(128, 1e4);
    // §3.1: plane 45 wraps within 4 096 tokens (≈ 4,080), plane 46 does not (≈ 4,712).
    assert_eq!(rope::wavelength(f[45]).round(), 4080.0);
    assert_eq!(rope::wavelength(f[46]).round(), 4712.0);
    let ood = scaling::ood_planes(&f, 4096, 5000);
    let first = ood.iter().position(|p| p.out_of_distribution()).unwrap();
    assert_eq!(first, 46);

    // Exercise 3: the NTK-aware base for s = 4 is ≈ 40,890.
    assert_eq!(
        (scaling::ntk_base(1e4, 4.0, 128) / 10.0).round() * 10.0,
        40_890.0
    );

    // Figure 3.2: with base 10⁴ and original 4 096, planes 0–20 keep their speed and
    // planes from 46 on are fully interpolated.
    let cfg = scaling::RopeConfig::new(
        128,
        1e4,
        Some(&serde_json::json!({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096})),
        None,
        "book figure 3.2",
    )
    .unwrap();
    let scaling::RopeScaling::Yarn(y) = &cfg.scaling else {
        panic!("yarn expected")
    };
    let ramp = scaling::yarn_ramp(y, 1e4, 128);
    assert!(ramp[..=20].iter().all(|&r| r == 0.0));
    assert!(ramp[21] > 0.0 && ramp[45] < 1.0);
    assert!(ramp[46..].iter().all(|&r| r == 1.0));

    // §3.4 and exercise 6: Qwen3's YaRN (10⁶, ×4 from 32 768) keeps the first 24
    // frequencies, quarters the last 24, and scales logits by ≈ 1.30.
    let qwen = scaling::RopeConfig::new(
        128,
        1e6,
        Some(&serde_json::json!({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768})),
        None,
        "book exercise 3.6",
    )
    .unwrap()
    .init(None)
    .unwrap();
    let plain = rope::inv_freq(128, 1e6);
    assert!((0..24).all(|i| qwen.inv_freq[i] == plain[i]));
    assert!((40..64).all(|i| (qwen.inv_freq[i] * 4.0 - plain[i]).abs() <= 1e-15 * plain[i]));
    assert!((24..40).all(|i| qwen.inv_freq[i] < plain[i] && qwen.inv_freq[i] > plain[i] / 4.0));
    assert_eq!(rounded(qwen.attention_factor.powi(2), 2), 1.30);

    // Exercise 5: a 32K FP16 attention matrix is 2³¹ bytes = 2 GiB (2.15 GB); Qwen3-30B-A3B's
    // BF16 KV cache is 98,304 bytes per token, 3 GiB for 32,768 tokens.
    let matrix = memory::attention_matrix_bytes(32_768, 2);
    assert_eq!(matrix, 1u64 << 31);
    let (gb, gib) = memory::gb_and_gib(matrix);
    assert_eq!((rounded(gb, 2), gib), (2.15, 2.0));
    assert_eq!(memory::kv_cache_bytes_per_token(48, 4, 128, 2), 98_304);
    assert_eq!(memory::kv_cache_bytes(32_768, 48, 4, 128, 2), 3 << 30);
}

// ------------------------------------------------------------------ (e) rendering

const ERRATUM_OPEN: &str = "<div class=\"erratum\"><strong>Erratum</strong>";

/// A page rendered to HTML the way mdBook renders it (pulldown-cmark with mdBook's
/// extensions; preprocessors such as KaTeX aside).
fn render(markdown: &str) -> String {
    use pulldown_cmark::{Options, Parser, html};
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES;
    let mut out = String::new();
    html::push_html(&mut out, Parser::new_ext(markdown, options));
    out
}

/// An Erratum box is raw HTML around Markdown. CommonMark ends an HTML block at the first
/// blank line and passes everything before it through as it is, so the opening line must
/// hold only the tags and be followed by a blank line (and `</div>` stand alone after
/// one); otherwise the box's ids show as literal backticks and its maths as raw `$`.
#[test]
fn erratum_boxes_render_their_markdown() {
    let mut boxes = 0;
    for (page, text) in pages() {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.contains("<div class=\"erratum\">") {
                continue;
            }
            let at = format!("{}:{}", name(&page), i + 1);
            assert_eq!(
                line.trim_end(),
                ERRATUM_OPEN,
                "{at}: an Erratum box opens with `{ERRATUM_OPEN}` alone on its line"
            );
            assert!(
                lines.get(i + 1).is_some_and(|l| l.trim().is_empty()),
                "{at}: a blank line must follow the opening tags, or the box's Markdown stays raw"
            );
            let close = (i + 1..lines.len())
                .find(|&j| lines[j].contains("</div>"))
                .unwrap_or_else(|| panic!("{at}: the box is not closed"));
            assert!(
                lines[close].trim() == "</div>" && lines[close - 1].trim().is_empty(),
                "{}:{}: `</div>` must stand alone after a blank line",
                name(&page),
                close + 1
            );
            boxes += 1;
        }
        // What the reader sees: inside every box, code spans became <code> and no
        // backtick is left over.
        let html = render(&text);
        for rendered in html.split("<div class=\"erratum\">").skip(1) {
            let body = rendered.split("</div>").next().unwrap_or("");
            assert!(
                !body.contains('`'),
                "{}: an Erratum box renders literal backticks:\n{body}",
                name(&page)
            );
        }
        let source_boxes: Vec<&str> = text
            .split("<div class=\"erratum\">")
            .skip(1)
            .map(|b| b.split("</div>").next().unwrap_or(""))
            .collect();
        for b in source_boxes {
            for (_, l) in prose_lines(b) {
                for span in code_spans(l) {
                    let escaped = span
                        .replace('&', "&amp;")
                        .replace('<', "&lt;")
                        .replace('>', "&gt;");
                    // pulldown-cmark leaves quotes as they are in body text; either is code.
                    let quoted = escaped.replace('"', "&quot;");
                    assert!(
                        html.contains(&format!("<code>{escaped}</code>"))
                            || html.contains(&format!("<code>{quoted}</code>")),
                        "{}: `{span}` in an Erratum box does not render as code",
                        name(&page)
                    );
                }
            }
        }
    }
    assert!(
        boxes >= 10,
        "expected the book's Erratum boxes, found {boxes}"
    );
}

/// The CJK ranges of scripts/gen_cjk_font.py (keep the two lists the same).
fn is_cjk(c: char) -> bool {
    const RANGES: &[(u32, u32)] = &[
        (0x1100, 0x11FF),
        (0x2E80, 0x2FDF),
        (0x3000, 0x303F),
        (0x3040, 0x30FF),
        (0x3100, 0x31FF),
        (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF),
        (0xAC00, 0xD7AF),
        (0xF900, 0xFAFF),
        (0xFE30, 0xFE4F),
        (0xFF00, 0xFFEF),
        (0x20000, 0x3FFFF),
    ];
    RANGES
        .iter()
        .any(|&(lo, hi)| (lo..=hi).contains(&(c as u32)))
}

/// Every Markdown file under book/src, generated tables included.
fn all_markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable book/src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            all_markdown(&path, out);
        } else if path.extension().is_some_and(|x| x == "md") {
            out.push(path);
        }
    }
}

/// The Chinese titles render on a machine without CJK fonts because the book ships a
/// subset font (book/src/fonts/, scripts/gen_cjk_font.py) that book/theme/cjk.css loads.
/// Both faces' cmaps must map every CJK character the book uses to a real glyph.
#[test]
fn every_cjk_character_of_the_book_is_in_the_font() {
    let mut files = Vec::new();
    all_markdown(&book_src(), &mut files);
    let mut used = BTreeSet::new();
    for f in &files {
        used.extend(
            fs::read_to_string(f)
                .expect("readable")
                .chars()
                .filter(|&c| is_cjk(c)),
        );
    }
    assert!(
        used.len() > 100,
        "only {} CJK characters in the book",
        used.len()
    );
    for face in ["anatomy-cjk-regular.otf", "anatomy-cjk-bold.otf"] {
        let path = book_src().join("fonts").join(face);
        let data = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let font = ttf_parser::Face::parse(&data, 0).expect("an OpenType font");
        let missing: String = used
            .iter()
            .filter(|&&c| font.glyph_index(c).is_none_or(|g| g.0 == 0))
            .collect();
        assert!(
            missing.is_empty(),
            "{face} lacks {} CJK characters of book/src: {missing}\n\
             regenerate it with `python3 scripts/gen_cjk_font.py`",
            missing.chars().count()
        );
    }
    // The stylesheet that loads the fonts is the one book.toml lists.
    let toml = fs::read_to_string(book_src().join("../book.toml")).expect("book.toml");
    assert!(
        toml.contains("\"theme/cjk.css\""),
        "book.toml must list theme/cjk.css"
    );
    let css = fs::read_to_string(book_src().join("../theme/cjk.css")).expect("cjk.css");
    for face in ["anatomy-cjk-regular.otf", "anatomy-cjk-bold.otf"] {
        assert!(
            css.contains(&format!("url(\"../fonts/{face}\")")),
            "cjk.css must load {face}"
        );
    }
}

// ------------------------------------------------------------------ (f) more derived numbers

#[test]
fn chapter4_numbers() {
    use llm_anatomy::kernels::rmsnorm;
    // §4.5, "[Glitch] 什么意思": what Qwen2.5-7B's pre-attention RMSNorm (ε = 1e-6,
    // d = 3,584, γ = 1) makes of the source's six rows, in the library's kernel (f32, a
    // seeded random direction scaled to each norm) and in closed form.
    let (d, eps) = (3584usize, 1e-6f64);
    let ordinary = (d as f64).sqrt();
    assert_eq!(rounded(ordinary, 2), 59.87);
    let direction = llm_anatomy::rand::random_tokens(1, d, 12);
    let direction: Vec<f32> = direction.iter().copied().collect();
    let len = direction
        .iter()
        .map(|&v| (v as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    let gamma = vec![1.0f32; d];
    let table = [
        (0.0150, 14.55, 0.243),
        (0.0213, 20.07, 0.335),
        (0.0263, 24.08, 0.402),
        (0.0295, 26.46, 0.442),
        (0.0899, 49.83, 0.832),
        (0.1211, 53.67, 0.896),
    ];
    for (norm, after, share) in table {
        let closed = norm / (norm * norm / d as f64 + eps).sqrt();
        let row: Vec<f32> = direction
            .iter()
            .map(|&v| (v as f64 * norm / len) as f32)
            .collect();
        let mut out = vec![0f32; d];
        rmsnorm(&row, &gamma, eps as f32, &mut out);
        let kernel = out.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
        for (what, value) in [("closed form", closed), ("kernel", kernel)] {
            assert_eq!(rounded(value, 2), after, "{what}, norm {norm}");
            assert_eq!(rounded(value / ordinary, 3), share, "{what}, norm {norm}");
        }
    }
    // The smallest row: mean square 6.28e-8, ε 16 times larger, scaled up 970-fold.
    let ms = 0.015f64 * 0.015 / d as f64;
    assert_eq!((ms * 1e10).round(), 628.0); // 6.28e-8
    assert_eq!((eps / ms).round(), 16.0);
    assert_eq!((1.0 / (ms + eps).sqrt()).round(), 970.0);
}

#[test]
fn chapter1_no_parameters_numbers() {
    // §1.7, S1 Q1 ②: a learned absolute table for Qwen3-30B-A3B's context would hold
    // max_position_embeddings × hidden_size = 40,960 × 2,048 = 83,886,080 parameters.
    let text = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/configs/qwen3-30b-a3b.json"),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (positions, hidden) = (
        v["max_position_embeddings"].as_u64().unwrap(),
        v["hidden_size"].as_u64().unwrap(),
    );
    assert_eq!((positions, hidden), (40_960, 2048));
    assert_eq!(positions * hidden, 83_886_080);
    // RoPE's own numbers are computed, not stored: d/2 = 64 frequencies from the base.
    assert_eq!(rope::inv_freq(128, 1e6).len(), 64);
}

#[test]
fn synthesis_numbers() {
    use llm_anatomy::params::{bundled, count};
    // "4K → 1M": 4,096 → 1,048,576 is 256×; DeepSeek-V3's YaRN covers 40× (4,096 → 163,840).
    assert_eq!(1_048_576 / 4096, 256);
    assert_eq!(163_840 / 4096, 40);
    // "13B cost ↔ 671B capacity": Mixtral's active count and DeepSeek-V3's total.
    let b = |x: u64| rounded(x as f64 / 1e9, 1);
    let mixtral = count(&bundled("mixtral-8x7b").unwrap());
    let deepseek = count(&bundled("deepseek-v3").unwrap());
    let qwen = count(&bundled("qwen3-30b-a3b").unwrap());
    assert_eq!((b(mixtral.active), b(mixtral.total)), (12.9, 46.7));
    assert_eq!((b(deepseek.total), b(deepseek.active)), (671.0, 37.6));
    let ratio = |r: &llm_anatomy::params::ParamReport| rounded(r.total as f64 / r.active as f64, 1);
    assert_eq!(
        (ratio(&mixtral), ratio(&qwen), ratio(&deepseek)),
        (3.6, 9.1, 17.9)
    );
    // The troubleshooting table: Mixtral's FP16 weights, PI's resolution at s = 8.
    assert_eq!(rounded(mixtral.bytes_bf16 as f64 / 1e9, 1), 93.4);
    assert_eq!(rope::inv_freq(128, 1e4)[0] / 8.0, 0.125);
}

/// The figure rule `.content svg { height: auto }` must not reach KaTeX's SVGs (the radical
/// of `\sqrt`), which take their height from their box; it did, and square roots rendered
/// without their sign in a real browser.
#[test]
fn katex_svgs_keep_their_height() {
    let css = fs::read_to_string(book_src().join("../theme/erratum.css")).expect("erratum.css");
    let rule = css
        .split(".content .katex svg")
        .nth(1)
        .and_then(|r| r.split('}').next())
        .expect("a `.content .katex svg` rule after `.content svg`");
    assert!(rule.contains("height: inherit"), "{rule}");
    assert!(css.find(".content svg").unwrap() < css.find(".content .katex svg").unwrap());
}

#[test]
fn chapter11_numbers() {
    use llm_anatomy::params::{bundled, quant};
    use llm_anatomy::quant::GgmlType;
    use llm_anatomy::quant::mix::FileType;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    // Exercise 1: Mixtral 8x7B at Q4_K_M, its f16 cache at 32,768 tokens; the 8-expert
    // rule's Q8_0 (attn_k, attn_v) and Q5_K (attn_output) parameters.
    let mixtral = quant::estimate(&bundled("mixtral-8x7b").unwrap(), FileType::Q4_K_M, 32_768);
    assert_eq!(rounded(mixtral.file_gib, 2), 26.50);
    assert_eq!(rounded(mixtral.memory_gib, 2), 30.49);
    let of = |name: &str| {
        let t = mixtral.by_type.iter().find(|t| t.ty == name).unwrap();
        t.parameters
    };
    assert_eq!(of(GgmlType::Q8_0.name()), 268_435_456);
    assert_eq!(of(GgmlType::Q5_K.name()), 536_870_912);
    // Exercise 4: what 24 GiB leaves at Q4_K_M with an f16 cache, and with a Q8_0 cache.
    let a3b = quant::estimate(&bundled("qwen3-30b-a3b").unwrap(), FileType::Q4_K_M, 40_960);
    assert_eq!(rounded(24.0 - a3b.memory_gib, 2), 2.97);
    let q8_cache = gib(a3b.kv_cache_bytes) * 8.5 / 16.0;
    assert_eq!(rounded(q8_cache, 2), 1.99);
    assert_eq!(rounded(24.0 - gib(a3b.tensor_bytes) - q8_cache, 2), 4.73);
    // §11.5: a Q4_K_M token reads under a third of the bytes a bf16 token reads.
    let bf16 = quant::estimate(&bundled("qwen3-30b-a3b").unwrap(), FileType::BF16, 40_960);
    assert!(3 * a3b.bytes_read_per_token < bf16.bytes_read_per_token);
}
