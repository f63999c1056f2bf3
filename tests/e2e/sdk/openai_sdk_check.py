"""Drives the gateway with the official openai SDK, unchanged: plain, streamed with usage, tool call.

usage: openai_sdk_check.py BASE_URL API_KEY MODEL [MODEL...]; exits non-zero on the first mismatch.
"""
import json
import sys

from openai import OpenAI

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def check(client: OpenAI, model: str) -> None:
    plain = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello"}])
    assert plain.choices[0].message.content, f"{model}: empty content"
    assert plain.choices[0].finish_reason == "stop", plain
    assert plain.usage and plain.usage.prompt_tokens > 0 and plain.usage.completion_tokens > 0, plain.usage

    text, usage, finish = "", None, None
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    # The mock numbers its replies, so the last word differs between calls.
    same_shape = text.split()[:-1] == plain.choices[0].message.content.split()[:-1]
    assert same_shape, f"{model}: streamed {text!r} vs {plain.choices[0].message.content!r}"
    assert finish == "stop", finish
    assert usage is not None and usage.completion_tokens == plain.usage.completion_tokens, (usage, plain.usage)
    assert usage.prompt_tokens == plain.usage.prompt_tokens, (usage, plain.usage)

    tool = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
    )
    calls = tool.choices[0].message.tool_calls
    assert tool.choices[0].finish_reason == "tool_calls", tool
    assert calls and calls[0].function.name == "get_weather", calls
    args = json.loads(calls[0].function.arguments)
    assert "city" in args, args
    print(f"{model}: ok (plain, stream+usage, tool call)")


def main() -> None:
    base_url, key, *models = sys.argv[1:]
    client = OpenAI(base_url=base_url, api_key=key, max_retries=0)
    for model in models:
        check(client, model)


if __name__ == "__main__":
    main()
