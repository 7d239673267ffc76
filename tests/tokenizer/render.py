"""Chat-template oracle: renders chats with Python's jinja2 the way transformers renders a chat template.

Reads {"config": path of tokenizer_config.json, "chats": [{"messages": [...], "tools": [...]|null, "add_generation_prompt": bool,
"kwargs": {...}}]} on stdin and writes {"texts": [str, ...], "errors": [str|null, ...]}: a chat whose template raises (a
TemplateError, raise_exception's included, or a TypeError such as a string plus a dict) has "" as its text and the
exception as its error.

The environment follows transformers' utils/chat_template_utils.py (_compile_jinja_template): an
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension, a tojson
filter that does not escape HTML (json.dumps with ensure_ascii=False), and raise_exception as a global.
"""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def conversation_message(msg):
    """The message vLLM hands the template for a "string" content-format template, written from
    vllm/entrypoints/chat_utils.py (_parse_chat_message_content, _postprocess_messages)."""
    content = msg.get("content")
    if content is None:
        content = ""
    elif isinstance(content, list):
        content = "\n".join(p if isinstance(p, str) else p.get("text", p.get("refusal")) for p in content)
    out = {"role": msg["role"], "content": content}
    reasoning = msg.get("reasoning") or msg.get("reasoning_content")
    if msg["role"] == "assistant":
        calls = msg.get("tool_calls")
        if calls:
            out["tool_calls"] = []
            for call in calls:
                call = dict(call)
                fn = dict(call["function"])
                args = fn.get("arguments")
                if not args:
                    fn["arguments"] = {}
                elif not isinstance(args, (dict, list)):
                    fn["arguments"] = json.loads(args)
                call["function"] = fn
                out["tool_calls"].append(call)
        if reasoning is not None:
            out["reasoning"] = reasoning
            out["reasoning_content"] = reasoning
    elif msg["role"] == "tool" and "tool_call_id" in msg:
        out["tool_call_id"] = msg["tool_call_id"]
    if isinstance(msg.get("name"), str):
        out["name"] = msg["name"]
    return out


def main():
    req = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    with open(req["config"], encoding="utf-8") as f:
        config = json.load(f)
    tmpl = env.from_string(config["chat_template"])
    # transformers passes the special tokens map to the template (apply_chat_template).
    special = {}
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        tok = config.get(name)
        if isinstance(tok, dict):
            tok = tok.get("content")
        if tok:
            special[name] = tok
    texts, errors = [], []
    for chat in req["chats"]:
        kwargs = {**special, **(chat.get("kwargs") or {})}
        try:
            text = tmpl.render(messages=[conversation_message(m) for m in chat["messages"]], tools=chat.get("tools"),
                               add_generation_prompt=chat.get("add_generation_prompt", False), **kwargs)
        except (TemplateError, TypeError, ValueError, LookupError, AttributeError) as e:
            texts.append("")
            errors.append(f"{type(e).__name__}: {e}")
            continue
        texts.append(text)
        errors.append(None)
    json.dump({"texts": texts, "errors": errors}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
