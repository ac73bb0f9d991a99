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


def conversations(template):
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
    yield from richer_conversations(base, template)


# Shapes newer templates read: nested tool schemas, parallel calls, reasoning history, images and the
# template kwargs real callers pass. Appended after the cases above so older fixtures only gain cases;
# a kwarg case is only made for templates that read that kwarg, which keeps the fixtures small.
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "  Search the documentation.\nReturns the best matches.  ",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Query text"},
                "filters": {
                    "type": "object",
                    "description": "Optional filters",
                    "properties": {"lang": {"type": "string", "enum": ["en", "de"]}, "max": {"type": "integer"}},
                    "required": ["lang"],
                },
                "tags": {"type": "array", "description": "Tags to match", "items": {"type": "string"}},
                "exact": {"type": "boolean", "description": "Exact match only", "nullable": True},
                "score": {"type": ["number", "null"], "description": "Minimum score", "default": 0.5},
            },
            "required": ["query", "tags"],
        },
    },
}
RICH_TOOLS = TOOLS + [SEARCH_TOOL]
PARALLEL = {"role": "assistant", "content": "Let me check both.", "tool_calls": [
    {"id": "call_search01", "type": "function", "function": {"name": "search_docs", "arguments": {
        "query": "Köln \"Dom\"", "filters": {"lang": "de", "max": 3}, "tags": ["a", "b"], "exact": True, "score": 0.25}}},
    {"id": "call_weather2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Berlin", "unit": "celsius"}}},
]}
RESULT_SEARCH = {"role": "tool", "tool_call_id": "call_search01", "name": "search_docs", "content": "[\"doc1\", \"doc2\"]"}
RESULT_WEATHER = {"role": "tool", "tool_call_id": "call_weather2", "name": "get_weather", "content": "{\"temperature\": 18}"}
GEMMA_RESULT = {"role": "tool", "tool_responses": [{"name": "get_weather", "response": {"temperature": 21.5, "sky": "clear"}}]}
R_HIST1 = {"role": "assistant", "content": "Fine, thanks.", "reasoning_content": "The user greets me.\n"}
R_HIST2 = {"role": "assistant", "content": "<think>\nAdd two and two.\n</think>\n\nIt is 4."}
IMAGE_Q = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this image?"}]}
IMAGE_URL_Q = {"role": "user", "content": [{"type": "text", "text": "Compare with "}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}
SYS_PARTS = {"role": "system", "content": [{"type": "text", "text": "You are terse."}]}
DOCUMENTS = [{"title": "Weather", "text": "Paris is sunny today."}, {"title": "Notes", "text": "Köln: \"rain\""}]


def richer_conversations(base, template):
    convs = {
        "parallel_tools": [SYS, WEATHER_Q, PARALLEL, RESULT_SEARCH, RESULT_WEATHER, FINAL],
        "reasoning_history": [SYS, U1, R_HIST1, U2, R_HIST2, U1],
        "images": [IMAGE_Q, A1, IMAGE_URL_Q],
        "system_parts": [SYS_PARTS, U1],
    }
    if "tool_responses" in template:
        convs["gemma_tool_responses"] = [WEATHER_Q, CALL, GEMMA_RESULT]
    for name, msgs in convs.items():
        yield f"{name}/agp=True", dict(base, messages=msgs, add_generation_prompt=True)
    yield "parallel_tools/rich_tools", dict(base, messages=convs["parallel_tools"], add_generation_prompt=True,
                                            tools=RICH_TOOLS)
    yield "system/rich_tools_no_thinking", dict(base, messages=[SYS, U1], add_generation_prompt=True, tools=RICH_TOOLS,
                                                enable_thinking=False)
    if "truncate_history_thinking" in template:
        yield "reasoning_history/keep_thinking", dict(base, messages=convs["reasoning_history"],
                                                      add_generation_prompt=True, truncate_history_thinking=False,
                                                      enable_thinking=True)
    if "add_vision_id" in template:
        yield "images/vision_id", dict(base, messages=convs["images"], add_generation_prompt=True, add_vision_id=True)
    if "builtin_tools" in template:
        yield "tools/builtin_tools", dict(base, messages=[SYS, WEATHER_Q], add_generation_prompt=True, tools=TOOLS,
                                          builtin_tools=["brave_search", "wolfram_alpha", "code_interpreter"])
    if "documents" in template:
        yield "multi/documents", dict(base, messages=[SYS, U1, A1, U2], add_generation_prompt=True, documents=DOCUMENTS)
    for budget in (0, 512, 100000) if "thinking_budget" in template else ():
        yield f"multi/thinking_budget={budget}", dict(base, messages=[SYS, U1, A1, U2], add_generation_prompt=True,
                                                      thinking_budget=budget)
    for effort in ("low", "high") if "reasoning_effort" in template else ():
        yield f"tools/reasoning_effort={effort}", dict(base, messages=[SYS, WEATHER_Q, CALL, RESULT, FINAL],
                                                       add_generation_prompt=True, tools=TOOLS, reasoning_effort=effort)


def render(template, context):
    env = make_env(context)
    return env.from_string(template).render(**context)


def main():
    total = 0
    for src in sorted((FIXTURES / "src").glob("*.jinja")):
        template = src.read_text(encoding="utf-8")
        cases = []
        for label, ctx in conversations(template):
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
