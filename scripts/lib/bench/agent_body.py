#!/usr/bin/env python3
"""A Messages request shaped like a coding agent's (Claude Code's): a long system prompt in two
cached blocks, fifteen tools with JSON schemas, and a twenty-turn history of text, tool calls and
tool results (no thinking: the mock checks thinking signatures). Deterministic, about 34 kB.

usage: agent_body.py MODEL
"""
import json
import sys

WORDS = ("the gateway reads each request once and forwards the bytes with only the model changed so "
         "that vendor features it never heard of keep working while usage limits and fallbacks hold "
         "file test build error line function module crate cargo run check fix change value").split()


def text(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(n))


def main() -> None:
    model = sys.argv[1]
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
