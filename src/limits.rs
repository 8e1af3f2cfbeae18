//! Limits, with their reasons, in one place.
//!
//! Every size this crate reads from a file or a flag is checked here before it sizes an
//! allocation or a loop: a `config.json` dimension against what any real model uses (with
//! a wide margin), an id list against the longest context a model has, a file against the
//! largest of its kind, an allocation against the memory this machine has free. A value
//! past its limit is an [`Exceeded`] (the library's [`Error::Limit`](crate::Error::Limit)),
//! naming the document, the field, the value, the limit and why the limit is there — never
//! a `vec!` of a terabyte, a wrapped product or a loop of 2⁴⁰ turns.
//!
//! The config limits are far above every published model (the largest in `data/configs`
//! and in the tests' fixtures is listed beside each), so no real checkpoint meets them; they
//! are what keeps the arithmetic of chapter 6 inside `u64` and the per-layer loops short.

/// An upper bound on one size, and why it is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub max: u64,
    pub reason: &'static str,
}

/// Layers (and layer indices, and the layer-count fields of MoE placement): the deepest
/// published models have a few hundred; the per-layer loops of chapters 6 and 9 run this
/// many turns.
pub const LAYERS: Limit = Limit {
    max: 1 << 14,
    reason: "no model has more than a few hundred layers; per-layer loops and tables are sized by it",
};

/// `hidden_size` and the low ranks of MLA: the widest models use 16 384 (DeepSeek-V3 7 168).
pub const WIDTH: Limit = Limit {
    max: 1 << 20,
    reason: "the widest models use 16384; tensor shapes and buffers are sized by it",
};

/// MLP widths: the widest dense MLPs have ~53 000 rows (Llama-3.1-405B).
pub const MLP_WIDTH: Limit = Limit {
    max: 1 << 22,
    reason: "the widest MLPs have about 53000 rows; tensor shapes and buffers are sized by it",
};

/// Heads, per-head dimensions, experts and their counts.
pub const HEADS: Limit = Limit {
    max: 1 << 16,
    reason: "models use at most a few hundred heads or experts and head dimensions of at most 512",
};

/// `vocab_size`: the same bound as the tokenizer's ids ([`crate::limits::TOKEN_ID`]).
pub const VOCAB: Limit = Limit {
    max: 1 << 24,
    reason: "vocabularies have at most a few hundred thousand tokens; the embedding and logits are sized by it",
};

/// Positions: a context length, a window, the original length of a RoPE scaling.
pub const POSITIONS: Limit = Limit {
    max: 1 << 32,
    reason: "contexts reach 10 million tokens at most; the KV cache and RoPE tables are sized by it",
};

/// A token id anywhere (config `eos_token_id`, an id list): ids are 32-bit.
pub const TOKEN_ID: Limit = Limit {
    max: u32::MAX as u64,
    reason: "token ids are 32-bit",
};

/// Any other integer: JSON readers represent integers exactly up to 2⁵³ (RFC 7493).
pub const JSON_INT: Limit = Limit {
    max: 1 << 53,
    reason: "JSON integers above 2^53 are not exact in most readers (RFC 7493)",
};

/// Entries of a list in a config (`mlp_only_layers`, `eos_token_id`, LongRoPE's factors
/// — one per rotary plane, so half the largest head dimension).
pub const LIST_LEN: Limit = Limit {
    max: 1 << 15,
    reason: "config lists hold layer indices, token ids or one factor per rotary plane",
};

/// Parameters of a model (`anatomy params`): its bytes in f32 and its FLOPs per token must
/// fit the report's 64-bit integers.
pub const PARAMETERS: Limit = Limit {
    max: u64::MAX / 8,
    reason: "the report's byte and FLOP counts are 64-bit; the largest models have about 2e12",
};

/// Ids in a command-line id list (`--ids 0-4294967295` would be 16 GB).
pub const IDS: Limit = Limit {
    max: 1 << 24,
    reason: "16777216 ids are longer than any model's context (64 MB of ids)",
};

/// Worker threads (`bench --threads`).
pub const THREADS: Limit = Limit {
    max: 1024,
    reason: "each thread has its own stack; more threads than cores only measure contention",
};

/// Repetitions of a measurement (`bench --reps`): each is a whole prefill and decode.
pub const REPS: Limit = Limit {
    max: 1000,
    reason: "each repetition is a whole prefill and decode; the medians settle within a few dozen",
};

/// Held-out batches per evaluation (`train --eval-batches`): each is a forward pass.
pub const EVAL_BATCHES: Limit = Limit {
    max: 10_000,
    reason: "each held-out batch is a forward pass, run at every evaluation; the loss settles within a few dozen",
};

/// Trials per placement (`lost-in-middle --trials`): each is a generation after a prompt
/// of up to 10000 tokens.
pub const TRIALS: Limit = Limit {
    max: 1000,
    reason: "each trial is a generation after a long prompt, three per vault; a few dozen per placement show the U-shape",
};

/// Candidates of the "please repeat" test (`glitch --repeat`): each is a generation.
pub const REPEAT_CANDIDATES: Limit = Limit {
    max: 10_000,
    reason: "each candidate is a 16-token generation; the text screens 10000 tokens",
};

/// The limit of a config.json / rope_scaling field, by name (the names mean the same in
/// every Hugging Face config class). Fields not listed get [`JSON_INT`].
pub fn field_limit(field: &str) -> Limit {
    match field {
        "num_hidden_layers"
        | "first_k_dense_replace"
        | "max_window_layers"
        | "num_nextn_predict_layers"
        | "decoder_sparse_step"
        | "moe_layer_freq"
        | "mlp_only_layers" => LAYERS,
        "hidden_size" | "kv_lora_rank" | "q_lora_rank" => WIDTH,
        "intermediate_size" | "moe_intermediate_size" | "shared_expert_intermediate_size" => {
            MLP_WIDTH
        }
        "num_attention_heads"
        | "num_key_value_heads"
        | "head_dim"
        | "qk_nope_head_dim"
        | "qk_rope_head_dim"
        | "v_head_dim"
        | "num_experts"
        | "num_local_experts"
        | "n_routed_experts"
        | "num_experts_per_tok"
        | "n_shared_experts"
        | "n_group"
        | "topk_group" => HEADS,
        "vocab_size" => VOCAB,
        "max_position_embeddings" | "original_max_position_embeddings" | "sliding_window" => {
            POSITIONS
        }
        "eos_token_id" | "bos_token_id" | "pad_token_id" => TOKEN_ID,
        _ => JSON_INT,
    }
}

/// A size past its limit: the document or command, the field or flag, the value, the limit
/// and the reason for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {field}: {value} is above the limit of {limit} ({reason})")]
pub struct Exceeded {
    pub what: String,
    pub field: String,
    pub value: String,
    pub limit: String,
    pub reason: String,
}

/// Checks `value ≤ limit.max`; `what` names the document or command, `field` the field or
/// flag as it should be printed (e.g. "field `hidden_size`", "--head-dim").
pub fn check(what: &str, field: &str, value: u128, limit: Limit) -> Result<(), Exceeded> {
    if value <= limit.max as u128 {
        Ok(())
    } else {
        Err(Exceeded {
            what: what.to_string(),
            field: field.to_string(),
            value: value.to_string(),
            limit: limit.max.to_string(),
            reason: limit.reason.to_string(),
        })
    }
}

// ------------------------------------------------------------------------- files

/// Bytes of a JSON document read whole: config.json, generation_config.json,
/// model.safetensors.index.json (DeepSeek-V3's index is 9 MB).
pub const JSON_FILE_BYTES: u64 = 64 << 20;

/// Bytes of any other file read whole: a vocabulary (Qwen's tokenizer.json is 11 MB, the
/// largest published ones about 35 MB), a `--messages` conversation.
/// (Parsed, a JSON document takes several times its size in memory: the limit keeps that
/// well under the 2 GB no input may cost.)
pub const TEXT_FILE_BYTES: u64 = 128 << 20;

/// The safetensors format's own limit on its JSON header (`MAX_HEADER_SIZE` of the
/// `safetensors` crate, which Python's loader uses).
pub const SAFETENSORS_HEADER_BYTES: u64 = 100_000_000;

// ------------------------------------------------------------------------ memory

/// `MemAvailable` from /proc/meminfo, where the system has it.
pub fn mem_available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// What an allocation may take when the free memory is unknown (not Linux): 256 GiB.
const UNKNOWN_MEMORY_BYTES: u64 = 256 << 30;

/// Checks that `bytes` (computed in `u128`, so it cannot wrap) fit in the memory this
/// machine has available, before anything that large is allocated. `what` says what needs
/// them and from which input (e.g. "a session of 70000 positions (KV cache, RoPE table)").
pub fn check_memory(what: &str, bytes: u128) -> Result<(), Exceeded> {
    let available = mem_available_bytes().unwrap_or(UNKNOWN_MEMORY_BYTES);
    if bytes <= available as u128 {
        return Ok(());
    }
    Err(Exceeded {
        what: what.to_string(),
        field: "memory".to_string(),
        value: format!("{bytes} bytes"),
        limit: format!("{available} bytes"),
        reason: "the memory this machine has available".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_field_value_limit_and_reason() {
        assert!(check("c.json", "field `head_dim`", 256, field_limit("head_dim")).is_ok());
        let e = check(
            "c.json",
            "field `head_dim`",
            1 << 40,
            field_limit("head_dim"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("c.json: field `head_dim`: 1099511627776 is above the limit of 65536"),
            "{e}"
        );
        assert!(e.contains("head dimensions"), "{e}");
        assert!(check_memory("a test", u128::MAX).is_err());
        assert!(check_memory("a test", 1).is_ok());
    }
}
