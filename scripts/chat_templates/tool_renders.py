"""Golden renderings of tool-use conversations by transformers' own renderer (jinja2).

Run with the fixtures venv:
  scripts/fixtures/.venv/bin/python scripts/chat_templates/tool_renders.py
Writes scripts/chat_templates/tool_renders.json beside this script; core/tests/chat_tools.rs
renders the same cases with minijinja (tl's ChatTemplate::render_with_tools) and compares
byte for byte. The templates in tools/ are the real ones (Qwen2.5, Hermes 3, Llama 3.1,
Mistral Nemo), as llama.cpp's models/templates keeps them. A case whose template raises
has "error" (the start of transformers' message) instead of "text".

Tool calls carry `arguments` as a dict, as transformers' templates expect (serve parses
OpenAI's JSON string into one before rendering). Ids are 9 alphanumerics, which Mistral's
template requires (serve maps other ids to such ones for that format).
"""
import json
import pathlib

from transformers.utils.chat_template_utils import render_jinja_template

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "tool_renders.json"

TEMPLATES = {
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", {}),
    "hermes3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}),
    "llama3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", {"bos_token": "<s>", "eos_token": "</s>"}),
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. \"Paris\"."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}, "hours": {"type": "integer", "minimum": 0}}},
    },
}


def call(id_, name, args):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = {
    "ask": [{"role": "user", "content": "What is the weather in Paris?"}],
    "system_ask": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Zürich, \"please\"?"},
    ],
    "one_call": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("abc123XYZ", "get_weather", {"city": "Paris", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather", "content": "{\"temp\": 21}"},
    ],
    "two_calls": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather and time in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("abc123XYZ", "get_weather", {"city": "Oslo"}),
                call("def456UVW", "get_time", {"zone": "Europe/Oslo", "hours": 2}),
            ],
        },
        {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather", "content": "cold"},
        {"role": "tool", "tool_call_id": "def456UVW", "name": "get_time", "content": "12:00"},
        {"role": "assistant", "content": "Cold, and noon."},
        {"role": "user", "content": "Thanks!"},
    ],
}

CASES = [(t, c, g) for t in TEMPLATES for c in CONVERSATIONS for g in (True, False)]


def main():
    out = {"tools": [WEATHER, TIME], "conversations": CONVERSATIONS, "templates": {}, "tokens": {}, "cases": []}
    for name, (file, tokens) in TEMPLATES.items():
        out["templates"][name] = (HERE / "tools" / file).read_text()
        out["tokens"][name] = tokens
    for name, conv, agp in CASES:
        case = {"template": name, "conversation": conv, "add_generation_prompt": agp}
        try:
            case["text"] = render_jinja_template(
                conversations=[CONVERSATIONS[conv]],
                tools=out["tools"],
                chat_template=out["templates"][name],
                add_generation_prompt=agp,
                **out["tokens"][name],
            )[0][0]
        except Exception as e:  # the template's raise_exception
            case["error"] = str(e)[:60]
        out["cases"].append(case)
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}: {len(out['cases'])} cases, {sum('error' in c for c in out['cases'])} errors")


if __name__ == "__main__":
    main()
