#!/usr/bin/env python
"""Fixtures for src/chat/jinja.rs: each real GGUF's own `tokenizer.chat_template`
rendered by jinja2 as transformers renders it.

Run:   target/peers/py/bin/python scripts/gen_real_chat_fixtures.py
Needs: jinja2, transformers and gguf in target/peers/py, and the files that
scripts/get-real-models.sh puts in target/real-models/. Writes data/real/chat-<model>.json
for every file that carries a template (Gemma 3 270M is a base model and has none).

Every case is rendered twice and the two must agree:
  1. plain jinja2 with the environment transformers builds in
     transformers/utils/chat_template_utils.py: ImmutableSandboxedEnvironment(
     trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]), its `tojson`
     filter (json.dumps, ensure_ascii=False) and `raise_exception` global;
  2. transformers' own render_jinja_template (what apply_chat_template calls).
bos_token and eos_token are the text of the file's tokenizer.ggml.bos/eos_token_id.

It also stores llama.cpp's greedy answer (llama-cpp-python 0.3.36 in target/peers/llama,
weight repacking off as in scripts/gen_real_model_logits.py) to one short chat prompt,
rendered in the file's template: the prompt's ids and the continuation up to and including
the end token.
"""

import json
import os
import subprocess

import gguf
import jinja2
import transformers
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from transformers.utils.chat_template_utils import render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
MODELS = {"smollm2": "smollm2-135m-instruct-q4_1.gguf", "gemma3": "gemma3-270m-q4_k_m.gguf"}

CASES = [
    ("user_only", [{"role": "user", "content": "What is the capital of France?"}], True),
    ("user_only_no_prompt", [{"role": "user", "content": "Hi"}], False),
    ("system_user", [{"role": "system", "content": "You answer in one word."},
                     {"role": "user", "content": "Colour of the sky?"}], True),
    ("multi_turn", [{"role": "user", "content": "2+2?"},
                    {"role": "assistant", "content": "4"},
                    {"role": "user", "content": "And times 3?"}], True),
    ("system_multi_turn_closed", [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Name a fruit."},
                                  {"role": "assistant", "content": "Apple."}], False),
    ("unicode_and_newlines", [{"role": "user", "content": "把这句话翻译成英文：\n  你好，世界 🌍"}], True),
    ("empty_content", [{"role": "user", "content": ""}], True),
]


GREEDY_QUESTION = "What is 2 + 2?"
GREEDY_MAX = 48
LLAMA_PYTHON = os.path.join(ROOT, "target", "peers", "llama", "bin", "python")
LLAMA_CHILD = r"""
import json, sys
import numpy as np
import llama_cpp
import llama_cpp.llama_cpp as C
# Weight repacking crashes in this sandbox; the plain CPU kernels are used instead.
_default = C.llama_model_default_params
def no_repack():
    p = _default()
    p.use_extra_bufts = False
    return p
C.llama_model_default_params = no_repack
path, text, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
llm = llama_cpp.Llama(model_path=path, n_ctx=512, logits_all=True, n_threads=2, verbose=False)
ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
llm.eval(ids)
eos = llm.token_eos()
cont = []
for _ in range(limit):
    nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    cont.append(nxt)
    if nxt == eos:
        break
    llm.eval([nxt])
print(json.dumps({"version": llama_cpp.__version__, "ids": ids, "greedy": cont}))
"""


def llama_greedy(path, text):
    out = subprocess.run([LLAMA_PYTHON, "-c", LLAMA_CHILD, path, text, str(GREEDY_MAX)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    return bytes(v).decode("utf-8") if f.types[0] == gguf.GGUFValueType.STRING else int(v[0])


def jinja_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    for name, file in MODELS.items():
        path = os.path.join(ROOT, "target", "real-models", file)
        reader = gguf.GGUFReader(path)
        template = field(reader, "tokenizer.chat_template")
        if template is None:
            print(f"{file}: no tokenizer.chat_template, no fixture")
            continue
        tokens = reader.fields["tokenizer.ggml.tokens"]
        text = lambda i: bytes(tokens.parts[tokens.data[i]]).decode("utf-8")
        bos = text(field(reader, "tokenizer.ggml.bos_token_id"))
        eos = text(field(reader, "tokenizer.ggml.eos_token_id"))
        compiled = jinja_env().from_string(template)
        cases = []
        for case, messages, add_gen in CASES:
            plain = compiled.render(messages=messages, bos_token=bos, eos_token=eos,
                                    add_generation_prompt=add_gen)
            rendered, _ = render_jinja_template([messages], chat_template=template,
                                                add_generation_prompt=add_gen,
                                                bos_token=bos, eos_token=eos)
            assert rendered[0] == plain, (case, rendered[0], plain)
            cases.append({"name": case, "messages": messages, "add_generation_prompt": add_gen,
                          "rendered": plain})
        question = [{"role": "user", "content": GREEDY_QUESTION}]
        prompt = compiled.render(messages=question, bos_token=bos, eos_token=eos,
                                 add_generation_prompt=True)
        llama = llama_greedy(path, prompt)
        out = {
            "generator": "scripts/gen_real_chat_fixtures.py",
            "jinja2": jinja2.__version__,
            "transformers": transformers.__version__,
            "file": file,
            "bos_token": bos,
            "eos_token": eos,
            "cases": cases,
            "greedy_llama_cpp": {"llama_cpp": llama["version"], "question": GREEDY_QUESTION,
                                 "prompt_ids": llama["ids"], "continuation": llama["greedy"]},
        }
        dest = os.path.join(ROOT, "data", "real", f"chat-{name}.json")
        with open(dest, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {dest}: {len(cases)} cases")


if __name__ == "__main__":
    main()
