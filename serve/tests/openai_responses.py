"""The official `openai` client's Responses API against a running tl serve
(serve/tests/openai_responses.rs).

  openai_responses.py BASE_URL MODEL

`client.responses.create` plain (tl's `seed` through `extra_body`) (a seeded answer, usage, status), streamed (the deltas
add up to the completed response's text, which equals the plain answer's), a function
tool loop (a function_call item, then its function_call_output sent after
previous_response_id gets a text answer), `client.responses.parse(text_format=Model)`
and `client.responses.stream(text_format=Model)` giving instances of the Pydantic model,
and errors (a bad body, an unknown previous_response_id) raised as the client's own
exceptions. Prints one line per check; any failure raises (exit 1).
"""
import json
import sys

import openai
from pydantic import BaseModel, Field

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=300)


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=130)


plain = client.responses.create(model=model, instructions="You are terse.", input="Name a colour.", extra_body={"seed": 3},
                                temperature=0.7, max_output_tokens=24)
assert plain.object == "response" and plain.id.startswith("resp_"), plain
assert plain.status in ("completed", "incomplete"), plain
assert isinstance(plain.output_text, str) and plain.output_text, plain
assert plain.usage.input_tokens > 0 and plain.usage.output_tokens > 0, plain.usage
assert plain.usage.total_tokens == plain.usage.input_tokens + plain.usage.output_tokens, plain.usage
again = client.responses.create(model=model, instructions="You are terse.", input="Name a colour.", extra_body={"seed": 3},
                                temperature=0.7, max_output_tokens=24)
assert again.output_text == plain.output_text, (again.output_text, plain.output_text)
print(f"create ok: {plain.output_text!r}")

short = client.responses.create(model=model, input="Tell me a long story.", max_output_tokens=3)
assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens", short
print("incomplete ok")

deltas, final, kinds = [], None, []
for ev in client.responses.create(model=model, instructions="You are terse.", input="Name a colour.", extra_body={"seed": 3},
                                  temperature=0.7, max_output_tokens=24, stream=True):
    kinds.append(ev.type)
    if ev.type == "response.output_text.delta":
        deltas.append(ev.delta)
    elif ev.type in ("response.completed", "response.incomplete"):
        final = ev.response
assert kinds[:2] == ["response.created", "response.in_progress"], kinds
assert final is not None and final.output_text == "".join(deltas) == plain.output_text, (final, deltas)
print(f"streamed ok: {len(deltas)} deltas")

TOOLS = [{
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}]
first = client.responses.create(model=model, instructions="Use the tools when they help.",
                                input="What is the weather in Paris?", tools=TOOLS, tool_choice="required", extra_body={"seed": 7},
                                temperature=0, max_output_tokens=80)
calls = [o for o in first.output if o.type == "function_call"]
assert len(calls) >= 1, first
call = calls[0]
assert call.name == "get_weather" and call.call_id.startswith("call_"), call
args = json.loads(call.arguments)
assert isinstance(args.get("city"), str), args
print(f"tool call ok: {call.name}({call.arguments})")
outputs = [{"type": "function_call_output", "call_id": c.call_id,
            "output": json.dumps({"city": json.loads(c.arguments).get("city"), "temperature_c": 21})} for c in calls]
# SmolLM2 (135M) calls again under "auto": the answer step says "none", as agent loops do.
second = client.responses.create(model=model, previous_response_id=first.id, input=outputs, tools=TOOLS,
                                 tool_choice="none", extra_body={"seed": 7}, temperature=0, max_output_tokens=60)
assert second.previous_response_id == first.id, second
assert not [o for o in second.output if o.type == "function_call"], second
assert second.output_text.strip(), second
assert second.usage.input_tokens > first.usage.input_tokens, (second.usage, first.usage)
print(f"tool loop ok: {second.output_text!r}")

for cls, question in [(City, "Name a city in France and its country."),
                      (Person, "Invent a person with a name and an age.")]:
    r = client.responses.parse(model=model, instructions="You answer with JSON only.", input=question,
                               text_format=cls, extra_body={"seed": 3}, temperature=0, max_output_tokens=200)
    assert isinstance(r.output_parsed, cls), r
    print(f"parsed ok: {r.output_parsed!r}")
with client.responses.stream(model=model, instructions="You answer with JSON only.",
                             input="Name a city in France and its country.", text_format=City, extra_body={"seed": 3},
                             temperature=0, max_output_tokens=200) as s:
    for _ in s:
        pass
    done = s.get_final_response()
assert isinstance(done.output_parsed, City), done
print(f"streamed parse ok: {done.output_parsed!r}")

try:
    client.responses.create(model=model, input=[])
    raise AssertionError("an empty input was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and e.body and e.body.get("message"), e
try:
    client.responses.create(model=model, input="hi", previous_response_id="resp_nope")
    raise AssertionError("an unknown previous_response_id was accepted")
except openai.NotFoundError as e:
    assert e.status_code == 404 and "resp_nope" in e.body.get("message", ""), e
print("errors ok")
