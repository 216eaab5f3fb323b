"""A scriptable fake LLM server speaking the OpenAI Chat Completions and Anthropic Messages protocols.

Run it:

    python -m picobot.demo.llm --port 8765           # or: python -m scripts.fake_llm (a checkout)
    # OpenAI-compatible base URL:  http://127.0.0.1:8765/v1
    # Anthropic base URL:          http://127.0.0.1:8765

or in-process (tests):

    from picobot.demo.llm import FakeLLM
    llm = FakeLLM(host="127.0.0.1", port=0).start()
    ... llm.url, llm.openai_url, llm.add_rule(...), llm.requests(), llm.reset() ...
    llm.stop()

Endpoints
    POST /v1/chat/completions   OpenAI (JSON, or SSE with `stream: true`; usage chunk when
                                stream_options.include_usage; ends with `data: [DONE]`)
    POST /v1/messages           Anthropic (JSON, or SSE: message_start, content_block_*, message_delta,
                                message_stop; thinking + signature_delta; tool_use + input_json_delta)
    GET  /v1/models             a model list both SDKs parse
    POST /v1/audio/transcriptions  OpenAI speech to text (multipart): the transcript is the text after a
                                `SAY:` marker in the uploaded bytes (audio.py)
    POST /v1/audio/speech       OpenAI text to speech: `opus` is a real Ogg Opus file (silence), other
                                formats WAV
Malformed requests get the provider's 400 error (missing max_tokens, unanswered tool calls, ...).

Control API
    POST   /_fake/rules     {"match": "<substring of the last user message text> | null",
                             "responses": [<response>, ...], "repeat": false}
                            appends a rule. A request takes the next response of the first rule whose
                            match is in its last user message text (tool results after it do not
                            count); a rule is removed when used up, unless repeat (then it cycles).
    GET    /_fake/rules     the rules left
    DELETE /_fake/rules     clears rules and recorded requests (POST /_fake/reset does the same)
    GET    /_fake/requests  {"requests": [{"time", "protocol", "path", "headers", "auth", "body"}]}:
                            authorization / x-api-key values read "<redacted>"; auth holds the sha256
                            of the key each of them carried (Bearer prefix stripped), or null.

<response> (all keys optional):
    "content": "text"                    streamed word by word
    "reasoning": "thinking text"         OpenAI reasoning_content / Anthropic thinking (+ signature)
    "redacted_thinking": "opaque"        Anthropic redacted_thinking block
    "tool_calls": [{"name": "calculator", "arguments": {...} or "raw json text"}]
    "finish_reason": "stop|length|tool_calls|<raw, e.g. model_context_window_exceeded>"
    "usage": {"input_tokens": N, "output_tokens": N}   (default: estimated from text length;
                                         "cached_input_tokens": N adds OpenAI's prompt_tokens_details)
    "delay_ms": 0                        before the response starts
    "chunk_delay_ms": 0                  between stream chunks
    "error": {"status": 429, "message": "...", "type": "...", "retry_after": 0}
                                         HTTP error in the provider's format (429 sends Retry-After: 0
                                         unless retry_after says otherwise)
    "context_length_error": true         the provider's real context-overflow error
    "drop_after_chunks": N               send N stream chunks, then cut the connection
                                         (non-streaming: cut before any response)
    "stream_error": {"after_chunks": N, "message": "...", "type": "..."}
                                         an in-stream error event after N chunks
    "linger_ms": 0                       keep the streamed body open this long after the last event
                                         (a slow proxy) before ending it

Without a matching rule (demo mode): if tools are offered and the conversation ends with a user
message, an arithmetic expression calls `calculator` {"expression": ...}, a mention of time/date calls
`get_time` {}; otherwise the reply is "You said: <text>". After tool results the reply is
"The tool <name> returned: <result>". A response without content keys (e.g. only "delay_ms") also
gives the demo reply.
"""

from __future__ import annotations

from picobot.demo.llm.server import FakeLLM

__all__ = ["FakeLLM"]
