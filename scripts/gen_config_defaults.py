"""Each family's config-class defaults, from transformers itself, for the defaults table
`params::family::FAMILIES` (tests/suite/config_agreement.rs compares them).

For every model_type the table lists, the class is built from AutoConfig.for_model with
only hidden_size = 2560 and num_attention_heads = 256 given (so "every head" and a class
constant differ), once with num_key_value_heads absent and once with it null, and the
fields the readers default are recorded. A null the class refuses is recorded as null.
Run: target/peers/py/bin/python scripts/gen_config_defaults.py
Writes tests/fixtures/params/class_defaults.json.
"""
import json
import os

import transformers
from transformers import AutoConfig

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "params",
                   "class_defaults.json")
MODEL_TYPES = ["qwen2", "qwen3", "qwen3_moe", "llama", "mistral", "mixtral", "olmoe",
               "deepseek_v2", "deepseek_v3", "gemma3_text"]
GIVEN = {"hidden_size": 2560, "num_attention_heads": 256, "num_hidden_layers": 2}


def build(model_type, **extra):
    try:
        return AutoConfig.for_model(model_type, **GIVEN, **extra)
    except Exception:  # the class refuses the value (strict dataclass validation)
        return None


rows = {}
for t in MODEL_TYPES:
    absent = build(t)
    null = build(t, num_key_value_heads=None)
    rows[t] = {
        "kv_heads_absent": absent.num_key_value_heads,
        "kv_heads_null": None if null is None else null.num_key_value_heads,
        # None: the modelling code takes hidden_size // num_attention_heads.
        "head_dim": getattr(absent, "head_dim", None),
        "max_position_embeddings": absent.max_position_embeddings,
        "tie_word_embeddings": bool(absent.tie_word_embeddings),
    }
doc = {"transformers": transformers.__version__, "given": GIVEN, "families": rows}
with open(OUT, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(json.dumps(doc, indent=1))
