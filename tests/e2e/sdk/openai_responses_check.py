"""Drives the gateway's /v1/responses with the official openai SDK, unchanged: `responses.create`
(text, usage, a function-call round trip), `responses.stream` (text events, final response,
usage), and an error.

usage: openai_responses_check.py BASE_URL API_KEY MODEL [MODEL...]; exits non-zero on the first mismatch.
"""
import json
import sys

import openai
from openai import OpenAI

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def check(client: OpenAI, model: str) -> None:
    plain = client.responses.create(model=model, input="Say hello", store=False)
    assert plain.status == "completed", plain
    assert plain.output_text.startswith("Hello from"), f"{model}: {plain.output_text!r}"
    assert plain.usage and plain.usage.input_tokens > 0 and plain.usage.output_tokens > 0, plain.usage
    assert plain.usage.total_tokens == plain.usage.input_tokens + plain.usage.output_tokens, plain.usage
    assert plain.usage.output_tokens_details is not None, plain.usage

    deltas, kinds = "", []
    with client.responses.stream(model=model, input="Say hello", store=False) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas += event.delta
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert final.output_text == deltas, (final.output_text, deltas)
    # The mock numbers its replies, so the last word differs between calls.
    assert deltas.split()[:-1] == plain.output_text.split()[:-1], (deltas, plain.output_text)
    assert final.usage and final.usage.output_tokens == plain.usage.output_tokens, (final.usage, plain.usage)
    assert final.usage.input_tokens == plain.usage.input_tokens, (final.usage, plain.usage)

    history = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.responses.create(model=model, input=history, tools=[WEATHER], store=False)
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather", first.output
    args = json.loads(calls[0].arguments)
    assert "city" in args, args
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"})
    second = client.responses.create(model=model, input=history, tools=[WEATHER], store=False)
    assert second.output_text.startswith("Hello from"), second.output
    assert not [item for item in second.output if item.type == "function_call"], second.output

    streamed_call = ""
    with client.responses.stream(model=model, input="Weather?", tools=[WEATHER], store=False) as stream:
        for event in stream:
            if event.type == "response.function_call_arguments.delta":
                streamed_call += event.delta
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert calls and calls[0].arguments == streamed_call and "city" in json.loads(streamed_call), final.output

    try:
        client.responses.create(model=model, input="x", previous_response_id="resp_123")
        raise AssertionError("previous_response_id was accepted")
    except openai.BadRequestError as e:
        assert e.body and e.body.get("param") == "previous_response_id", e.body
    try:
        client.responses.create(model="no-such-model", input="x")
        raise AssertionError("unknown model was accepted")
    except openai.NotFoundError:
        pass
    print(f"{model}: ok (create, stream, function-call round trip, usage, errors)")


def main() -> None:
    base_url, api_key, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    for model in models:
        check(client, model)


if __name__ == "__main__":
    main()
