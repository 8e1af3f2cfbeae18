//! Claims of chapter 4: the tokenizer, special tokens and glitch tokens (S0 5.3).

use super::{Entry, Outcome, Status, outcome};
use crate::tokenizer::glitch::{synthetic_dir, synthetic_never_seen};
use crate::tokenizer::{Tokenizer, glitch, special};
use std::sync::OnceLock;

/// The shipped Qwen vocabulary, loaded once for all claims.
fn qwen() -> Result<&'static Tokenizer, String> {
    static T: OnceLock<Result<Tokenizer, String>> = OnceLock::new();
    T.get_or_init(|| Tokenizer::qwen().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

fn failed(what: &str, e: impl std::fmt::Display) -> Outcome {
    Outcome {
        value: None,
        computed: format!("{what} failed: {e}"),
        status: Status::Erratum,
        note: "The computation itself failed; see the message.".into(),
    }
}

fn tok_glitch_ids() -> Outcome {
    let t = match qwen() {
        Ok(t) => t,
        Err(e) => return failed("loading data/qwen.tiktoken", e),
    };
    let checks = glitch::check_glitch_ids(t);
    let ok = checks.iter().filter(|c| c.ok).count();
    let shown: Vec<String> = checks
        .iter()
        .map(|c| format!("{} = {}", c.id, c.actual.as_deref().unwrap_or("<none>")))
        .collect();
    outcome(
        ok as f64,
        format!("{ok} of 6 match: {}", shown.join(", ")),
        ok == checks.len(),
        "Each id decodes to the stated four characters in the shipped vocabulary (dashscope 1.20.0's qwen.tiktoken, shared by Qwen, Qwen2, Qwen2.5 and Qwen3).",
    )
}

fn tok_literal_scan() -> Outcome {
    let t = match qwen() {
        Ok(t) => t,
        Err(e) => return failed("loading data/qwen.tiktoken", e),
    };
    let hits = glitch::literal_scan(t, glitch::LITERAL_MIN_CHARS);
    let count = |k| hits.iter().filter(|h| h.kind == k).count();
    let bytes_count = t
        .vocab
        .iter()
        .filter(|(_, b)| b.len() > 20 && !b.windows(2).any(|w| w == b"<|"))
        .count();
    outcome(
        hits.len() as f64,
        format!(
            "{} tokens: {} whitespace runs, {} one-character runs, {} rulers, {} words/identifiers (counting bytes instead of characters would give {bytes_count})",
            hits.len(),
            count(glitch::LiteralKind::Whitespace),
            count(glitch::LiteralKind::Repeated),
            count(glitch::LiteralKind::Ruler),
            count(glitch::LiteralKind::Word),
        ),
        hits.len() == 410,
        "Characters of the decoded string (U+FFFD for partial UTF-8), as Python's len(tokenizer.decode([id])) counts them; none of the 410 is Chinese — the long tokens are code rulers, indentation and identifiers.",
    )
}

const NORM_SCAN_CMD: &str = "cargo run --release -- glitch --vocab data/qwen.tiktoken --model DIR_OF_Qwen2.5-7B-Instruct --top-k 10000 --json | jq '.checkpoint.norms.cjk | length'";

fn tok_norm_scan() -> Outcome {
    let demo = synthetic_never_seen()
        .and_then(|planted| {
            let tok = Tokenizer::from_file(&synthetic_dir().join("tokenizer.json"))?;
            glitch::screen_checkpoint(&synthetic_dir(), &tok, planted.len(), None)
        })
        .map(|s| {
            format!(
                "on the synthetic checkpoint the same screen keeps the {} smallest rows and finds {} multi-character Chinese tokens among them",
                s.norms.smallest.len(),
                s.norms.cjk.len()
            )
        })
        .unwrap_or_else(|e| format!("synthetic demo failed: {e}"));
    Outcome {
        value: None,
        computed: format!("screen implemented (tokenizer::glitch::norm_screen); {demo}"),
        status: Status::NeedsData,
        note: format!(
            "Needs Qwen2.5-7B-Instruct's weights (15 GB, not shipped). Reproduce with: {NORM_SCAN_CMD}"
        ),
    }
}

fn tok_glitch_norms() -> Outcome {
    Outcome {
        value: None,
        computed: "norms of the six ids need model.embed_tokens.weight".into(),
        status: Status::NeedsData,
        note: "Needs Qwen2.5-7B-Instruct's weights. Reproduce with: cargo run --release -- glitch --vocab data/qwen.tiktoken --model DIR --top-k 152064 --json | jq '.checkpoint.norms.smallest[] | select(.id == 117332 or .id == 115984 or .id == 115992 or .id == 118326 or .id == 109540 or .id == 114068)'".into(),
    }
}

fn tok_vocab_sizes() -> Outcome {
    let t = match qwen() {
        Ok(t) => t,
        Err(e) => return failed("loading data/qwen.tiktoken", e),
    };
    let ranks = t.vocab.n_tokens();
    // Qwen2.5's added tokens are Qwen3's list up to <|file_sep|>; Qwen3 appended the
    // tool-response and think tokens after it.
    let added = special::QWEN3_ADDED_TOKENS
        .iter()
        .position(|(c, _, _)| *c == "<|file_sep|>")
        .map_or(0, |p| p + 1);
    let ids = ranks + added;
    // The text's sizes, compared with the published configs.
    let stated = [
        ("qwen2.5-7b-instruct", 152_064u64, 3_584u64),
        ("gpt-oss-20b", 201_088, 2_880),
    ];
    let mut rows_read = Vec::new();
    let mut agree = true;
    for (name, rows, hidden) in stated {
        let what = format!("data/configs/{name}.json");
        let read = crate::params::published_json(name).and_then(|v| {
            let f = crate::json::Fields::new(&what, &v);
            Ok((f.req_u64("vocab_size")?, f.req_u64("hidden_size")?))
        });
        let (v, h) = match read {
            Ok(x) => x,
            Err(e) => return failed("reading a published config", e),
        };
        agree &= (v, h) == (rows, hidden);
        rows_read.push(format!(
            "{name}: vocab_size {v} × hidden_size {h} = {:.1} M embedding weights",
            (v * h) as f64 / 1e6
        ));
    }
    let qwen_rows = stated[0].1;
    // Qwen3's bundled config holds the same vocabulary in a smaller padded table.
    let q3_rows = crate::params::bundled("qwen3-30b-a3b").map_or(0, |c| c.vocab_size);
    Outcome {
        value: Some(qwen_rows as f64 - ids as f64),
        computed: format!(
            "{}; the shipped Qwen vocabulary ({ranks} BPE ranks + {added} added up to <|file_sep|> = {ids} ids) fits Qwen2.5's {qwen_rows} rows with {} to spare, and Qwen3's bundled config holds it in {q3_rows} rows ({} to spare)",
            rows_read.join("; "),
            qwen_rows as i64 - ids as i64,
            q3_rows as i64 - ids as i64
        ),
        status: if agree && ids as u64 <= qwen_rows {
            Status::Reproduced
        } else {
            Status::Erratum
        },
        note: "Read from the published config.json files of Qwen2.5-7B-Instruct and gpt-oss-20b (data/configs/). The embedding table has more rows than the tokenizer has ids: the spare rows pad the matrix to a multiple that suits the hardware, and no token ever selects them.".into(),
    }
}

fn tok_special() -> Outcome {
    let t = match qwen() {
        Ok(t) => t,
        Err(e) => return failed("loading data/qwen.tiktoken", e),
    };
    let mut single = 0usize;
    for (content, id, _) in special::QWEN3_ADDED_TOKENS {
        let in_text = format!("x{content}y");
        let ids = t.encode(&in_text).unwrap_or_default();
        if ids.iter().filter(|&&i| i == *id).count() == 1
            && t.decode(&ids).ok().as_deref() == Some(in_text.as_str())
        {
            single += 1;
        }
    }
    let near = ["<|im_start|", "<|IM_START|>", "<think >", "</think"];
    let split_near = near
        .iter()
        .filter(|s| {
            t.encode(s)
                .is_ok_and(|ids| ids.len() > 1 && ids.iter().all(|&i| i < 151_643))
        })
        .count();
    let prompt = "<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    let ids = t.encode(prompt).unwrap_or_default();
    outcome(
        single as f64,
        format!(
            "{single} of {} added tokens map to one id inside text; {split_near} of {} near-misses stay ordinary text; ChatML prompt → {ids:?}",
            special::QWEN3_ADDED_TOKENS.len(),
            near.len()
        ),
        single == special::QWEN3_ADDED_TOKENS.len() && split_near == near.len(),
        "<|im_start|> 151644, <|im_end|> 151645, <think> 151667, </think> 151668 are matched before BPE and never split; a near-miss such as \"<|im_start|\" is BPE'd like any text.",
    )
}

fn tok_untrained_norm() -> Outcome {
    let run = || -> crate::Result<(usize, usize, usize, usize)> {
        let dir = synthetic_dir();
        let tok = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
        let planted = synthetic_never_seen()?;
        let s = glitch::screen_checkpoint(&dir, &tok, planted.len(), None)?;
        let set: std::collections::HashSet<u32> = planted.iter().copied().collect();
        let by_norm = s
            .norms
            .smallest
            .iter()
            .filter(|r| set.contains(&r.id))
            .count();
        let by_ind = s
            .indicator
            .as_ref()
            .map_or(0, |v| v.iter().filter(|r| set.contains(&r.id)).count());
        Ok((planted.len(), by_norm, by_ind, s.norms.cjk.len()))
    };
    match run() {
        Ok((n, by_norm, by_ind, cjk)) => outcome(
            by_norm as f64,
            format!(
                "synthetic checkpoint: {n} rows never seen in training; the {n} smallest norms are exactly {by_norm} of them, the unembedding indicator's {n} closest {by_ind}; {cjk} are multi-character Chinese tokens"
            ),
            by_norm == n && by_ind == n,
            "This checks the screen, not the mechanism: the synthetic checkpoint (scripts/gen_synthetic_glitch.py) was trained with plain Adam and no weight decay, so its never-seen rows keep their initial norm by construction, and the norm screen and the unembedding indicator find exactly them. Whether real training leaves such rows with the smallest norms is train.glitch_decay, which a later trainer issue measures on a real run.",
        ),
        Err(e) => failed("screening data/synthetic-glitch", e),
    }
}

fn tok_init_norm() -> Outcome {
    // Rows drawn as Qwen2.5-7B's config says embeddings are initialised: N(0, 0.02²) in
    // 3,584 dimensions (initializer_range 0.02, hidden_size 3584).
    let (sigma, d, n) = (0.02f32, 3584usize, 200u64);
    let norms: Vec<f32> = (0..n)
        .map(|seed| {
            let x = super::seeded_vec(d, 1000 + seed);
            sigma * crate::kernels::dot(&x, &x).sqrt()
        })
        .collect();
    let mean = norms.iter().sum::<f32>() / n as f32;
    let min = norms.iter().copied().fold(f32::INFINITY, f32::min);
    let largest_glitch = glitch::GLITCH_TABLE
        .iter()
        .map(|r| r.2)
        .fold(0.0f32, f32::max);
    outcome(
        mean as f64,
        format!(
            "a row left at N(0, 0.02²) in 3,584 dims has norm {mean:.3} (smallest of {n} seeded rows {min:.3}); the table's glitch norms are 0.0150–{largest_glitch:.4}, {:.0}–{:.0}× smaller",
            mean / largest_glitch,
            mean / 0.0150
        ),
        min < largest_glitch,
        "The glitch rows cannot be at their random initialisation: a freshly initialised row (initializer_range 0.02) has norm ≈ 1.2. Rows that get no gradient end up this small because something shrinks them — with decoupled weight decay (AdamW) every step multiplies such a row by (1 − lr·λ). Staying at the initialisation holds only without weight decay, as in the synthetic checkpoint.",
    )
}

/// S0 5.3.2: a glitch row is "接近零向量", so its K is "方向近乎随机". Before attention the
/// row goes through RMSNorm (Qwen2.5-7B: ε = 1e-6, d = 3,584; γ = 1 as initialised — the
/// trained γ does not ship): what comes out for the table's norms vs a typical row.
fn tok_glitch_rmsnorm() -> Outcome {
    let (d, eps) = (3584usize, 1e-6f32);
    let gamma = vec![1.0f32; d];
    let dir = {
        let v = super::seeded_vec(d, 77);
        let n = crate::kernels::dot(&v, &v).sqrt();
        v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
    };
    // RMS of the normalised row and its cosine with the input direction.
    let through = |norm: f32| -> (f32, f32) {
        let x: Vec<f32> = dir.iter().map(|v| v * norm).collect();
        let mut y = vec![0.0f32; d];
        crate::kernels::rmsnorm(&x, &gamma, eps, &mut y);
        let ny = crate::kernels::dot(&y, &y).sqrt();
        (ny / (d as f32).sqrt(), crate::kernels::dot(&y, &dir) / ny)
    };
    // A typical row: a freshly initialised one, N(0, 0.02²) per entry (tok.init_norm).
    let typical_norm = 0.02 * (d as f32).sqrt();
    let (typical, _) = through(typical_norm);
    let (smallest, cos) = through(0.0150);
    let per_row: Vec<String> = glitch::GLITCH_TABLE
        .iter()
        .map(|r| format!("{:.4} → {:.2}", r.2, through(r.2).0 / typical))
        .collect();
    let ratio = smallest / typical;
    outcome(
        ratio as f64,
        format!(
            "RMSNorm output RMS relative to a typical row (norm {typical_norm:.3} → RMS {typical:.4}): {}; direction kept (cos {cos:.6})",
            per_row.join(", ")
        ),
        ratio < 0.1,
        "Not near zero: a row of norm 0.015 has mean square 6.3e-8, far under ε = 1e-6, so RMSNorm divides by ≈ √ε instead of the row's own RMS and scales it up to about a quarter of a typical row; the larger table rows come out near full size. RMSNorm never changes a direction, so K = W_k·norm(x) points where the embedding row points — small, not random (the row itself is not at its random initialisation either: tok.init_norm).",
    )
}

use super::real::SINK_FACTOR;

/// The trained model's attention on the first position of held-out windows, computed by
/// the training forward and compared with transformers' eager attention on the same ids.
fn tok_bos_sink() -> Outcome {
    use crate::train::inspect::first_position_share;
    let dir = crate::qwen3::trained::trained_dir();
    let measured = || -> crate::Result<(Vec<f64>, f64, f64)> {
        let p = crate::train::params::Params::load(&dir)?;
        let path = dir.join("attention_sink.json");
        let what = path.display().to_string();
        let doc = crate::error::read_json(&path)?;
        let windows: Option<Vec<Vec<u32>>> = doc["windows"].as_array().and_then(|ws| {
            ws.iter()
                .map(|w| {
                    w.as_array()?
                        .iter()
                        .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                        .collect()
                })
                .collect()
        });
        let windows =
            windows.ok_or_else(|| crate::Error::field(&what, "windows", "not lists of ids"))?;
        let ours = first_position_share(&p, &windows)?;
        let theirs = &doc["first_position_share"];
        let mut diff = 0.0f64;
        for (l, heads) in ours.per_head.iter().enumerate() {
            for (h, x) in heads.iter().enumerate() {
                let t = theirs[l][h].as_f64().ok_or_else(|| {
                    crate::Error::field(&what, "first_position_share", "missing a layer or head")
                })?;
                diff = diff.max((x - t).abs());
            }
        }
        Ok((ours.per_layer(), ours.uniform, diff))
    };
    let (layers, uniform, diff) = match measured() {
        Ok(m) => m,
        Err(e) => return super::trained_model_missing(&e),
    };
    let (best, share) = layers
        .iter()
        .copied()
        .enumerate()
        .fold((0, 0.0), |b, (l, x)| if x > b.1 { (l, x) } else { b });
    let ratio = share / uniform;
    let per_layer: Vec<String> = layers
        .iter()
        .enumerate()
        .map(|(l, x)| format!("layer {l} {:.1}%", 100.0 * x))
        .collect();
    // The difference from transformers moves in its second digit with the CPU's matmul
    // tiles (AVX2 or AVX-512 summation order), so the table states the decade it is under.
    let decade = 10f64.powf(diff.max(1e-300).log10().ceil());
    let computed = format!(
        "mean attention on position 0 over queries 1..127 of 8 held-out windows: {}; equal attention would give {:.1}%; transformers' eager attention agrees within {decade:.0e}",
        per_layer.join(", "),
        100.0 * uniform
    );
    let note = if ratio >= SINK_FACTOR {
        format!(
            "Reproduced on the model trained here: layer {best}'s heads put {:.0}% of their attention on the window's first token, {ratio:.1}× the equal share (a sink: ≥ {SINK_FACTOR}×). Qwen's tokenizer adds no <bos>, so the sink forms on whatever token comes first.",
            100.0 * share
        )
    } else {
        format!(
            "Not seen on the model trained here: no layer puts more than {ratio:.1}× the equal share on the first token (a sink would be ≥ {SINK_FACTOR}×; the largest is layer {best}, {:.1}%). A 4-layer model of hidden size 32 trained for one pass over a 1M-token corpus has not formed one.",
            100.0 * share
        )
    };
    let bundled = super::at_small_scale(
        ratio,
        computed,
        ratio >= SINK_FACTOR,
        note,
        "attention sinks are reported for trained models of hundreds of millions of parameters and more (StreamingLLM); the first-position share of a real trained model such as SmolLM2-135M would settle it.",
    );
    rejudge_on_real_models(bundled)
}

/// `tok.bos_sink` with the real models' sink (`real.sink`) beside the bundled model's:
/// a sink on every real model reproduces the claim whatever the small model shows.
fn rejudge_on_real_models(bundled: Outcome) -> Outcome {
    let Ok(sinks) = super::real::real_sinks() else {
        return bundled;
    };
    let shown = sinks.iter().all(|s| s.ratio() >= SINK_FACTOR);
    let real: Vec<String> = sinks.iter().map(|s| s.describe()).collect();
    Outcome {
        status: if shown {
            Status::Reproduced
        } else {
            bundled.status
        },
        computed: format!(
            "{}; real models (real.sink): {}",
            bundled.computed,
            real.join("; ")
        ),
        note: format!(
            "{} On real trained models (real.sink) the sink is {}.",
            bundled.note,
            if shown {
                "there on every one"
            } else {
                "not there on every one"
            }
        ),
        ..bundled
    }
}

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "tok.glitch_ids",
        section: "S0 5.3.2",
        statement: "Qwen vocabulary: 117332 = 法战组合, 115984 = 魔龙令牌, 115992 = 鸟成长记, 118326 = 凡本网注, 109540 = 早餐加盟, 114068 = 搜狐首页",
        stated: "these ids",
        compute: tok_glitch_ids,
    },
    Entry {
        id: "tok.literal_scan",
        section: "S0 5.3.3",
        statement: "tokens whose decoded string is longer than 20 characters and does not contain \"<|\": count over the Qwen vocabulary",
        stated: "410",
        compute: tok_literal_scan,
    },
    Entry {
        id: "tok.norm_scan",
        section: "S0 5.3.3",
        statement: "multi-character Chinese tokens among the 10,000 smallest-L2-norm embeddings of Qwen2.5-7B-Instruct (vocab 152,064, hidden 3,584)",
        stated: "137",
        compute: tok_norm_scan,
    },
    Entry {
        id: "tok.glitch_norms",
        section: "S0 5.3.2",
        statement: "L2 norms in the glitch table (0.0150 … 0.1211)",
        stated: "0.0150, 0.0213, 0.0263, 0.0295, 0.0899, 0.1211",
        compute: tok_glitch_norms,
    },
    Entry {
        id: "tok.vocab_sizes",
        section: "S0 5.3.2, 5.3.4",
        statement: "Qwen2.5-7B vocab 152,064 × 3,584; GPT-OSS-20B vocab 201,088 × 2,880",
        stated: "facts",
        compute: tok_vocab_sizes,
    },
    Entry {
        id: "tok.special",
        section: "S0 5.3.1",
        statement: "ChatML special tokens <|im_start|>, <|im_end|>, <think>, </think> map to single ids, never split by BPE",
        stated: "exact",
        compute: tok_special,
    },
    Entry {
        id: "tok.untrained_norm",
        section: "S0 5.3.2",
        statement: "rows that never receive a gradient end with the smallest norms, so the norm screen finds them (controlled run: checks the screen, not the mechanism)",
        stated: "mechanism",
        compute: tok_untrained_norm,
    },
    Entry {
        id: "tok.init_norm",
        section: "S0 5.3.2",
        statement: "the glitch token's embedding stays in its random initial state, with an extremely small norm",
        stated: "norm at initialisation ≈ 0.015–0.12",
        compute: tok_init_norm,
    },
    Entry {
        id: "tok.glitch_rmsnorm",
        section: "S0 5.3.2",
        statement: "a glitch embedding is \"接近零向量\" so its K is \"方向近乎随机\": what the pre-attention RMSNorm (ε = 1e-6, d = 3584) makes of a row of norm 0.015 vs a typical row",
        stated: "near-zero K",
        compute: tok_glitch_rmsnorm,
    },
    Entry {
        id: "tok.bos_sink",
        section: "S0 5.3.1",
        statement: "<bos> acts as an attention sink: the share of attention mass on the first position, per layer, in a trained model",
        stated: "qualitative → numbers",
        compute: tok_bos_sink,
    },
];
