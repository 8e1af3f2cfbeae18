//! The one table between Hugging Face tensor names and the names llama.cpp gives the same
//! tensors in a GGUF file (chapter 9: the engine reads either).
//!
//! llama.cpp's converter renames every tensor (`model.layers.3.self_attn.q_proj.weight`
//! becomes `blk.3.attn_q.weight`) and stacks the experts of a layer into one 3-d tensor per
//! projection (`ffn_gate_exps`, `[E, I, H]` row-major; `ffn_down_exps`, `[E, H, I]`), so
//! Hugging Face's expert `e` is the `e`-th row block of the stacked tensor. [`TABLE`] holds
//! each pair once; [`to_gguf`] and [`to_hf`] read it in the two directions, so the loader
//! (Hugging Face role → GGUF tensor) and a writer (Hugging Face tensor → GGUF name) cannot
//! disagree. `{l}` stands for the layer index, `{e}` for the expert index.

/// Hugging Face name ↔ GGUF name. A row whose Hugging Face side has `{e}` maps every
/// expert onto one stacked GGUF tensor.
pub const TABLE: &[(&str, &str)] = &[
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
    (
        "model.layers.{l}.input_layernorm.weight",
        "blk.{l}.attn_norm.weight",
    ),
    (
        "model.layers.{l}.self_attn.q_proj.weight",
        "blk.{l}.attn_q.weight",
    ),
    (
        "model.layers.{l}.self_attn.k_proj.weight",
        "blk.{l}.attn_k.weight",
    ),
    (
        "model.layers.{l}.self_attn.v_proj.weight",
        "blk.{l}.attn_v.weight",
    ),
    (
        "model.layers.{l}.self_attn.o_proj.weight",
        "blk.{l}.attn_output.weight",
    ),
    (
        "model.layers.{l}.self_attn.q_proj.bias",
        "blk.{l}.attn_q.bias",
    ),
    (
        "model.layers.{l}.self_attn.k_proj.bias",
        "blk.{l}.attn_k.bias",
    ),
    (
        "model.layers.{l}.self_attn.v_proj.bias",
        "blk.{l}.attn_v.bias",
    ),
    (
        "model.layers.{l}.self_attn.o_proj.bias",
        "blk.{l}.attn_output.bias",
    ),
    (
        "model.layers.{l}.self_attn.q_norm.weight",
        "blk.{l}.attn_q_norm.weight",
    ),
    (
        "model.layers.{l}.self_attn.k_norm.weight",
        "blk.{l}.attn_k_norm.weight",
    ),
    (
        "model.layers.{l}.post_attention_layernorm.weight",
        "blk.{l}.ffn_norm.weight",
    ),
    (
        "model.layers.{l}.mlp.gate.weight",
        "blk.{l}.ffn_gate_inp.weight",
    ),
    (
        "model.layers.{l}.mlp.experts.{e}.gate_proj.weight",
        "blk.{l}.ffn_gate_exps.weight",
    ),
    (
        "model.layers.{l}.mlp.experts.{e}.up_proj.weight",
        "blk.{l}.ffn_up_exps.weight",
    ),
    (
        "model.layers.{l}.mlp.experts.{e}.down_proj.weight",
        "blk.{l}.ffn_down_exps.weight",
    ),
    (
        "model.layers.{l}.mlp.gate_proj.weight",
        "blk.{l}.ffn_gate.weight",
    ),
    (
        "model.layers.{l}.mlp.up_proj.weight",
        "blk.{l}.ffn_up.weight",
    ),
    (
        "model.layers.{l}.mlp.down_proj.weight",
        "blk.{l}.ffn_down.weight",
    ),
    // Gemma 3's sandwich norms. Its Hugging Face `post_attention_layernorm` is the norm
    // on the attention output, which llama.cpp names `post_attention_norm`; the loader
    // asks for it by that name (the row above maps the Hugging Face name to the pre-FFN
    // norm every other family means by it).
    (
        "model.layers.{l}.post_attention_norm.weight",
        "blk.{l}.post_attention_norm.weight",
    ),
    (
        "model.layers.{l}.post_feedforward_layernorm.weight",
        "blk.{l}.post_ffw_norm.weight",
    ),
];

/// Where a Hugging Face tensor lives in a GGUF file: a tensor name and, for an expert's
/// projection, which row block of the stacked tensor (its outermost index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufName {
    pub name: String,
    pub expert: Option<usize>,
}

/// The GGUF name of a Hugging Face tensor name, or `None` if the table has no such role.
pub fn to_gguf(hf: &str) -> Option<GgufName> {
    TABLE.iter().find_map(|(hf_pattern, gguf_pattern)| {
        let (layer, expert) = match_pattern(hf_pattern, hf)?;
        Some(GgufName {
            name: fill(gguf_pattern, layer, None),
            expert,
        })
    })
}

/// The Hugging Face name of GGUF tensor `gguf` (of its row block `expert` when the tensor
/// stacks experts). `None` if the name is not in the table, or if `expert` is given for a
/// tensor that does not stack experts or missing for one that does.
pub fn to_hf(gguf: &str, expert: Option<usize>) -> Option<String> {
    TABLE.iter().find_map(|(hf_pattern, gguf_pattern)| {
        let (layer, _) = match_pattern(gguf_pattern, gguf)?;
        (hf_pattern.contains("{e}") == expert.is_some()).then(|| fill(hf_pattern, layer, expert))
    })
}

/// Whether GGUF tensor `gguf` stacks the experts of a layer (its Hugging Face side has
/// one tensor per expert).
pub fn stacks_experts(gguf: &str) -> bool {
    TABLE
        .iter()
        .any(|(hf, g)| hf.contains("{e}") && match_pattern(g, gguf).is_some())
}

/// Replaces `{l}` and `{e}` in `pattern` by the indices.
fn fill(pattern: &str, layer: Option<usize>, expert: Option<usize>) -> String {
    let mut out = pattern.to_string();
    if let Some(l) = layer {
        out = out.replace("{l}", &l.to_string());
    }
    if let Some(e) = expert {
        out = out.replace("{e}", &e.to_string());
    }
    out
}

/// Matches `name` against `pattern`, returning the layer and expert indices the
/// placeholders stand for. An index is a run of ASCII digits without a leading zero (so
/// that every name has one spelling and the two directions are inverses).
fn match_pattern(pattern: &str, name: &str) -> Option<(Option<usize>, Option<usize>)> {
    let (mut layer, mut expert) = (None, None);
    let mut rest = name;
    let mut pat = pattern;
    loop {
        let Some(open) = pat.find('{') else {
            return (rest == pat).then_some((layer, expert));
        };
        rest = rest.strip_prefix(&pat[..open])?;
        let slot = if pat[open..].starts_with("{l}") {
            &mut layer
        } else {
            &mut expert
        };
        pat = &pat[open + 3..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || (digits > 1 && rest.starts_with('0')) {
            return None;
        }
        *slot = Some(rest[..digits].parse().ok()?);
        rest = &rest[digits..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every Hugging Face tensor of a model with `layers` layers, MoE where `moe(l)`, with
    /// `experts` experts, q/k norms, biases and an untied head.
    fn hf_names(layers: usize, moe: impl Fn(usize) -> bool, experts: usize) -> Vec<String> {
        let mut names = vec![
            "model.embed_tokens.weight".to_string(),
            "model.norm.weight".to_string(),
            "lm_head.weight".to_string(),
        ];
        for l in 0..layers {
            let p = format!("model.layers.{l}");
            for t in [
                "input_layernorm.weight",
                "post_attention_layernorm.weight",
                "self_attn.q_proj.weight",
                "self_attn.k_proj.weight",
                "self_attn.v_proj.weight",
                "self_attn.o_proj.weight",
                "self_attn.q_proj.bias",
                "self_attn.k_proj.bias",
                "self_attn.v_proj.bias",
                "self_attn.o_proj.bias",
                "self_attn.q_norm.weight",
                "self_attn.k_norm.weight",
            ] {
                names.push(format!("{p}.{t}"));
            }
            if moe(l) {
                names.push(format!("{p}.mlp.gate.weight"));
                for e in 0..experts {
                    for w in ["gate_proj", "up_proj", "down_proj"] {
                        names.push(format!("{p}.mlp.experts.{e}.{w}.weight"));
                    }
                }
            } else {
                for w in ["gate_proj", "up_proj", "down_proj"] {
                    names.push(format!("{p}.mlp.{w}.weight"));
                }
            }
        }
        names
    }

    #[test]
    fn every_name_round_trips() {
        // qwen3moe with mixed dense / MoE layers (12 layers so two-digit indices occur),
        // qwen3 dense, qwen2 dense (biases): all names are subsets of this one list.
        let names = hf_names(12, |l| l % 3 != 1, 11);
        let mut gguf_tensors = std::collections::BTreeSet::new();
        for hf in &names {
            let g = to_gguf(hf).unwrap_or_else(|| panic!("{hf} has no GGUF name"));
            assert_eq!(
                to_hf(&g.name, g.expert).as_deref(),
                Some(hf.as_str()),
                "{g:?}"
            );
            assert_eq!(stacks_experts(&g.name), g.expert.is_some(), "{hf}");
            gguf_tensors.insert(g.name);
        }
        // 3 global; per layer 12 attention tensors and norms; 8 MoE layers with a router and
        // 3 stacked tensors; 4 dense layers with 3 projections.
        assert_eq!(gguf_tensors.len(), 3 + 12 * 12 + 8 * 4 + 4 * 3);
        let g = to_gguf("model.layers.10.mlp.experts.7.down_proj.weight").unwrap();
        assert_eq!(
            g,
            GgufName {
                name: "blk.10.ffn_down_exps.weight".into(),
                expert: Some(7)
            }
        );
        assert_eq!(
            to_gguf("model.layers.3.self_attn.q_proj.weight")
                .unwrap()
                .name,
            "blk.3.attn_q.weight"
        );
    }

    #[test]
    fn unknown_or_malformed_names_are_refused() {
        for hf in [
            "model.layers.x.self_attn.q_proj.weight",
            "model.layers.01.self_attn.q_proj.weight",
            "model.layers.1.self_attn.q_proj.weight.extra",
            "model.layers..mlp.gate.weight",
            "model.rotary_emb.inv_freq",
        ] {
            assert_eq!(to_gguf(hf), None, "{hf}");
        }
        assert_eq!(to_hf("blk.1.ffn_gate_exps.weight", None), None);
        assert_eq!(to_hf("blk.1.ffn_gate.weight", Some(0)), None);
        assert_eq!(to_hf("blk.1.attn_qkv.weight", None), None);
    }
}
