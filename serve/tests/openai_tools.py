"""A two-step tool loop through the official `openai` client (serve/tests/tool_clients.rs).

  openai_tools.py BASE_URL MODEL

Step one: `chat.completions.create(tools=...)` gets `finish_reason == "tool_calls"` and a
call of get_weather whose `arguments` parse as JSON with a city; the script runs the tool
and appends the assistant message (the client's own object) and a `role: "tool"` result.
Step two: the same tools, `tool_choice` none, gets a text answer (`finish_reason ==
"stop"`). Then the same first step streamed, accumulated as the client's users do
(`delta.tool_calls[i]` by index), must equal the non-streamed call. Prints one line per
check; any failure raises (exit 1).
"""
import json
import sys

from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base, api_key="unused", max_retries=0)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 24}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}]


def get_weather(city):
    return json.dumps({"city": city, "temperature_c": 21, "sky": "sunny"})


messages = [
    {"role": "system", "content": "You are a helpful assistant. Use the tools when they help."},
    {"role": "user", "content": "What is the weather in Paris?"},
]
first = client.chat.completions.create(
    model=model, messages=messages, tools=TOOLS, tool_choice="required", seed=7, temperature=0, max_tokens=80
)
choice = first.choices[0]
assert choice.finish_reason == "tool_calls", first
msg = choice.message
assert msg.content is None, msg
assert msg.tool_calls and len(msg.tool_calls) >= 1, msg
call = msg.tool_calls[0]
assert call.type == "function" and call.id.startswith("call_"), call
assert call.function.name == "get_weather", call
args = json.loads(call.function.arguments)
assert isinstance(args.get("city"), str), args
print(f"tool call ok: {call.function.name}({call.function.arguments}) id={call.id}")

messages.append(msg)
for c in msg.tool_calls:
    messages.append({"role": "tool", "tool_call_id": c.id, "content": get_weather(**json.loads(c.function.arguments))})
# SmolLM2 (135M) calls again under "auto" whatever the prompt says: the answer step says
# "none", as agent loops do to force a final answer.
second = client.chat.completions.create(
    model=model, messages=messages, tools=TOOLS, tool_choice="none", seed=7, temperature=0, max_tokens=80
)
final = second.choices[0]
assert final.finish_reason == "stop", second
assert final.message.tool_calls is None, final
assert isinstance(final.message.content, str) and final.message.content.strip(), final
print(f"final answer ok: {final.message.content!r}")

stream = client.chat.completions.create(
    model=model, messages=messages[:2], tools=TOOLS, tool_choice="required", seed=7, temperature=0, max_tokens=80,
    stream=True,
)
calls, finish = {}, None
for chunk in stream:
    d = chunk.choices[0].delta
    for tc in d.tool_calls or []:
        entry = calls.setdefault(tc.index, {"id": tc.id, "name": tc.function.name, "arguments": ""})
        entry["arguments"] += tc.function.arguments or ""
    finish = chunk.choices[0].finish_reason or finish
assert finish == "tool_calls", finish
assert [c["name"] for c in calls.values()] == [c.function.name for c in msg.tool_calls], calls
assert [c["arguments"] for c in calls.values()] == [c.function.arguments for c in msg.tool_calls], calls
assert all(c["id"].startswith("call_") for c in calls.values()), calls
print("streamed tool call ok")
