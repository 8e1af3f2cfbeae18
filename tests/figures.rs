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
