#!/usr/bin/env python3
"""A request shaped like a coding agent's. By default a Messages request (Claude Code's): a long
system prompt in two cached blocks, fifteen tools with JSON schemas, and a twenty-turn history of
text, tool calls and tool results (no thinking: the mock checks thinking signatures). With
`--responses` a Responses request (Codex's): the same prompt as `instructions`, the tools as
function tools beside a hosted one, and the history as input items, each turn's reasoning item
carrying encrypted content. With `--chat` a chat completions request (the agents built on the
OpenAI chat API): the prompt as a system message, the tools as functions, the history as
assistant tool calls and tool messages. Deterministic, about 34, 50 and 33 kB.

usage: agent_body.py MODEL [--responses | --chat]
"""
import json
import sys

WORDS = ("the gateway reads each request once and forwards the bytes with only the model changed so "
         "that vendor features it never heard of keep working while usage limits and fallbacks hold "
         "file test build error line function module crate cargo run check fix change value").split()


def text(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(n))


def responses(model: str) -> dict:
    tools = [{
        "type": "function", "name": f"tool_{i}", "description": text(40, i), "strict": False,
        "parameters": {"type": "object", "properties": {
            f"arg{j}": {"type": "string", "description": text(12, i + j)} for j in range(4)},
            "required": ["arg0"]},
    } for i in range(15)] + [{"type": "web_search", "external_web_access": False}]
    items = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text(120, 2)}]},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text(30, 1)}]}]
    for turn in range(20):
        items.append({"type": "reasoning", "id": f"rs_{turn:04d}", "summary": [], "content": None,
                      "encrypted_content": "gAAAAB" + "QUJDRA" * 100})
        items.append({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": text(25, turn)}]})
        items.append({"type": "function_call", "id": f"fc_{turn:04d}", "name": f"tool_{turn % 15}",
                      "arguments": json.dumps({"arg0": text(8, turn), "arg1": "src/lib.rs"}),
                      "call_id": f"call_{turn:04d}"})
        items.append({"type": "function_call_output", "call_id": f"call_{turn:04d}", "output": text(60, turn + 100)})
    items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text(20, 7)}]})
    return {
        "model": model, "instructions": text(1000, 3), "input": items, "tools": tools,
        "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "medium"},
        "store": False, "stream": False, "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "bench-session", "max_output_tokens": 64,
    }


def chat(model: str) -> dict:
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": text(40, i),
        "parameters": {"type": "object", "properties": {
            f"arg{j}": {"type": "string", "description": text(12, i + j)} for j in range(4)},
            "required": ["arg0"]},
    }} for i in range(15)]
    messages = [{"role": "system", "content": text(1000, 3)}, {"role": "user", "content": text(30, 1)}]
    for turn in range(20):
        messages.append({"role": "assistant", "content": text(25, turn), "tool_calls": [{
            "id": f"call_{turn:04d}", "type": "function", "function": {
                "name": f"tool_{turn % 15}", "arguments": json.dumps({"arg0": text(8, turn), "arg1": "src/lib.rs"})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{turn:04d}", "content": text(60, turn + 100)})
    messages.append({"role": "user", "content": text(20, 7)})
    return {"model": model, "messages": messages, "tools": tools, "tool_choice": "auto",
            "parallel_tool_calls": False, "max_completion_tokens": 64, "user": "bench-session"}


def main() -> None:
    model = sys.argv[1]
    if sys.argv[2:] == ["--responses"]:
        print(json.dumps(responses(model), separators=(",", ":")))
        return
    if sys.argv[2:] == ["--chat"]:
        print(json.dumps(chat(model), separators=(",", ":")))
        return
    tools = [{
        "name": f"Tool{i}",
        "description": text(40, i),
        "input_schema": {"type": "object", "properties": {
            f"arg{j}": {"type": "string", "description": text(12, i + j)} for j in range(4)},
            "required": ["arg0"]},
    } for i in range(15)]
    messages = [{"role": "user", "content": text(30, 1)}]
    for turn in range(20):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": text(25, turn)},
            {"type": "tool_use", "id": f"toolu_{turn:04d}", "name": f"Tool{turn % 15}",
             "input": {"arg0": text(8, turn), "arg1": "src/lib.rs"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{turn:04d}",
             "content": [{"type": "text", "text": text(60, turn + 100)}]}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": text(20, 7),
                                                  "cache_control": {"type": "ephemeral"}}]})
    body = {
        "model": model, "max_tokens": 64,
        "system": [{"type": "text", "text": text(600, 3), "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": text(400, 5)}],
        "tools": tools,
        "messages": messages,
        "metadata": {"user_id": json.dumps({"device_id": "bench", "session_id": "bench-session"})},
    }
    print(json.dumps(body, separators=(",", ":")))


if __name__ == "__main__":
    main()
