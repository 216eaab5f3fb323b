"""The demo model: a scriptable fake LLM server (OpenAI and Anthropic wire protocols), standard library only.

`picobot up --demo` runs it next to the stack so a newcomer sees streaming, a tool call and the web
UI without any key; the tests and benchmarks use it as their model (also as `scripts.fake_llm`).
"""
