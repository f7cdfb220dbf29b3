"""`lazymlx serve`: an OpenAI-compatible HTTP server over one LLM (FastAPI on uvicorn).

Endpoints: POST /v1/chat/completions and /v1/completions (streamed as server-sent events when
"stream": true), GET /v1/models, /v1/models/{id} and /health. Requests queue on the LLM's
generation thread, one at a time, none lost; a client that disconnects mid-stream cancels its
request, freeing the thread. A conversation's next request reuses the kept context of its
previous one (the LLM's context pool), and `usage` says how many prompt tokens were cached, with
the TTFT. The pruning preset is the LLM's default or the request's own "lazy" field.

With an API key (`--api-key`, LAZYMLX_API_KEY) every endpoint asks for it, as OpenAI's does.
Every OpenAI request field is either done (sampling, penalties, logit bias, logprobs, stop, ...)
or refused with a 400 naming it; a field's no-op value (n=1, tools=[]) is accepted. Every error
reply is OpenAI's error object. Each request gets one log line when it ends; while a request
waits (a long prefill, a queue ahead) its prefill progress is logged and an open stream gets an
SSE keep-alive comment, as mlx-lm's server does, so clients with read timeouts stay.

The modules, in the order a request meets them:
- app: the FastAPI app (routes, API key, error replies), the socket, `serve`
- bodies: the request bodies, read and checked field by field (a Refusal when not done)
- endpoints: what chat and completions do: queue the request, answer whole or streamed
- pending: one request in flight: its responses, keep-alives, usage and log line
- logprobs: each token's text and bytes for the logprobs fields
"""
