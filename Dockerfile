# The agent-worker image: the `agent-worker` command (worker, api, tasks, replay) and the codec server
# (`python -m agent_worker.security.codec_server`), used by docker-compose.temporal.yml. It carries the extras
# the stack uses: sandbox tiers (docker, e2b), the fleet's stores (postgres, s3, redis), the HTTP API
# (api) and tracing (otel).
#
#   docker build -t agent-worker:local .
#   docker run --rm -e TEMPORAL_ADDRESS=host:7233 agent-worker:local worker --role all
#
# Any Debian-based image with Python >= 3.11 works as the base (BASE_IMAGE); the default is the
# official slim one. Dependencies are installed in a layer of their own, so a code change rebuilds
# only the last layers.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/agent-worker \
    PATH=/opt/agent-worker/bin:$PATH

# bubblewrap isolates the process sandbox tier where the container allows user namespaces; the
# worker falls back to a plain subprocess (and says so) where it does not.
# A base with Debian's own Python (not the official image's) also needs python3-venv.
RUN python3 -c 'import ensurepip' 2>/dev/null || venv_package=python3-venv; \
    apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap ca-certificates ${venv_package:-} \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv "$VIRTUAL_ENV"

WORKDIR /src

# Dependencies first (from pyproject.toml alone): this layer survives code changes.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
extras = [r for name in ('docker', 'e2b', 'postgres', 's3', 'redis', 'api', 'otel') for r in p['optional-dependencies'][name]]; \
print(chr(10).join(p['dependencies'] + extras))" > /tmp/requirements.txt
RUN pip install -r /tmp/requirements.txt

# The package itself.
COPY . .
RUN pip install --no-deps . \
    && agent-worker --help > /dev/null \
    && cd / && rm -rf /src /tmp/requirements.txt

# Never root: uid 10001 owns only the data dir (a volume in compose).
RUN useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin agent \
    && mkdir -p /data \
    && chown agent:agent /data
USER agent
WORKDIR /data
ENV AGENT_WORKER_DATA_DIR=/data

ENTRYPOINT ["agent-worker"]
CMD ["worker", "--role", "all"]
