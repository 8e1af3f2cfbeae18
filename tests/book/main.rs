//! Checks on the mdBook in `book/`: the claims appendix is the registry's current table,
//! every `{{#include}}` resolves (file and anchor), every claim id the book cites exists,
//! every erratum it cites is explained in an Erratum box, and the numbers the chapters
//! derive beyond the registry (figure captions, errata, exercise answers) are recomputed.

mod derived;
mod shape;

use llm_anatomy::claims::{self, Status};
use llm_anatomy::long_context::{memory, scaling};
use llm_anatomy::position::{decay, rope};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The two kinds of verdict box: (CSS class, title), and the status each explains.
const BOXES: &[(&str, &str)] = &[
    ("erratum", "Erratum"),
    ("not-shown", "Not shown at this scale"),
];

const BEGIN: &str = "<!-- claims:begin -->";
const END: &str = "<!-- claims:end -->";

fn book_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("book")
        .join("src")
}

/// Every Markdown file of the book (book/src and its Reproducing pages in book/src/reproduce),
/// with its text, sorted by path.
fn pages() -> Vec<(PathBuf, String)> {
    let mut pages = Vec::new();
    for dir in [book_src(), book_src().join("reproduce")] {
        for entry in fs::read_dir(&dir).expect("book/src exists") {
            let p = entry.expect("readable entry").path();
            if p.extension().is_some_and(|x| x == "md") {
                let text = fs::read_to_string(&p).expect("readable page");
                pages.push((p, text));
            }
        }
    }
    pages.sort();
    pages
}

/// A numbered chapter of the book (`01-position.md` … `13b-context.md`), not a Reproducing page.
fn is_chapter(p: &Path) -> bool {
    p.parent() == Some(book_src().as_path()) && name(p).starts_with(|c: char| c.is_ascii_digit())
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
    // `real.kl` runs our engine on the real GGUF files; without them (a clone that has not
    // run scripts/get-real-models.sh) it is needs-data, so its row is left out of the check.
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/real-models");
    let present = ["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf"]
        .iter()
        .all(|f| models.join(f).is_file());
    let without_kl = |t: &str| -> String {
        t.lines()
            .filter(|l| present || !l.starts_with("| `real.kl` |"))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    if !present {
        eprintln!(
            "appendix_is_the_current_claims_table: real.kl's row not compared \
             (fetch the models with `bash scripts/get-real-models.sh`)"
        );
    }
    let (block, expected) = (without_kl(block), without_kl(&expected));
    let cpu_free = claims::real_kl::without_cpu_dependent_figures;
    let (block, expected) = (cpu_free(&block), cpu_free(&expected));
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

/// The registry status a box of this CSS class explains.
fn box_status(class: &str) -> Status {
    match class {
        "erratum" => Status::Erratum,
        "not-shown" => Status::NotShown,
        other => panic!("no box kind {other}"),
    }
}

/// The text inside every box of one kind on a page, concatenated.
fn boxes_of(text: &str, class: &str) -> String {
    text.split(&format!("<div class=\"{class}\">"))
        .skip(1)
        .map(|b| b.split("</div>").next().unwrap_or(""))
        .collect()
}

#[test]
fn every_cited_erratum_or_not_shown_claim_is_explained_in_its_box() {
    let all = claims::all();
    let prefixes = prefixes();
    // Chapter pages (NN-name.md); the introduction and the appendix only mention ids.
    for (page, text) in pages() {
        if !is_chapter(&page) {
            continue;
        }
        for &(class, title) in BOXES {
            let status = box_status(class);
            let boxes = boxes_of(&text, class);
            for (_, id) in cited_ids(&text, &prefixes) {
                if all.iter().any(|c| c.id == id && c.status == status) {
                    assert!(
                        boxes.contains(&format!("`{id}`")),
                        "{} cites `{id}` ({}) but no {title} box explains it",
                        name(&page),
                        status.as_str()
                    );
                }
            }
        }
    }
}

#[test]
fn every_erratum_and_not_shown_claim_of_a_written_chapter_has_a_box() {
    // Once a chapter cites claims of a prefix (`rope`, `ext`, …), every erratum or
    // not-shown claim with that prefix must be explained in some chapter's box of its kind.
    let prefixes = prefixes();
    let chapters: Vec<(PathBuf, String)> =
        pages().into_iter().filter(|(p, _)| is_chapter(p)).collect();
    let written: BTreeSet<String> = chapters
        .iter()
        .flat_map(|(_, t)| cited_ids(t, &prefixes))
        .map(|(_, id)| id.split('.').next().unwrap().to_string())
        .collect();
    let mut explained = 0;
    for &(class, title) in BOXES {
        let boxes: String = chapters.iter().map(|(_, t)| boxes_of(t, class)).collect();
        for c in claims::all() {
            let prefix = c.id.split('.').next().unwrap();
            if c.status == box_status(class) && written.contains(prefix) {
                assert!(
                    boxes.contains(&format!("`{}`", c.id)),
                    "`{}` is {} but no {title} box in the book's chapters explains it",
                    c.id,
                    c.status.as_str()
                );
                explained += 1;
            }
        }
    }
    assert!(
        explained >= 6,
        "expected the six errata of chapters 1–3, found {explained}"
    );
}
