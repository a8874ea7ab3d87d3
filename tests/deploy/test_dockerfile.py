"""The Dockerfile, without a container engine: its structure parsed, and its install steps run in a
fresh venv (the project's wheel built as the build stage builds it, once per test run and shared with
tests/test_compiled.py, installed as the runtime stage installs it, then both entry points run from the fresh
venv)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import venv
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.builds import BUILD_TIMEOUT, CONTEXT, WHEEL_STEP
from webhook.compiled import COMPILED_MODULES, compiler_missing

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = ("build-essential", "gcc", "g++", "clang", "make", "cc ", "python3-dev", "libc6-dev")


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, op: str) -> list[str]:
        return [args for o, args in self.instructions if o == op]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Instructions by stage, with line continuations joined and ``${ARG}`` resolved in FROM."""
    logical, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        op, _, rest = line.strip().partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k] = v
        elif op == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert m, f"unparsable FROM {rest!r}"
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda g: args[g.group(1) or g.group(2)], m.group(1))
            stages.append(Stage(base, m.group(2) or str(len(stages))))
        else:
            assert stages, f"{op} before FROM"
            stages[-1].instructions.append((op, rest))
    return args, stages


def run_options(run: str) -> tuple[list[dict[str, str]], str]:
    """A RUN's mounts (``--mount=type=bind,from=build,...``, BuildKit's) and its command."""
    mounts: list[dict[str, str]] = []
    while run.startswith("--"):
        option, _, run = run.partition(" ")
        run = run.lstrip()
        name, _, value = option[2:].partition("=")
        assert name == "mount", f"a RUN option this test does not know: {option}"
        mounts.append(dict(kv.partition("=")[::2] for kv in value.split(",")))
    return mounts, run


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse((ROOT / "Dockerfile").read_text())[1]


def _scripts() -> dict[str, str]:
    scripts: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return scripts


def test_parser_handles_continuations() -> None:
    _, st = parse("ARG B=x:1\nFROM ${B} AS one\nRUN a \\\n  && b\n# c\nFROM one\nUSER 1\n")
    assert [(s.base, s.name) for s in st] == [("x:1", "one"), ("one", "1")]
    assert st[0].all("RUN") == ["a    && b"]
    assert run_options("--mount=type=bind,from=one,source=/w,target=/w  a && b") == (
        [{"type": "bind", "from": "one", "source": "/w", "target": "/w"}], "a && b")


def test_multi_stage_on_python_311_slim(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    assert all(s.base == "python:3.11-slim" for s in stages)
    build, final = stages[0], stages[-1]
    assert any("pip wheel" in r for r in build.all("RUN")), "wheels are built in the first stage"
    # The runtime stage installs from the build stage's wheels alone.
    assert any(run_options(r)[1].startswith("pip install --no-index") for r in final.all("RUN"))


def test_no_wheel_is_left_in_a_layer(stages: list[Stage]) -> None:
    """The runtime stage copies nothing from the build stage: its install step mounts the wheels (read-only, for that
    step alone), so no layer of the image holds them, not even one a later ``rm`` hides."""
    build, final = stages[0], stages[-1]
    for op in ("COPY", "ADD"):
        for copy in final.all(op):
            assert f"--from={build.name}" not in copy and "wheel" not in copy and ".whl" not in copy, copy
    installs = [run_options(r) for r in final.all("RUN") if "pip install" in r]
    assert installs, "the runtime stage installs"
    for mounts, command in installs:
        wheels = [m for m in mounts if m.get("target") == "/wheels"]
        assert wheels == [{"type": "bind", "from": build.name, "source": "/wheels", "target": "/wheels"}], mounts
        assert "rm " not in command, "nothing to remove: the wheels were never in the layer"


def test_no_compilers_in_the_final_image(stages: list[Stage]) -> None:
    final = stages[-1]
    assert final.base != stages[0].name  # not built on top of the build stage
    for run in final.all("RUN"):
        assert "apt-get install" not in run and "apk add" not in run, run
        assert not any(c in run for c in COMPILERS), run


def test_non_root_user(stages: list[Stage]) -> None:
    users = stages[-1].all("USER")
    assert users, "the final stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    # The webhook runs as that uid (runAsUser), with runAsNonRoot. (The agent overrides it with uid 0: it writes
    # the host's root-owned cgroup files; test_deploy_manifests checks what else it keeps.)
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/webhook.yaml").read_text())
            if d and d["kind"] == "Deployment"]
    assert {str(d["spec"]["template"]["spec"]["securityContext"]["runAsUser"]) for d in docs} == {user}


def test_expose_and_entrypoint_match_the_manifests(stages: list[Stage]) -> None:
    final = stages[-1]
    exposed = {int(p.split("/")[0]) for e in final.all("EXPOSE") for p in e.split()}
    ports, commands = set(), set()
    for f in ("webhook.yaml", "agent.yaml"):
        for d in yaml.safe_load_all((ROOT / "manifests/base" / f).read_text()):
            if d and d["kind"] in ("Deployment", "DaemonSet"):
                for c in d["spec"]["template"]["spec"]["containers"]:
                    ports |= {p["containerPort"] for p in c["ports"]}
                    commands.add(c["command"][0])
    assert exposed == ports == {8443, 8080, 9316}
    (entrypoint,) = final.all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["colocation-webhook"]  # exec form
    assert json.loads(final.all("CMD")[-1]) == ["serve"]
    assert commands == set(_scripts()) == {"colocation-webhook", "colocation-agent"}


def _dockerignore_allows(rel: str) -> bool:
    allowed = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        pat = line.lstrip("!").rstrip("/")
        if pat == "*" or rel == pat or rel.startswith(pat + "/"):
            allowed = neg
    return allowed


def test_the_image_installs_the_locked_versions_then_the_project(stages: list[Stage]) -> None:
    """Dependencies come from requirements.lock alone, every file's hash checked, in both stages; the project's
    wheel is built and installed without resolving anything (tests/test_lock.py: the lock and pyproject agree)."""
    build, final = stages[0], stages[-1]
    steps = [shlex.split(part) for run in build.all("RUN") for part in run_options(run)[1].split("&&")]
    assert ["pip", "wheel", "--require-hashes", "--only-binary=:all:", "--wheel-dir", "/wheels", "-r",
            "requirements.lock"] in steps, "the build stage fetches the locked wheels, hashes checked"
    assert list(WHEEL_STEP) in steps, "then builds the project's wheel alone (tests/builds.py runs that step)"
    assert any("requirements.lock" in shlex.split(c)[:-1] for c in build.all("COPY"))
    (install,) = [run_options(r)[1] for r in final.all("RUN") if "pip install" in r]
    first, second = (shlex.split(p) for p in install.split("&&")[:2])
    assert first == ["pip", "install", "--no-index", "--find-links=/wheels", "--require-hashes", "-r",
                     "/wheels/requirements.lock"]
    assert second == ["pip", "install", "--no-index", "--no-deps", "/wheels/colocation_webhook-*.whl"]


def test_the_build_requirements_are_locked_too(stages: list[Stage]) -> None:
    """What builds the project's wheel (setuptools, mypy and what mypyc compiles against: pyproject's
    [build-system] requires) is installed from requirements-build.lock, every file's hash checked, before the
    wheel is built with it and nothing else: no isolated build environment resolving the newest versions anew."""
    build = stages[0]
    steps = [shlex.split(part) for run in build.all("RUN") for part in run_options(run)[1].split("&&")]
    locked = ["pip", "install", "--require-hashes", "--only-binary=:all:", "-r", "requirements-build.lock"]
    assert locked in steps, "the build stage installs the locked build requirements, hashes checked"
    assert any("requirements-build.lock" in shlex.split(c)[:-1] for c in build.all("COPY"))
    assert steps.index(locked) < steps.index(list(WHEEL_STEP)), "installed before the wheel is built"
    builds = [s for s in steps if s[:2] in (["pip", "wheel"], ["pip", "install"]) and "." in s]
    assert builds == [list(WHEEL_STEP)] and "--no-build-isolation" in WHEEL_STEP, builds


@pytest.mark.timeout(BUILD_TIMEOUT * 5 // 4)  # the first test to ask for the wheel waits for its build
def test_install_steps_in_a_fresh_venv(stages: list[Stage], project_wheel: Path, tmp_path: Path) -> None:
    """The build context from the COPY lines, the project's wheel as the build stage builds it (the run's one
    build, tests/builds.py; dependencies are those of the running environment), the runtime stage's install of
    it, then the entry points from the fresh venv."""
    build, final = stages[0], stages[-1]
    copied = set()
    for copy in build.all("COPY"):
        *sources, _ = shlex.split(copy)
        for s in sources:
            assert _dockerignore_allows(s), f".dockerignore excludes {s}, which COPY needs"
            assert (ROOT / s).exists(), f"COPY source {s} is missing from the checkout"
            copied.add(s.rstrip("/"))
    assert copied == {"requirements.lock", "requirements-build.lock", *CONTEXT}, \
        "the build stage copies the locks and what tests/builds.py builds from"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=False)
    py = fresh / "bin" / "python"
    site = Path(subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    # Dependencies come from the running environment: a folder of links to its site-packages, less this
    # project (often installed there in editable mode), appended after the venv's own site-packages.
    deps = tmp_path / "deps"
    deps.mkdir()
    for sp in (Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()):
        for entry in sp.iterdir():
            name = entry.name.lower()
            if name.startswith(("colocation_webhook", "__editable__", "webhook", "_deps_")) or name.endswith(".pth"):
                continue
            if not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (site / "_deps_from_test_env.pth").write_text(f"{deps}\n")
    (install_run,) = [r for r in final.all("RUN") if "pip install" in r]
    step = shlex.split(install_run.split("&&")[1])
    assert step[:2] == ["pip", "install"]
    step = [str(project_wheel) if a == "/wheels/colocation_webhook-*.whl" else a for a in step[2:]]
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", *step],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr

    # The programs run from the installed wheel, not from the checkout.
    where = subprocess.run([py, "-c", "import webhook, webhook.cli.agent; print(webhook.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(site)
    assert (site / "webhook" / "cluster" / "example" / "state.yaml").is_file(), "package data in the wheel"
    # The build stage has a compiler (build-essential), so the image runs the core and the rules compiled
    # (setup.py); built here without one, the wheel is the same code as plain Python, and says why.
    plain = subprocess.run([py, "-c", "import webhook.compiled as c; "
                                      "print(len([m for m in c.COMPILED_MODULES if not c.is_compiled(m)]))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert int(plain.stdout) == (0 if compiler_missing() is None else len(COMPILED_MODULES)), compiler_missing()
    for script in _scripts():
        assert (fresh / "bin" / script).is_file(), script
        version = subprocess.run([fresh / "bin" / script, "--version"], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=60)
        assert version.returncode == 0 and version.stderr == "", version.stderr
        assert version.stdout.splitlines()[1] == ("rules: compiled with mypyc" if compiler_missing() is None else
                                                  f"rules: plain Python (built with {compiler_missing()})")
    help_out = subprocess.run([fresh / "bin" / "colocation-webhook", "--help"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
    assert help_out.returncode == 0 and "certs" in help_out.stdout, help_out.stderr
    agent = subprocess.run([fresh / "bin" / "colocation-agent", "--help"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert "Traceback" not in agent.stderr, agent.stderr
    assert project_wheel.name.startswith("colocation_webhook-")


ARCHITECTURES = re.compile(r"x86_64|amd64|aarch64|arm64|i[3-6]86|armv\d|ppc64|s390x", re.IGNORECASE)


def neutral_findings(text: str) -> list[str]:
    """What ties a Dockerfile to one platform: an architecture named outside a comment, a FROM with a --platform
    (the build stage compiles for the target: it runs on it), a platform-specific base."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        if ARCHITECTURES.search(line):
            found.append(f"{n}: names an architecture: {line.strip()}")
        if re.match(r"\s*FROM\s+--platform", line, re.IGNORECASE):
            found.append(f"{n}: a stage pinned to a platform: {line.strip()}")
    return found


def test_the_dockerfile_builds_for_both_platforms() -> None:
    """`docker buildx build --platform linux/amd64,linux/arm64` (the Dockerfile's header says so): nothing names an
    architecture, every install is wheels only with hashes (tests/test_lock.py: each pin has a wheel for both)."""
    text = (ROOT / "Dockerfile").read_text()
    assert neutral_findings(text) == []
    assert "docker buildx build --platform linux/amd64,linux/arm64" in text
    assert neutral_findings("FROM --platform=linux/amd64 python:3.11-slim\n# aarch64 is fine here\n"
                            "COPY lib/x86_64-linux-gnu/libfoo.so /usr/lib/\n") == [
        "1: names an architecture: FROM --platform=linux/amd64 python:3.11-slim",
        "1: a stage pinned to a platform: FROM --platform=linux/amd64 python:3.11-slim",
        "3: names an architecture: COPY lib/x86_64-linux-gnu/libfoo.so /usr/lib/"]


def test_the_image_is_labelled_with_its_version_and_licence(stages: list[Stage]) -> None:
    args, _ = parse((ROOT / "Dockerfile").read_text())
    assert args["VERSION"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    labels = " ".join(stages[-1].all("LABEL"))
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels
