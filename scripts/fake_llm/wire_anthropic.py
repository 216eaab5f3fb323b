"""Moved to picobot.demo.llm.wire_anthropic (re-exported for the checkout's tests)."""

from picobot.demo.llm.wire_anthropic import *  # noqa: F401,F403
from picobot.demo.llm.wire_anthropic import signature_for  # noqa: F401
