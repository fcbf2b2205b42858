"""The official `openai` Python client reads tl's reasoning split.

Usage: python openai_reasoning.py BASE_URL MODEL
The server's template opens the thinking (serve/tests/reasoning.rs), so a seeded chat's
answer is thinking until `</think>`. Checks that the SDK exposes `reasoning_content` on the
message and on stream deltas, that the streamed parts equal the plain answer's, and that
`reasoning_tokens` is counted. Prints one line per check; exits non-zero on a mismatch.
"""

import sys

import openai


def main() -> None:
    base, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=60)
    msgs = [{"role": "user", "content": "Why is the sky blue?"}]
    chat = client.chat.completions.create(model=model, messages=msgs, max_tokens=16, seed=11, temperature=1.0)
    message = chat.choices[0].message
    # Fields beyond OpenAI's schema are kept by the SDK's models (pydantic extra).
    reasoning = getattr(message, "reasoning_content", None)
    assert isinstance(reasoning, str) and reasoning, chat
    assert isinstance(message.content, str), chat
    details = chat.usage.completion_tokens_details
    assert 0 < details.reasoning_tokens <= chat.usage.completion_tokens, chat.usage
    print("chat ok:", repr(reasoning), repr(message.content))

    stream = client.chat.completions.create(model=model, messages=msgs, max_tokens=16, seed=11, temperature=1.0,
                                            stream=True, stream_options={"include_usage": True})
    got_reasoning, got_content, usage = "", "", None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            got_reasoning += getattr(c.delta, "reasoning_content", None) or ""
            got_content += c.delta.content or ""
    assert (got_reasoning, got_content) == (reasoning, message.content), (got_reasoning, got_content)
    assert usage is not None and usage.completion_tokens_details.reasoning_tokens == details.reasoning_tokens, usage
    print("streamed chat ok: the same reasoning and content")


if __name__ == "__main__":
    main()
