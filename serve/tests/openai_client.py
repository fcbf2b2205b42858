"""The official `openai` Python client against a running tl serve.

Usage: python openai_client.py BASE_URL MODEL
Runs a chat, a streamed chat (with usage) and a completion; exits non-zero on any
mismatch. Prints one line per check.
"""

import sys

import openai


def main() -> None:
    base, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=60)

    models = client.models.list()
    assert [m.id for m in models.data] == [model], models
    print("models ok")

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    chat = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, seed=7, temperature=0.8,
                                          logprobs=True, top_logprobs=2)
    choice = chat.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str), chat
    assert choice.finish_reason in ("stop", "length"), chat
    assert chat.usage.completion_tokens >= 1 and chat.usage.prompt_tokens > 0, chat.usage
    assert chat.usage.prompt_tokens_details.cached_tokens >= 0, chat.usage
    assert chat.system_fingerprint.startswith("fp_"), chat.system_fingerprint
    assert len(choice.logprobs.content) == chat.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 for t in choice.logprobs.content)
    print("chat ok:", repr(choice.message.content))

    stream = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, seed=7, temperature=0.8,
                                            stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == choice.message.content, (text, choice.message.content)
    assert finish == choice.finish_reason, finish
    assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens, usage
    print("streamed chat ok: same text as the plain chat")

    comp = client.completions.create(model=model, prompt="Once upon a time", max_tokens=8, seed=1, logprobs=2)
    assert isinstance(comp.choices[0].text, str) and comp.usage.completion_tokens == 8, comp
    assert len(comp.choices[0].logprobs.token_logprobs) == 8, comp
    print("completion ok:", repr(comp.choices[0].text))

    try:
        client.chat.completions.create(model="no-such-model", messages=msgs, max_tokens=2)
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404
    try:
        client.chat.completions.create(model=model, messages=msgs, max_tokens=2, temperature=5)
        raise AssertionError("temperature 5 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and "temperature" in str(e)
    print("errors ok")


if __name__ == "__main__":
    main()
