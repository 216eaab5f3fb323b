"""The fake LLM server for tests, benchmarks and demos: it lives in the package as `picobot.demo.llm`
(so `picobot up --demo` has it wherever PicoBot is installed); this name stays for the checkout.

    python -m scripts.fake_llm --port 8765     # = python -m picobot.demo.llm --port 8765
"""

from picobot.demo.llm import FakeLLM  # noqa: F401 (re-exported)
from picobot.demo.llm import wire_anthropic, wire_openai  # noqa: F401 (re-exported)
