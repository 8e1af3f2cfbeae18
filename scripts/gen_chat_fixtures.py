#!/usr/bin/env python
"""Fixtures for chapter 8 (src/chat/): the Qwen3 chat template rendered by jinja2.

Run:   /work/pyenv/bin/python scripts/gen_chat_fixtures.py
Needs: jinja2 3.1.6 and transformers 5.24 (both checked below). Writes
tests/fixtures/chat/conversations.json.

The template is tests/fixtures/chat/qwen3_chat_template.jinja: Qwen3's `chat_template`
from the tokenizer_config.json of Qwen/Qwen3-0.6B, as vendored by llama.cpp
(models/templates/Qwen-Qwen3-0.6B.jinja, written by its scripts/get_chat_template.py) and
shipped on PyPI in the llama-cpp-python 0.3.36 sdist at
vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja. Its sha256 is checked here.

Every case is rendered twice and the two must agree:
  1. plain jinja2 with the environment transformers builds in
     transformers/utils/chat_template_utils.py (_cached_compile_jinja_template):
     ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
     extensions=[loopcontrols]), its `tojson` filter (json.dumps, ensure_ascii=False) and
     `raise_exception` global;
  2. transformers' own render_jinja_template (what tokenizer.apply_chat_template calls),
     which also copies `reasoning`/`thinking` into `reasoning_content`.
Case "alias_reasoning_field" relies on that copy, so for it only (2) is the oracle.
A case whose rendering raises stores the error type instead of a rendering.
"""

import hashlib
import json
import os

import jinja2
import transformers
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from transformers.utils.chat_template_utils import render_jinja_template

assert jinja2.__version__ == "3.1.6", jinja2.__version__
assert transformers.__version__.startswith("5.24"), transformers.__version__

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures", "chat")
TEMPLATE_SHA256 = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"


def load_template():
    with open(os.path.join(FIX, "qwen3_chat_template.jinja"), "rb") as f:
        raw = f.read()
    assert hashlib.sha256(raw).hexdigest() == TEMPLATE_SHA256, "template changed"
    return raw.decode("utf-8")


def plain_env():
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


SYS = {"role": "system", "content": "You are a helpful assistant."}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city, in °C.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"北京\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
CALC_TOOL = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an expression.\nReturns a number.",
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}},
                   "required": ["expr"]}}}


def conversations():
    """(name, messages, tools) — the committed set, each rendered under several options."""
    return [
        ("chatml_source_example", [SYS, {"role": "user", "content": "你好"}], None),
        ("user_only", [{"role": "user", "content": "What is 2 + 2?"}], None),
        ("multi_turn_plain", [
            SYS,
            {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": "Another one?"},
        ], None),
        ("think_in_content_stripped_from_history", [
            {"role": "user", "content": "Is 91 prime?"},
            {"role": "assistant", "content": "<think>\n91 = 7 × 13.\n</think>\n\nNo: 91 = 7 × 13."},
            {"role": "user", "content": "And 97?"},
        ], None),
        ("last_assistant_keeps_think_from_content", [
            {"role": "user", "content": "Is 97 prime?"},
            {"role": "assistant", "content": "<think>\nCheck 2, 3, 5, 7: none divides 97.\n</think>\n\nYes."},
        ], None),
        ("reasoning_content_field_last_turn", [
            SYS,
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris.", "reasoning_content": "\nThe capital of France is Paris.\n\n"},
        ], None),
        ("reasoning_content_field_history_dropped", [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
            {"role": "user", "content": "Bye"},
            {"role": "assistant", "content": "Goodbye!", "reasoning_content": ""},
        ], None),
        ("assistant_without_think_last_turn", [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
        ], None),
        ("tool_calls_and_responses", [
            SYS,
            {"role": "user", "content": "Weather in Beijing and Paris?"},
            {"role": "assistant", "content": "", "reasoning_content": "Two cities: call the tool twice.",
             "tool_calls": [
                 {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "北京", "unit": "celsius"}}},
                 {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "content": "{\"temp\": 21.5}"},
            {"role": "tool", "content": "{\"temp\": 18}"},
            {"role": "assistant", "content": "<think>\nBoth answers are in.\n</think>\n\nBeijing 21.5 °C, Paris 18 °C."},
        ], [WEATHER_TOOL]),
        ("tools_without_system", [
            {"role": "user", "content": "Compute 3*(4+5)."},
            {"role": "assistant", "content": "Let me compute that.",
             "tool_calls": [{"name": "calculator", "arguments": {"expr": "3*(4+5)", "precision": 1e-05, "max": 1e16, "ratio": 0.5, "n": 3, "flag": True, "none": None, "list": [1, 2.0, "x"]}}]},
            {"role": "tool", "content": "27"},
        ], [CALC_TOOL, WEATHER_TOOL]),
        ("tool_response_wrapped_user_is_not_a_query", [
            {"role": "user", "content": "Look it up."},
            {"role": "assistant", "content": "<think>\nI need the tool.\n</think>\n\n",
             "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expr": "1+1"}}}]},
            {"role": "user", "content": "<tool_response>\n2\n</tool_response>"},
            {"role": "assistant", "content": "<think>\nThe tool said 2.\n</think>\n\nIt is 2."},
        ], None),
        ("system_not_first", [
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": "Answer in French."},
            {"role": "assistant", "content": "Bonjour !"},
        ], None),
        ("unknown_role_skipped", [
            SYS,
            {"role": "developer", "content": "hidden"},
            {"role": "user", "content": "Hi"},
        ], None),
        ("open_think_without_close", [
            {"role": "user", "content": "Think aloud."},
            {"role": "assistant", "content": "<think>\nstill thinking"},
        ], None),
        ("several_close_tags", [
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "\n<think>a</think>b</think>\n\n\nc"},
        ], None),
        ("whitespace_and_unicode", [
            {"role": "system", "content": "  spaced system  \n"},
            {"role": "user", "content": "émoji 🙂 and\ttabs\n\nand blank lines\n"},
            {"role": "assistant", "content": "\n\nleading newlines kept in history"},
            {"role": "user", "content": "ok"},
        ], None),
        ("alias_reasoning_field", [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning": "Add two and two."},
        ], None),
        ("tool_null_content", [
            {"role": "user", "content": "Call it."},
            {"role": "assistant", "content": "", "tool_calls": [{"name": "calculator", "arguments": {}}]},
            {"role": "tool", "content": None},
            {"role": "tool"},
        ], None),
        ("error_empty_conversation", [], None),
        ("error_user_content_null", [{"role": "user", "content": None}], None),
    ]


OPTIONS = [
    {"add_generation_prompt": True, "enable_thinking": None},
    {"add_generation_prompt": True, "enable_thinking": False},
    {"add_generation_prompt": True, "enable_thinking": True},
    {"add_generation_prompt": False, "enable_thinking": None},
    {"add_generation_prompt": False, "enable_thinking": False},
]


def render_both(template, env, messages, tools, opts, alias_only):
    kwargs = {}
    if opts["enable_thinking"] is not None:
        kwargs["enable_thinking"] = opts["enable_thinking"]
    results = []
    try:
        results.append(("ok", render_jinja_template(
            conversations=[messages], tools=tools, chat_template=template,
            add_generation_prompt=opts["add_generation_prompt"], **kwargs)[0][0]))
    except Exception as e:  # the template raised
        results.append(("error", type(e).__name__))
    if not alias_only:
        try:
            results.append(("ok", env.from_string(template).render(
                messages=messages, tools=tools,
                add_generation_prompt=opts["add_generation_prompt"], **kwargs)))
        except Exception as e:
            results.append(("error", type(e).__name__))
        assert results[0][0] == results[1][0], results
        if results[0][0] == "ok":
            assert results[0][1] == results[1][1], "transformers and plain jinja2 differ"
    return results[0]


def main():
    template = load_template()
    env = plain_env()
    cases = []
    for name, messages, tools in conversations():
        for opts in OPTIONS:
            kind, value = render_both(template, env, messages, tools, opts,
                                      alias_only=(name == "alias_reasoning_field"))
            case = {"name": name, "messages": messages, "tools": tools, **opts}
            if kind == "ok":
                case["rendered"] = value
            else:
                case["error"] = value
            cases.append(case)
    meta = {"generator": "scripts/gen_chat_fixtures.py", "jinja2": jinja2.__version__,
            "transformers": transformers.__version__,
            "template": "tests/fixtures/chat/qwen3_chat_template.jinja",
            "template_sha256": TEMPLATE_SHA256}
    with open(os.path.join(FIX, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_conv = len({c["name"] for c in cases})
    n_err = sum("error" in c for c in cases)
    print(f"conversations.json: {n_conv} conversations, {len(cases)} renderings ({n_err} raise)")


if __name__ == "__main__":
    main()
