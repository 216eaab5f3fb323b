"""python -m scripts.fake_llm --port 8765: the demo model server (picobot.demo.llm) until Ctrl-C."""

from picobot.demo.llm.__main__ import main

if __name__ == "__main__":
    main()
