"""A two-step tool loop driven by an agent library's OpenAI adapter, langchain-openai's
ChatOpenAI (serve/tests/tool_clients.rs), against the server.

  agent_tools.py BASE_URL MODEL

`bind_tools([get_weather], tool_choice="required")` makes the first turn a call, which
langchain parses into `AIMessage.tool_calls` ({name, args, id}); the tool runs; its
`ToolMessage` goes back with the history through `bind_tools([get_weather], tool_choice="none")`, and
the model's final AIMessage is text without calls. Prints one line per step.
"""
import json
import os
import sys

os.environ["LANGCHAIN_TRACING_V2"] = "false"
os.environ["LANGSMITH_TRACING"] = "false"

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

base, model = sys.argv[1], sys.argv[2]


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "temperature_c": 21, "sky": "sunny"})


llm = ChatOpenAI(model=model, base_url=base, api_key="unused", temperature=0, seed=7, max_tokens=80, max_retries=0)
history = [
    SystemMessage("You are a helpful assistant. Use the tools when they help."),
    HumanMessage("What is the weather in Paris?"),
]
ai = llm.bind_tools([get_weather], tool_choice="required").invoke(history)
assert ai.tool_calls, ai
call = ai.tool_calls[0]
assert call["name"] == "get_weather" and isinstance(call["args"].get("city"), str), call
assert call["id"].startswith("call_"), call
assert ai.response_metadata.get("finish_reason") == "tool_calls", ai.response_metadata
print(f"agent tool call ok: {call['name']}({call['args']})")
history.append(ai)
for c in ai.tool_calls:
    history.append(ToolMessage(get_weather.invoke(c["args"]), tool_call_id=c["id"]))
# SmolLM2 (135M) calls again under "auto": the answer step says "none".
final = llm.bind_tools([get_weather], tool_choice="none").invoke(history)
assert not final.tool_calls, final
assert isinstance(final.content, str) and final.content.strip(), final
assert final.response_metadata.get("finish_reason") == "stop", final.response_metadata
print(f"agent final answer ok: {final.content!r}")
