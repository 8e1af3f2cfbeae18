//! The numbers the chapters derive beyond the registry (figure captions, errata, exercise
//! answers), recomputed; and how the book's Markdown renders.

use super::*;

// ------------------------------------------------------------------ (d) derived numbers

/// Rounds to `digits` decimals for comparison with a number as printed in the book.
fn rounded(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

#[test]
fn chapter1_numbers() {
    let f = rope::inv_freq(128, 1e4);
    // Exercise 2: plane 16 turns at 0.1 rad/token, wavelength 62.8 (between Figure 1.1's
    // second and minute hands); plane 0 every 6.3 tokens, plane 48 every 6 283.
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

/// A box (Erratum, Not shown at this scale) is raw HTML around Markdown. CommonMark ends an
/// HTML block at the first blank line and passes everything before it through as it is, so
/// the opening line must hold only the tags and be followed by a blank line (and `</div>`
/// stand alone after one); otherwise the box's ids show as literal backticks and its maths
/// as raw `$`.
#[test]
fn boxes_render_their_markdown() {
    let mut boxes = 0;
    for (page, text) in pages() {
        for &(class, title) in BOXES {
            boxes += check_box_markup(&page, &text, class, title);
        }
    }
    assert!(boxes >= 10, "expected the book's boxes, found {boxes}");
}

/// Checks every box of one kind on a page; returns how many there are.
fn check_box_markup(page: &Path, text: &str, class: &str, title: &str) -> usize {
    let div = format!("<div class=\"{class}\">");
    let open = format!("{div}<strong>{title}</strong>");
    let mut boxes = 0;
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if !line.contains(&div) {
            continue;
        }
        let at = format!("{}:{}", name(page), i + 1);
        assert_eq!(
            line.trim_end(),
            open,
            "{at}: a box opens with `{open}` alone on its line"
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
            name(page),
            close + 1
        );
        boxes += 1;
    }
    // What the reader sees: inside every box, code spans became <code> and no backtick is
    // left over.
    let html = render(text);
    for rendered in html.split(&div).skip(1) {
        let body = rendered.split("</div>").next().unwrap_or("");
        assert!(
            !body.contains('`'),
            "{}: a {title} box renders literal backticks:\n{body}",
            name(page)
        );
    }
    for b in text.split(&div).skip(1) {
        let b = b.split("</div>").next().unwrap_or("");
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
                    "{}: `{span}` in a {title} box does not render as code",
                    name(page)
                );
            }
        }
    }
    boxes
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

/// Chapter 10's "Gather a block's sums into lanes" and exercise 6: which rounds of pairwise
/// adds may pack their sums to 16 bits (`vpackssdw` is exact only inside ±32,767).
#[test]
fn chapter10_numbers() {
    let text = fs::read_to_string(book_src().join("10-performance.md")).expect("chapter 10");
    let fits = |v: i32| v <= i16::MAX as i32;
    let printed = |v: i32| {
        let s = v.to_string();
        let (head, tail) = s.split_at(s.len() - 3);
        format!("{head}{{,}}{tail}")
    };
    // Q4_K: a packed sum holds at most eight products of a 4-bit weight by an int8.
    let q4_eight = 8 * 15 * 127;
    // Q6_K: four products of a 6-bit weight fit, eight do not.
    let (q6_one, q6_four, q6_eight) = (63 * 127, 4 * 63 * 127, 8 * 63 * 127);
    assert!(fits(q4_eight) && fits(q6_four) && !fits(q6_eight));
    for v in [q4_eight, q6_one, q6_four, q6_eight] {
        assert!(
            text.contains(&printed(v)),
            "chapter 10 prints {}",
            printed(v)
        );
    }
    // A decode task's rows: as many Q8_0 rows as fill 512 KiB.
    use llm_anatomy::quant::GgmlType;
    let rows = |cols: u64| 512 * 1024 / GgmlType::Q8_0.row_bytes(cols).expect("whole blocks");
    assert!(
        text.contains("fill 512 KiB"),
        "chapter 10 states the task's bytes"
    );
    let (head, expert) = (rows(640), rows(2048));
    assert!(text.contains(&format!("which is {head} rows of Gemma 3's")));
    assert!(text.contains(&format!("and {expert} of a 2,048-column Q8_0 expert")));
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
