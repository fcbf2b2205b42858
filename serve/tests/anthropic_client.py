"""The official `anthropic` Python SDK against tl's /v1/messages (serve/tests/anthropic_client.rs).

Usage: anthropic_client.py BASE_URL MODEL API_KEY TOOLS_BASE_URL TOOLS_MODEL

BASE_URL serves MODEL behind API_KEY (the SDK sends it as x-api-key); TOOLS_BASE_URL serves
TOOLS_MODEL (the same key, if it asks for one) for the tool loop. Prints one "... ok" line
per check; any failure raises.
"""

import sys

import anthropic

base, model, key, tools_base, tools_model = sys.argv[1:6]
client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)

args = dict(
    model=model,
    max_tokens=12,
    system="Be brief.",
    messages=[
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": [{"type": "text", "text": "Another one?"}]},
    ],
    metadata={"user_id": "tester"},
    # This SDK version has no keyword for the sampling fields (the API still takes them), so
    # they go in the body as they are; `seed` is tl's extension.
    extra_body={"seed": 42, "temperature": 0.8, "top_p": 0.95, "top_k": 40},
)


def text(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


msg = client.messages.create(**args)
assert isinstance(msg, anthropic.types.Message), msg
assert msg.type == "message" and msg.role == "assistant" and msg.model == model, msg
assert msg.id.startswith("msg_"), msg.id
assert msg.stop_reason in ("end_turn", "max_tokens"), msg.stop_reason
assert msg.usage.output_tokens > 0 and msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) > 0, msg.usage
again = client.messages.create(**args)
assert text(again) == text(msg) and again.stop_reason == msg.stop_reason, (again, msg)
print("create ok")

with client.messages.stream(**args) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
assert streamed == text(msg), (streamed, text(msg))
assert text(final) == text(msg), final
assert final.stop_reason == msg.stop_reason and final.usage.output_tokens == msg.usage.output_tokens, final
kinds = [e.type for e in client.messages.create(**args, stream=True)]
assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds
assert "content_block_start" in kinds and "content_block_stop" in kinds, kinds
print("stream ok")

count = client.messages.count_tokens(model=model, system=args["system"], messages=args["messages"])
assert count.input_tokens == msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0), (count, msg.usage)
print("count ok")

stop = client.messages.create(**{**args, "max_tokens": 40, "stop_sequences": [text(msg)[2:4] or "zz"]})
assert stop.stop_reason in ("stop_sequence", "end_turn", "max_tokens"), stop
if stop.stop_reason == "stop_sequence":
    assert stop.stop_sequence == text(msg)[2:4], stop
print("stop ok")

try:
    client.messages.create(**{**args, "extra_body": {**args["extra_body"], "temperature": 1.5}})
    raise AssertionError("temperature 1.5 was accepted")
except anthropic.BadRequestError as e:
    assert e.status_code == 400 and e.body["error"]["type"] == "invalid_request_error", e.body
try:
    client.messages.create(**{**args, "model": "claude-nonexistent"})
    raise AssertionError("another model was accepted")
except anthropic.NotFoundError as e:
    assert e.body["error"]["type"] == "not_found_error", e.body
try:
    anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0).messages.create(**args)
    raise AssertionError("a wrong key was accepted")
except anthropic.AuthenticationError as e:
    assert e.body["error"]["type"] == "authentication_error", e.body
print("errors ok")

# A tool loop: the model calls the tool, the client runs it and sends the result back.
tools_client = anthropic.Anthropic(base_url=tools_base, api_key=key, max_retries=0)
weather = {
    "name": "get_weather",
    "description": "Weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
history = [{"role": "user", "content": "What is the weather in Paris?"}]
targs = dict(model=tools_model, max_tokens=300, tools=[weather], extra_body={"seed": 9})
# One call: SmolLM2 under the generic format would otherwise call on until max_tokens.
one = {"type": "any", "disable_parallel_tool_use": True}
first = tools_client.messages.create(**targs, messages=history, tool_choice=one)
assert first.stop_reason == "tool_use", first
calls = [b for b in first.content if b.type == "tool_use"]
assert len(calls) == 1 and calls[0].name == "get_weather", first
assert isinstance(calls[0].input, dict) and set(calls[0].input) == {"city", "unit"}, calls[0]
with tools_client.messages.stream(**targs, messages=history, tool_choice=one) as s:
    sfinal = s.get_final_message()
scalls = [b for b in sfinal.content if b.type == "tool_use"]
assert [(c.name, c.input) for c in scalls] == [(c.name, c.input) for c in calls], (sfinal, first)
history.append({"role": "assistant", "content": first.content})
history.append(
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": f"Sunny in {c.input['city']}."} for c in calls
        ],
    }
)
second = tools_client.messages.create(**{**targs, "max_tokens": 16}, messages=history, tool_choice={"type": "auto"})
assert second.stop_reason in ("end_turn", "max_tokens", "tool_use"), second
assert second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0) > first.usage.input_tokens, second
print("tool loop ok")
