# One image, two programs: colocation-webhook (the default entry point, `serve`) and colocation-agent
# (the DaemonSet sets `command: [colocation-agent]`).
#   docker build -t colocation-webhook:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

# -- build: every dependency as the wheels requirements.lock pins (hashes checked), then the project's own wheel
#    (compilers only here: mypyc compiles the core and the rules, setup.py) -------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements.lock pyproject.toml setup.py README.md ./
COPY webhook ./webhook
RUN pip wheel --require-hashes --only-binary=:all: --wheel-dir /wheels -r requirements.lock \
 && cp requirements.lock /wheels/
RUN pip wheel --no-deps --wheel-dir /wheels .

# -- runtime: wheels only, no compilers, no pip cache, a non-root user ---------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN groupadd --system --gid 10001 colocation \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin colocation
COPY --from=build /wheels /wheels
# The locked versions (their hashes checked again), then the project alone: nothing is resolved anew here.
RUN pip install --no-index --find-links=/wheels --require-hashes -r /wheels/requirements.lock \
 && pip install --no-index --no-deps /wheels/colocation_webhook-*.whl \
 && rm -rf /wheels
# The manifests run with runAsUser 10001 and a read-only root filesystem; nothing is written at run time.
USER 10001:10001
WORKDIR /tmp
# 8443: the webhook's HTTPS port (Service 443 -> 8443); 8080: the webhook's metrics port (plain HTTP);
# 9316: the agent's metrics port.
EXPOSE 8443 8080 9316
ENTRYPOINT ["colocation-webhook"]
CMD ["serve"]
