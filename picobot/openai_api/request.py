"""A `/v1/chat/completions` body, checked: hostile input becomes a 400 naming the bad field.

The body is parsed here, not by the web framework, so NaN/Infinity, bad UTF-8 and JSON nested
too deep are refused the same way everywhere. Unknown fields are ignored (clients send many:
temperature, tools, response_format …); tools always run server-side, as the agent decides.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from picobot.openai_api.errors import bad_request

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
MAX_MESSAGES = 1000
MAX_PARTS = 32  # the gateway's block limit (picobot/gateway/intake.py MAX_BLOCKS)
MAX_USER_CHARS = 256
SESSION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
CONTEXT_HEAD = "[Earlier messages of this conversation, sent by the client as context]"
CONTEXT_TAIL = "[End of earlier messages; the user's new message follows]"


@dataclass(frozen=True)
class ChatRequest:
    model: str
    input: list[dict[str, Any]]  # the last user message as our content blocks
    context: list[tuple[str, str]] = field(default_factory=list)  # (role, text) of the messages before it
    stream: bool = False
    include_usage: bool = False
    user: str | None = None

    def content(self, with_context: bool) -> list[dict[str, Any]]:
        """The input as content blocks, with the earlier messages as one leading text block when asked.

        Always blocks, never a string: a string starting with "/" would be a slash command to the
        gateway, and /v1 passes text to the agent as it is.
        """
        if not with_context or not self.context:
            return list(self.input)
        lines = [CONTEXT_HEAD] + [f"{role}: {text}" for role, text in self.context] + [CONTEXT_TAIL]
        return [{"type": "text", "text": "\n".join(lines)}] + list(self.input)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_body(raw: bytes) -> Any:
    """The JSON of the body; a 400 for anything that is not strict JSON."""
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise bad_request("The JSON body nests too deep.", code="invalid_json") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise bad_request(f"The body is not valid JSON: {str(exc)[:200]}", code="invalid_json") from None


def parse_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object.", code="invalid_body")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 128:
        raise bad_request('"model" must be a non-empty string naming an agent (see GET /v1/models).', "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request('"messages" must be a non-empty array of messages.', "messages")
    if len(messages) > MAX_MESSAGES:
        raise bad_request(f'"messages" may hold at most {MAX_MESSAGES} messages.', "messages")
    checked = [_message(m, i) for i, m in enumerate(messages)]
    last_user = max((i for i, (role, _) in enumerate(checked) if role == "user"), default=None)
    if last_user is None:
        raise bad_request('"messages" needs at least one message with role "user".', "messages")
    role, parts = checked[last_user]
    context = [(r, _text_of(p)) for r, p in checked[:last_user]]
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request('"stream_options" must be an object.', "stream_options")
    include_usage = _flag(options or {}, "include_usage", "stream_options.include_usage")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or not user or len(user) > MAX_USER_CHARS):
        raise bad_request(f'"user" must be a string of 1 to {MAX_USER_CHARS} characters.', "user")
    n = body.get("n")
    if n is not None and n != 1:
        raise bad_request('Only "n": 1 is supported.', "n")
    if not parts:
        raise bad_request(f"messages[{last_user}] has no content.", f"messages[{last_user}].content")
    if all(p["type"] == "text" and not p["text"].strip() for p in parts):  # blocks skip the gateway's own check
        raise bad_request("The message is empty.", f"messages[{last_user}].content", "empty")
    return ChatRequest(model.strip(), parts, context, stream, include_usage, user)


def _flag(body: dict[str, Any], key: str, param: str | None = None) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f'"{param or key}" must be true or false.', param or key)
    return value


def _message(message: Any, i: int) -> tuple[str, list[dict[str, Any]]]:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise bad_request(f"{where} must be an object with a role and content.", where)
    role = message.get("role")
    if role not in ROLES:
        shown = role[:40] if isinstance(role, str) else type(role).__name__
        raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}; got {shown!r}.", f"{where}.role")
    content = message.get("content")
    if content is None and role in ("assistant", "tool", "function"):
        return role, []  # an assistant message that only called tools
    return role, _parts(content, f"{where}.content")


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise bad_request(f"{where} must be a string or an array of content parts.", where)
    if len(content) > MAX_PARTS:
        raise bad_request(f"{where} may hold at most {MAX_PARTS} parts.", where)
    return [_part(p, f"{where}[{j}]") for j, p in enumerate(content)]


def _part(part: Any, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if isinstance(url, str):
            return {"type": "image_url", "url": url}
        raise bad_request(f'{where}.image_url must be {{"url": "https://..." or "data:image/...;base64,..."}}.',
                          f"{where}.image_url")
    raise bad_request(f'{where} must be {{"type": "text", "text": ...}} or '
                      f'{{"type": "image_url", "image_url": {{"url": ...}}}}.', where)


def _text_of(parts: list[dict[str, Any]]) -> str:
    return " ".join(p["text"] if p["type"] == "text" else "[image]" for p in parts)


def session_name(header: str | None, user: str | None) -> str | None:
    """The client's name for its dialog: the X-PicoBot-Session header, else one derived from `user`."""
    if header is not None:
        if not SESSION.match(header):
            raise bad_request("X-PicoBot-Session must be 1-64 letters, digits, '_', '.' or '-' "
                              "(send back the value a response carried).", "X-PicoBot-Session")
        return header
    if user is not None:
        return "u-" + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return None
