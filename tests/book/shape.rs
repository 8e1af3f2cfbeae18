//! The shape every chapter keeps (design.md, "How a chapter reads"): short listings, a
//! summary and exercises with hidden answers, a link to its Reproducing page, no lab log in
//! the prose, verdict boxes and status sentences that agree with the registry, and an
//! introduction whose chapter map lists every page.

use super::*;
use fancy_regex::Regex;

/// The longest listing a chapter may include: the teaching core; the rest is linked by path.
const MAX_LISTING_LINES: usize = 40;

/// Pages that teach (chapters, introduction, synthesis): everything but the Reproducing
/// pages, the generated appendix and further reading's bibliography.
fn teaching_pages() -> Vec<(PathBuf, String)> {
    pages()
        .into_iter()
        .filter(|(p, _)| {
            p.parent() == Some(book_src().as_path())
                && !matches!(
                    name(p).as_str(),
                    "SUMMARY.md" | "appendix-claims.md" | "further-reading.md"
                )
        })
        .collect()
}

/// Chapters that end with a summary and exercises: the numbered ones and the synthesis.
fn ending_pages() -> Vec<(PathBuf, String)> {
    pages()
        .into_iter()
        .filter(|(p, _)| is_chapter(p) || name(p) == "synthesis.md")
        .collect()
}

/// The lines an include shows: a line range, an anchor's body (other anchors' marker lines
/// are dropped, as mdBook drops them) or the whole file.
fn listing_lines(source: &str, selector: Option<&str>) -> usize {
    let is_marker = |l: &str| {
        let t = l.trim();
        t.starts_with("// ANCHOR: ") || t.starts_with("// ANCHOR_END: ")
    };
    match selector {
        Some(s) if is_line_range(s) => {
            let bounds: Vec<usize> = s.split(':').filter_map(|x| x.parse().ok()).collect();
            match bounds.as_slice() {
                [a, b] => b + 1 - a,
                [a] => source.lines().count() + 1 - a,
                _ => source.lines().count(),
            }
        }
        Some(anchor) => source
            .lines()
            .skip_while(|l| l.trim() != format!("// ANCHOR: {anchor}"))
            .skip(1)
            .take_while(|l| l.trim() != format!("// ANCHOR_END: {anchor}"))
            .filter(|l| !is_marker(l))
            .count(),
        None => source.lines().filter(|l| !is_marker(l)).count(),
    }
}

#[test]
fn no_chapter_listing_is_longer_than_forty_lines() {
    let mut long = Vec::new();
    let mut listings = 0;
    for (page, text) in teaching_pages() {
        for (line, arg) in includes(&text) {
            let (file, selector) = match arg.split_once(':') {
                Some((f, s)) => (f, Some(s)),
                None => (arg.as_str(), None),
            };
            // Listings are code; generated tables (.md) are not.
            if !(file.ends_with(".rs") || file.ends_with(".py") || file.ends_with(".sh")) {
                continue;
            }
            let source = fs::read_to_string(page.parent().unwrap().join(file))
                .unwrap_or_else(|e| panic!("{}:{line}: {file}: {e}", name(&page)));
            let n = listing_lines(&source, selector);
            listings += 1;
            if n > MAX_LISTING_LINES {
                long.push(format!("{}:{line}: {arg} shows {n} lines", name(&page)));
            }
        }
    }
    assert!(
        listings > 20,
        "expected the book's listings, found {listings}"
    );
    assert!(
        long.is_empty(),
        "listings over {MAX_LISTING_LINES} lines (show the teaching core, link the rest by path):\n{}",
        long.join("\n")
    );
}

/// What belongs on a Reproducing page, not in a chapter: dates, machines, commits, issue
/// talk, load figures and environment switches.
fn lab_log_patterns() -> Vec<(&'static str, Regex)> {
    [
        ("a date", r"\b20\d\d-[01]\d-[0-3]\d\b|(?i:\b(january|february|march|april|june|july|august|september|october|november|december) 20\d\d\b)"),
        ("a machine", r"(?i)\b(zen ?\d|xeon|epyc|ryzen|threadripper|this session|this machine|the machine of)\b"),
        ("a commit hash", r"(?i)\bcommit `?[0-9a-f]{7,}|`(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}`"),
        ("issue talk", r"(?i)\bissues? #?\d+\b|\bthe task (asked|asks|says|said)\b|\bthe issue's\b|\(issue\b"),
        ("a load figure", r"(?i)\bload average|\bload (of )?\d"),
        ("an environment switch", r"\bANATOMY_[A-Z0-9_]+"),
    ]
    .into_iter()
    .map(|(what, re)| (what, Regex::new(re).expect("valid pattern")))
    .collect()
}

#[test]
fn chapter_prose_carries_no_lab_log() {
    let patterns = lab_log_patterns();
    let mut found = Vec::new();
    for (page, text) in teaching_pages() {
        for (line, prose) in prose_lines(&text) {
            for (what, re) in &patterns {
                if let Ok(Some(m)) = re.find(prose) {
                    found.push(format!(
                        "{}:{line}: {what} ({:?}) belongs on the chapter's Reproducing page",
                        name(&page),
                        m.as_str()
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The Reproducing page a chapter links: its own, or chapter 13's for 13a and 13b.
fn reproducing_page(chapter: &str) -> String {
    let stem = chapter.trim_end_matches(".md");
    if stem.starts_with("13") {
        return "reproduce/13-experiments.md".into();
    }
    format!("reproduce/{stem}.md")
}

#[test]
fn every_chapter_ends_with_a_summary_and_exercises_with_hidden_answers() {
    let mut problems = Vec::new();
    for (page, text) in ending_pages() {
        let page_name = name(&page);
        let headings: Vec<&str> = prose_lines(&text)
            .into_iter()
            .map(|(_, l)| l)
            .filter(|l| l.starts_with("## "))
            .collect();
        for section in ["Summary", "Exercises"] {
            if !headings.iter().any(|h| h.contains(section)) {
                problems.push(format!("{page_name}: no `## … {section}` section"));
            }
        }
        let opens = text.matches("<details>").count();
        let closes = text.matches("</details>").count();
        if opens == 0 || opens != closes {
            problems.push(format!(
                "{page_name}: exercise answers belong in <details> blocks ({opens} opened, {closes} closed)"
            ));
        }
        // An answer printed in the open, right under its question.
        let mut inside = 0i32;
        for (line, prose) in prose_lines(&text) {
            inside += prose.matches("<details>").count() as i32;
            inside -= prose.matches("</details>").count() as i32;
            let t = prose.trim_start();
            if inside == 0
                && ["**Answer", "*Answer", "_Answer", "Answer:"]
                    .iter()
                    .any(|a| t.starts_with(a))
            {
                problems.push(format!("{page_name}:{line}: an answer outside <details>"));
            }
        }
        if is_chapter(&page) && !text.contains(&format!("]({})", reproducing_page(&page_name))) {
            problems.push(format!(
                "{page_name}: no link to its Reproducing page {}",
                reproducing_page(&page_name)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_box_opens_with_a_claim_of_its_kind() {
    let all = claims::all();
    let prefixes = prefixes();
    let mut boxes = 0;
    for (page, text) in pages() {
        for &(class, title) in BOXES {
            for b in text.split(&format!("<div class=\"{class}\">")).skip(1) {
                let body = b.split("</div>").next().unwrap_or("");
                let first = cited_ids(body, &prefixes).into_iter().next();
                let (_, id) = first
                    .unwrap_or_else(|| panic!("{}: a {title} box cites no claim id", name(&page)));
                let status = all
                    .iter()
                    .find(|c| c.id == id)
                    .map(|c| c.status)
                    .unwrap_or_else(|| panic!("{}: `{id}` is not in the registry", name(&page)));
                assert_eq!(
                    status,
                    box_status(class),
                    "{}: a {title} box opens with `{id}`, whose status is {}",
                    name(&page),
                    status.as_str()
                );
                boxes += 1;
            }
        }
    }
    assert!(boxes >= 10, "expected the book's boxes, found {boxes}");
}

#[test]
fn status_sentences_agree_with_the_registry() {
    let all = claims::all();
    let sentence = Regex::new(
        r"`([a-z0-9_]+(?:\.[a-z0-9_]+)+)` (?:is|stays|remains|becomes|was) (?:now |an? )?(erratum|reproduced|not[- ]shown|needs[- ]data)",
    )
    .expect("valid pattern");
    let mut checked = 0;
    for (page, text) in pages() {
        if name(&page) == "appendix-claims.md" {
            continue;
        }
        // Sentences run over line breaks: read each page's prose as one line.
        let prose: Vec<&str> = prose_lines(&text).into_iter().map(|(_, l)| l).collect();
        let joined = prose.join(" ");
        for caps in sentence.captures_iter(&joined).flatten() {
            let (Some(id), Some(said)) = (caps.get(1), caps.get(2)) else {
                continue;
            };
            let (id, said) = (id.as_str(), said.as_str().replace(' ', "-"));
            let Some(claim) = all.iter().find(|c| c.id == id) else {
                continue; // every_cited_claim_id_exists names unknown ids
            };
            assert_eq!(
                said,
                claim.status.as_str(),
                "{} says `{id}` is {said}; the registry computes {}",
                name(&page),
                claim.status.as_str()
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no status sentence found to check");
}

#[test]
fn the_introductions_chapter_map_lists_every_page_of_summary() {
    let summary = fs::read_to_string(book_src().join("SUMMARY.md")).expect("SUMMARY.md");
    let intro = fs::read_to_string(book_src().join("introduction.md")).expect("introduction.md");
    let link = Regex::new(r"\]\(([^)]+\.md)\)").expect("valid pattern");
    let missing: Vec<String> = link
        .captures_iter(&summary)
        .flatten()
        .filter_map(|c| c.get(1).map(|m| m.as_str().to_string()))
        .filter(|target| target != "introduction.md")
        .filter(|target| !intro.contains(&format!("]({target})")))
        .collect();
    assert!(
        missing.is_empty(),
        "the introduction's chapter map lacks: {}",
        missing.join(", ")
    );
}
