"""Drives the gateway's Messages door with the official anthropic SDK, unchanged but for base_url
and the key: create, stream, a tool call with its tool_result round trip, count_tokens, and the
401/404/429 errors with their Anthropic types.

usage: anthropic_sdk_check.py BASE_URL API_KEY RPM2_KEY MODEL [MODEL...]
RPM2_KEY is a virtual key limited to 2 requests a minute (for the 429); exits non-zero on the
first mismatch.
"""
import sys

import anthropic

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
HELLO = [{"role": "user", "content": "Say hello"}]


def check(client: anthropic.Anthropic, model: str) -> None:
    plain = client.messages.create(model=model, max_tokens=256, messages=HELLO)
    text = "".join(b.text for b in plain.content if b.type == "text")
    assert text, f"{model}: empty content {plain}"
    assert plain.stop_reason == "end_turn", plain
    assert plain.usage.input_tokens > 0 and plain.usage.output_tokens > 0, plain.usage

    with client.messages.stream(model=model, max_tokens=256, messages=HELLO) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    # The mock numbers its replies, so the last word differs between calls.
    assert streamed.split()[:-1] == text.split()[:-1], f"{model}: streamed {streamed!r} vs {text!r}"
    assert final.stop_reason == "end_turn", final
    assert final.usage.output_tokens == plain.usage.output_tokens, (final.usage, plain.usage)
    assert final.usage.input_tokens == plain.usage.input_tokens, (final.usage, plain.usage)

    ask = [{"role": "user", "content": "Weather in Paris?"}]
    tool = client.messages.create(model=model, max_tokens=256, messages=ask, tools=[WEATHER])
    assert tool.stop_reason == "tool_use", tool
    calls = [b for b in tool.content if b.type == "tool_use"]
    assert calls and calls[0].name == "get_weather" and "city" in calls[0].input, calls
    result = {"type": "tool_result", "tool_use_id": calls[0].id, "content": "18°C and sunny"}
    history = ask + [{"role": "assistant", "content": tool.content}, {"role": "user", "content": [result]}]
    answer = client.messages.create(model=model, max_tokens=256, messages=history, tools=[WEATHER])
    assert answer.stop_reason == "end_turn", answer
    assert any(b.type == "text" and b.text for b in answer.content), answer

    with client.messages.stream(model=model, max_tokens=256, messages=ask, tools=[WEATHER]) as stream:
        final = stream.get_final_message()
    calls = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and calls and "city" in calls[0].input, final

    count = client.messages.count_tokens(model=model, messages=HELLO, tools=[WEATHER])
    assert count.input_tokens > 0, count
    print(f"{model}: ok (create, stream, tool round trip, streamed tool call, count_tokens={count.input_tokens})")


def errors(base_url: str, key: str, rpm2_key: str, model: str) -> None:
    bad = anthropic.Anthropic(base_url=base_url, api_key="gk_not_a_key", max_retries=0)
    try:
        bad.messages.create(model=model, max_tokens=16, messages=HELLO)
        raise AssertionError("a wrong key was accepted")
    except anthropic.AuthenticationError as e:
        assert e.status_code == 401 and e.body["error"]["type"] == "authentication_error", e.body

    client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0)
    try:
        client.messages.create(model="no-such-model-anywhere", max_tokens=16, messages=HELLO)
        raise AssertionError("an unknown model was served")
    except anthropic.NotFoundError as e:
        assert e.status_code == 404 and e.body["error"]["type"] == "not_found_error", e.body

    limited = anthropic.Anthropic(base_url=base_url, api_key=rpm2_key, max_retries=0)
    limited.messages.create(model=model, max_tokens=16, messages=HELLO)
    limited.messages.create(model=model, max_tokens=16, messages=HELLO)
    try:
        limited.messages.create(model=model, max_tokens=16, messages=HELLO)
        raise AssertionError("the third request within a minute passed an rpm-2 key")
    except anthropic.RateLimitError as e:
        assert e.status_code == 429 and e.body["error"]["type"] == "rate_limit_error", e.body
        assert int(e.response.headers["retry-after"]) >= 1, e.response.headers
    print("errors: ok (401 authentication_error, 404 not_found_error, 429 rate_limit_error + retry-after)")


def main() -> None:
    base_url, key, rpm2_key, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    # api_key is sent as x-api-key; auth_token as Authorization: Bearer (what ANTHROPIC_AUTH_TOKEN does).
    for model in models:
        check(anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0), model)
    bearer = anthropic.Anthropic(base_url=base_url, auth_token=key, max_retries=0)
    assert bearer.messages.create(model=models[0], max_tokens=16, messages=HELLO).content
    errors(base_url, key, rpm2_key, models[0])


if __name__ == "__main__":
    main()
