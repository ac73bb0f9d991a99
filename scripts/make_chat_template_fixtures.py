#!/usr/bin/env python3
"""Renders tests/fixtures/chat_templates/src/*.jinja with jinja2 configured as transformers
configures it and writes tests/fixtures/chat_templates/<name>.json = {template, cases}.

strftime_now is pinned: a context key "__now__" (unix seconds) is formatted in UTC, which is
what tf::ChatTemplate does with the same key, so both sides print the same date.
"""
import json
import pathlib
from datetime import datetime, timezone

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "chat_templates"
NOW = 1721988000  # 2024-07-26 10:00:00 UTC


def make_env(context):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(context["__now__"], timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}]

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thanks. How can I help?"}
U2 = {"role": "user", "content": "What's 2+2? Answer with {braces}, \"quotes\" and 'apostrophes'."}
UNICODE = {"role": "user", "content": "  Grüße aus Köln — 日本語 😀 \\n {{ not a tag }} {% neither %}\n\n"}
THINK = {"role": "assistant", "content": "<think>\nLet me add.\n</think>\n\n2+2 is 4."}
REASON = {"role": "assistant", "content": "It is 4.", "reasoning_content": "Simple arithmetic."}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}
CALL_STR = {"role": "assistant", "content": None, "tool_calls": [{"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
PARTS = {"role": "user", "content": [{"type": "text", "text": "Describe this "}, {"type": "text", "text": " in two words."}]}
WEATHER_Q = {"role": "user", "content": "Weather in Paris?"}
FINAL = {"role": "assistant", "content": "It is sunny and 21.5 °C in Paris."}


def conversations():
    base = {"bos_token": "<s>", "eos_token": "</s>", "__now__": NOW}
    convs = {
        "single": [U1],
        "system": [SYS, U1],
        "multi": [SYS, U1, A1, U2],
        "multi_closed": [U1, A1, U2, A1],
        "unicode": [UNICODE],
        "think": [U2, THINK, U1],
        "reasoning_last": [U2, REASON],
        "parts": [PARTS],
        "tools": [SYS, WEATHER_Q, CALL, RESULT, FINAL],
        "tools_str_args": [WEATHER_Q, CALL_STR, RESULT],
        "bad_alternation": [U1, U2],
        "system_only_then_assistant": [SYS, A1],
    }
    for name, msgs in convs.items():
        for agp in (True, False):
            ctx = dict(base, messages=msgs, add_generation_prompt=agp)
            yield f"{name}/agp={agp}", ctx
    for name in ("tools", "tools_str_args", "system"):
        ctx = dict(base, messages=convs[name], add_generation_prompt=True, tools=TOOLS)
        yield f"{name}/with_tools", ctx
    for flag in (True, False):
        ctx = dict(base, messages=convs["think"], add_generation_prompt=True, enable_thinking=flag)
        yield f"think/enable_thinking={flag}", ctx
    yield "tools/none", dict(base, messages=convs["system"], add_generation_prompt=True, tools=None)


def render(template, context):
    env = make_env(context)
    return env.from_string(template).render(**context)


def main():
    total = 0
    for src in sorted((FIXTURES / "src").glob("*.jinja")):
        template = src.read_text(encoding="utf-8")
        cases = []
        for label, ctx in conversations():
            case = {"name": label, "context": ctx}
            try:
                case["expected"] = render(template, ctx)
            except jinja2.exceptions.TemplateError as e:
                # Only raise_exception messages are compared exactly; other jinja errors just must throw.
                case["error"] = str(e)
                case["raised"] = type(e) is jinja2.exceptions.TemplateError
            except Exception as e:  # noqa: BLE001 - Python-level failures (TypeError...) must throw in C++ too
                case["error"] = f"{type(e).__name__}: {e}"
                case["raised"] = False
            cases.append(case)
        out = FIXTURES / f"{src.stem}.json"
        out.write_text(json.dumps({"template": template, "cases": cases}, ensure_ascii=False, indent=1) + "\n",
                       encoding="utf-8")
        total += out.stat().st_size
        print(f"{out.name}: {len(cases)} cases, {sum('error' in c for c in cases)} errors")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
