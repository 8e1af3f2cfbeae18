#!/usr/bin/env python3
"""transformers' logits in bf16 compute for the bf16_sharded fixture (issue 15, item 2).

The fixture's expected.safetensors holds transformers' logits with the bf16 weights
widened to f32 (dtype=torch.float32). This adds what transformers computes when the
model runs in bfloat16 end to end (dtype=torch.bfloat16: every activation rounded to
bf16), so tests/bf16_compute.rs can say how far our native bf16 kernels are from each.

Run:  PEERS/py/bin/python scripts/gen_bf16_compute_fixture.py
      (torch and transformers at the versions of tests/fixtures/qwen3/versions.json)
Writes tests/fixtures/qwen3/bf16_sharded/expected_bf16_compute.safetensors (logits,
[prompt, vocab], f32) for the prompt of that directory's expected.json.
"""
import json
import pathlib

import torch
from safetensors.torch import save_file
from transformers import Qwen3MoeForCausalLM

root = pathlib.Path(__file__).resolve().parent.parent
case = root / "tests/fixtures/qwen3/bf16_sharded"
prompt = json.loads((case / "expected.json").read_text())["prompt"]
model = Qwen3MoeForCausalLM.from_pretrained(case, dtype=torch.bfloat16, attn_implementation="eager",
                                            experts_implementation="eager")
model.eval()
with torch.no_grad():
    logits = model(torch.tensor([prompt])).logits[0].float().contiguous()
save_file({"logits": logits}, str(case / "expected_bf16_compute.safetensors"),
          metadata={"torch": torch.__version__, "dtype": "bfloat16", "attn": "eager", "experts": "eager"})
print(f"logits {tuple(logits.shape)} -> {case / 'expected_bf16_compute.safetensors'}")
