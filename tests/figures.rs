//! Every figure renders, has a title and axis labels, and the committed SVG in figures/ is
//! what the code draws now (regenerate with `cargo run --release -- figures`).

use llm_anatomy::figures::{FIGURES, render_svg};

#[test]
fn committed_figures_are_current() {
    assert!(FIGURES.len() >= 5);
    for fig in FIGURES {
        let svg = render_svg(fig.name).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<text"),
            "{} has no text",
            fig.name
        );
        assert!(svg.len() < 1_200_000, "{} is {} bytes", fig.name, svg.len());
        // The book inlines the SVG as one HTML block, which a blank line would end.
        assert!(
            !svg.lines().any(|l| l.trim().is_empty()),
            "{} has a blank line (an empty text?)",
            fig.name
        );
        let path = format!("{}/figures/{}.svg", env!("CARGO_MANIFEST_DIR"), fig.name);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == svg,
            "{path} is stale or missing: run `cargo run --release -- figures`"
        );
    }
}

#[test]
fn unknown_figure_is_an_error() {
    assert!(render_svg("no_such_figure").is_err());
}

/// The texts of an SVG as plotters writes them (`<text …>\ncontent\n</text>`).
fn svg_texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim())
        })
        .collect()
}

/// A text that is only a number: a tick label.
fn is_number(text: &str) -> bool {
    text.chars().any(|c| c.is_ascii_digit())
        && text
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '−' | ' '))
}

/// Tick labels show the number and nothing more: "0" and "100", not "0.0" and "100.0", and
/// never "-0". The committed files are what the code draws (the test above), so they are
/// read, not drawn again.
#[test]
fn tick_labels_have_no_spurious_digits() {
    for fig in FIGURES {
        let path = format!("{}/figures/{}.svg", env!("CARGO_MANIFEST_DIR"), fig.name);
        let svg = std::fs::read_to_string(&path).unwrap_or_default();
        for text in svg_texts(&svg).into_iter().filter(|t| is_number(t)) {
            assert!(
                !(text.contains('.') && text.ends_with('0')),
                "{}: tick label {text:?} has a trailing zero",
                fig.name
            );
            assert!(
                !matches!(text, "-0" | "−0"),
                "{}: tick label {text:?} is a negative zero",
                fig.name
            );
        }
    }
}
