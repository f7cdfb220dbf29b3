"""What a request may ask: the endpoints' bodies, read and checked. Every OpenAI field is
done or refused with a 400 naming it (a Refusal, which the app answers with OpenAI's error
object); a field's no-op value (n=1, tools=[]) is accepted."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lazymlx.errors import LazymlxError
from lazymlx.sampling import LIMITS, check_sampling


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    include_obfuscation: bool = True  # accepted; no obfuscation padding is added


class Body(BaseModel):
    """The fields both endpoints honour; other fields are checked against FIELDS_NOT_DONE."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None  # any name: the one loaded model answers, and the reply names it
    # the values' limits are the one request check's (lazymlx/sampling.py, LIMITED_FIELDS)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    stop: str | list[str] | None = Field(default=None, max_length=4)
    stream: bool = False
    stream_options: StreamOptions | None = None
    lazy: str | None = None  # lazymlx: the pruning preset for this request


class ChatBody(Body):
    messages: list[dict[str, Any]] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class CompletionBody(Body):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=5)


# OpenAI fields this server does not do, with the values that ask for nothing (null always
# does): any other value is a 400 naming the field, never a 200 that ignores it
_NO_TOOLS = "does not call tools or functions; leave {} out"
_TEXT_ONLY = "writes text only; leave {} out"
FIELDS_NOT_DONE: dict[str, tuple[list[Any], str]] = {
    "n": ([1], "returns one choice per request; send n=1, or one request per choice"),
    "tools": ([[]], _NO_TOOLS),
    "tool_choice": (["none"], _NO_TOOLS),
    "functions": ([[]], _NO_TOOLS),
    "function_call": (["none"], _NO_TOOLS),
    "response_format": ([{"type": "text"}], _TEXT_ONLY),
    "audio": ([], _TEXT_ONLY),
    "modalities": ([["text"]], _TEXT_ONLY),
    "prediction": ([], "takes no predicted output; leave {} out"),
    "web_search_options": ([], "does not search the web; leave {} out"),
    "reasoning_effort": ([], "has no reasoning setting; leave {} out"),
    "verbosity": ([], "has no verbosity setting; leave {} out"),
    "store": ([False], "stores nothing; leave {} out"),
    "best_of": ([1], "returns one completion per request; leave {} out"),
    "echo": ([False], "does not echo the prompt; leave {} out"),
    "suffix": ([""], "does not insert text before a suffix; leave {} out"),
}
COMPLETIONS_ONLY = {"best_of", "echo", "suffix"}
# the fields checked by the one request check (lazymlx/sampling.py), as its names for them
LIMITED_FIELDS = {
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "temperature": "temp",
    **{name: name for name in ("top_p", "top_k", "min_p", "repetition_penalty")},
    **{name: name for name in ("presence_penalty", "frequency_penalty", "logit_bias", "seed")},
}
CHAT_ONLY = set(FIELDS_NOT_DONE) - COMPLETIONS_ONLY - {"n"}
# labels and hints that change no answer, accepted as OpenAI accepts them (parallel_tool_calls:
# there are no tools to call)
FIELDS_IGNORED = {"user"}
CHAT_FIELDS_IGNORED = FIELDS_IGNORED | {
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "parallel_tool_calls",
}


class Refusal(Exception):
    """A request the server answers with an OpenAI error object (and one log line)."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def _check_fields(body: Body, chat: bool) -> None:
    """Refuse fields this endpoint does not know or does not do (see FIELDS_NOT_DONE)."""
    others = COMPLETIONS_ONLY if chat else CHAT_ONLY
    ignored = CHAT_FIELDS_IGNORED if chat else FIELDS_IGNORED
    for name, value in (body.model_extra or {}).items():
        if name in FIELDS_NOT_DONE and name not in others:
            accepted, why = FIELDS_NOT_DONE[name]
            if value is not None and value not in accepted:
                raise Refusal(400, f"{name}: this server {why.format(name)}", name)
        elif name not in ignored:
            raise Refusal(400, f"unknown field {name!r}; remove it", name)
    if chat and body.top_logprobs and not body.logprobs:
        raise Refusal(400, "top_logprobs needs logprobs: true", "top_logprobs")


def _check_values(body: Body) -> None:
    """Refuse a sampling value, max_tokens or seed outside the one request check's limits
    (lazymlx/sampling.py: the CLI's, the chat's and `LLM`'s too), naming the field."""
    for field, name in LIMITED_FIELDS.items():
        try:
            check_sampling({name: getattr(body, field)}, spell=lambda _, field=field: field)
        except LazymlxError as bad:
            raise Refusal(400, str(bad), field) from None


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The chat as the template takes it: each content a string (OpenAI's text parts joined)."""
    rendered = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                if kind != "text":
                    raise Refusal(
                        400,
                        f"messages[{i}].content[{j}] is {'an' if str(kind)[:1] in 'aeiou' else 'a'} "
                        f"{kind!r} part; this server reads text parts only",
                        "messages",
                    )
            content = "".join(part.get("text", "") for part in content)
        text = "" if content is None else str(content)
        rendered.append({"role": message.get("role", "user"), "content": text})
    return rendered


def one_prompt(prompt: str | list[int] | list[str] | list[list[int]]) -> str | list[int]:
    """One prompt: text or token ids; a batch of several gets a 400 (one request each)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        if len(prompt) > 1:
            raise Refusal(
                400, "prompt: this server takes one prompt per request; send one each", "prompt"
            )
        return prompt[0]
    return prompt


async def read_body(request: Request, limit: int) -> bytearray:
    """The request's body, refused (413) past `limit` bytes, by its length or as it streams in
    (a chunked body has no length to check up front)."""
    size = int(request.headers.get("content-length") or 0)
    if size > limit:
        raise Refusal(413, f"the request is {size} bytes; the limit is {limit}")
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > limit:
            raise Refusal(413, f"the request is over the {limit}-byte limit")
    return raw


def parse_body(raw: bytes, schema: type[Body], chat: bool) -> Body:
    """The body as the endpoint's schema, refused (400) naming the first field that is wrong."""
    try:
        body = schema.model_validate(json.loads(raw))
    except ValidationError as bad:
        first = bad.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        limited = LIMITED_FIELDS.get(where)
        if limited in LIMITS:  # a number of the wrong type: the CLI's words for its limits
            message = f"{where} takes {LIMITS[limited].takes}; got {first['input']!r}"
            raise Refusal(400, message, where) from None
        why = "unknown field; remove it" if first["type"] == "extra_forbidden" else first["msg"]
        raise Refusal(400, f"{where}: {why}", where) from None
    except ValueError as bad:  # not JSON, or not UTF-8
        raise Refusal(400, f"the body is not valid JSON ({bad})") from None
    _check_fields(body, chat)
    _check_values(body)
    return body


def sampling_options(body: Body) -> dict[str, Any]:
    """The request's sampling, penalties and logit bias, as `LLM.submit` takes them."""
    return {
        "temp": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "min_p": body.min_p,
        "repetition_penalty": body.repetition_penalty,
        "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty,
        "logit_bias": body.logit_bias,
    }
