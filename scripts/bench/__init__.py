"""PicoBot benchmarks: overhead, concurrency, cpu, memory (see docs/BENCHMARKS.md).

Each runs against a real stack (own redis-server, gunicorn web, Celery worker, beat) and a fake LLM
in its own process:

    .venv/bin/python -m scripts.bench.overhead
    .venv/bin/python -m scripts.bench.concurrency
    .venv/bin/python -m scripts.bench.cpu
    .venv/bin/python -m scripts.bench.memory
    .venv/bin/python -m scripts.bench.run_all      # all four, then a summary table
"""
