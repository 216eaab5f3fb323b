"""python -m picobot.demo.llm --port 8765 (also: python -m scripts.fake_llm): run the fake LLM server until Ctrl-C."""

from __future__ import annotations

import argparse
import threading

from picobot.demo.llm.server import FakeLLM


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m picobot.demo.llm", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    llm = FakeLLM(args.host, args.port, verbose=args.verbose).start()
    print(f"demo model (fake LLM) listening: OpenAI base URL {llm.openai_url}, Anthropic base URL {llm.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        llm.stop()


if __name__ == "__main__":
    main()
