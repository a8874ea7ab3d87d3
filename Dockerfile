# One image, two programs: colocation-webhook (the default entry point, `serve`) and colocation-agent
# (the DaemonSet sets `command: [colocation-agent]`).
#   docker build -t colocation-webhook:0.1.0 .
# For both platforms the lock files serve (linux/amd64 and linux/arm64: every pin has a wheel for each, with its hash;
# tests/test_lock.py), one multi-platform image:
#   docker buildx build --platform linux/amd64,linux/arm64 -t registry.example.com/colocation-webhook:0.1.0 --push .
# Nothing here names an architecture: python:3.11-slim is a multi-platform image, and each stage runs on the target
# platform (natively on a builder of that platform, or under QEMU emulation), so mypyc compiles for the platform the
# image runs on; that is why the build stage has no FROM --platform=$BUILDPLATFORM.
# The runtime stage mounts the build stage's wheels for its install step (RUN --mount, which needs BuildKit: Docker
# Engine's default builder since 23.0, DOCKER_BUILDKIT=1 on 20.10 to 22.x;
# https://docs.docker.com/reference/dockerfile/#run---mount), so no layer of the image holds a wheel.
ARG PYTHON_IMAGE=python:3.11-slim
# The release: pyproject.toml's version, the manifests' image tag and this label agree (tests/test_version.py).
ARG VERSION=0.1.0

# -- build: the build requirements as requirements-build.lock pins them (hashes checked), every dependency as the
#    wheels requirements.lock pins (hashes checked), then the project's own wheel, built with those build
#    requirements and nothing resolved anew (compilers only here: mypyc compiles the core and the rules, setup.py) --
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements.lock requirements-build.lock pyproject.toml setup.py README.md ./
RUN pip install --require-hashes --only-binary=:all: -r requirements-build.lock
RUN pip wheel --require-hashes --only-binary=:all: --wheel-dir /wheels -r requirements.lock \
 && cp requirements.lock /wheels/
COPY webhook ./webhook
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# -- runtime: wheels only, no compilers, no pip cache, no wheel left in a layer, a non-root user -----------------
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION
LABEL org.opencontainers.image.title="colocation-webhook" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN groupadd --system --gid 10001 colocation \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin colocation
# The locked versions (their hashes checked again), then the project alone: nothing is resolved anew here. The
# build stage's /wheels is mounted for this step only (read-only), never copied into a layer.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels --require-hashes -r /wheels/requirements.lock \
 && pip install --no-index --no-deps /wheels/colocation_webhook-*.whl
# The manifests run with runAsUser 10001 and a read-only root filesystem; nothing is written at run time.
USER 10001:10001
WORKDIR /tmp
# 8443: the webhook's HTTPS port (Service 443 -> 8443); 8080: the webhook's metrics port (plain HTTP);
# 9316: the agent's metrics port.
EXPOSE 8443 8080 9316
ENTRYPOINT ["colocation-webhook"]
CMD ["serve"]
