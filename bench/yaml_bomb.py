#!/usr/bin/env python3
"""Alias bombs against the YAML reader (issue 41, ``webhook/cluster/yaml_input.py``): time and peak memory.

Each case runs in a child process of its own, which loads one file as ``review FILE`` (``load_all``, also what
``--cluster-state`` and ``policies --check`` read through) or as ``audit -f FILE`` (``objects``: the streamed
List) and reports how long the load took; its peak resident memory is the child's ``ru_maxrss`` as ``wait4``
returns it, less that of a child that only imports the same modules ("extra"). The cases: the "billion laughs"
(harness/yaml_bombs.py) at 8, 9 and 10 levels, all refused, and an ordinary List of N pods as ``kubectl get pods
-o yaml`` prints it (bench/audit_files.py's), loaded by the reader and by the loader every input used before it
(``yaml.load_all`` with PyYAML's C loader; for bombs up to ``--before`` levels, then serialized as ``review``
did next, where the blow-up came), also with one ``&`` in a container's command (``a && b``): a text
with an ``&`` may hold an anchor, so it is composed with the aliases counted.

    python bench/yaml_bomb.py [--levels 8,9,10] [--pods 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.audit_files import write_list  # noqa: E402
from harness.yaml_bombs import bomb  # noqa: E402


def child(mode: str, path: str) -> int:
    """Load ``path`` as ``mode`` says and print "seconds outcome"."""
    import yaml

    from webhook.audit.files import ObjectsError, objects
    from webhook.cluster.yaml_input import load_all, yaml_problem

    start = time.perf_counter()
    try:
        if mode == "review":
            outcome = f"{len(load_all(Path(path).read_text()))} document(s)"
        elif mode == "audit":
            outcome = f"{sum(1 for _ in objects([path]))} object(s)"
        elif mode in ("old", "old+dump"):
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            docs = list(yaml.load_all(Path(path).read_text(), Loader=loader))
            outcome = f"{len(docs)} document(s)"
            if mode == "old+dump":  # what review did next: the object as the request it would be, to size it
                import orjson

                outcome += f", {sum(len(orjson.dumps(d)) for d in docs):,} bytes serialized"
        else:
            outcome = "imports only"
    except yaml.YAMLError as exc:
        outcome = yaml_problem(Path(path).name, exc)
    except ObjectsError as exc:
        outcome = str(exc).replace(str(Path(path).parent) + "/", "")
    print(f"{time.perf_counter() - start:.4f} {outcome}")
    return 0


def run(mode: str, path: Path) -> tuple[float, float, str]:
    """(seconds to load, peak RSS MiB, outcome) of one child."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, __file__, "--child", mode, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()  # a line each way: no pipe fills
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own usage (RUSAGE_CHILDREN is the largest so far)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{mode} {path.name}: exit {proc.returncode}: {err[-2000:]}")
    seconds, _, outcome = out.strip().partition(" ")
    return float(seconds), usage.ru_maxrss / 1024, outcome


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="8,9,10", help="bomb levels, comma-separated")
    ap.add_argument("--pods", type=int, default=10000, help="pods in the ordinary List")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each ordinary-file case (the fastest is shown)")
    ap.add_argument("--before", type=int, default=8, help="bombs up to this many levels also loaded as before "
                    "(the old loader, then serialized as review did: 9 levels take GBs)")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    print(f"machine: {os.cpu_count()} CPUs; each case its own process; peak RSS from wait4; "
          "extra = peak - a child that only imports")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _, base, _ = run("none", folder)
        print(f"{'case':<34} {'load':>10} {'load s':>8} {'peak MiB':>9} {'extra MiB':>10}  outcome")
        for levels in (int(x) for x in args.levels.split(",")):
            path = folder / f"bomb-{levels}.yaml"
            path.write_text(bomb(levels))
            for mode in ("review", "audit", *(("old+dump",) if levels <= args.before else ())):
                seconds, peak, outcome = run(mode, path)
                name = f"bomb, {levels} levels ({path.stat().st_size} B)"
                print(f"{name:<34} {mode:>10} {seconds:>8.4f} {peak:>9.1f} {peak - base:>10.1f}  {outcome[:110]}")
        plain = folder / "pods.yaml"
        write_list(plain, args.pods, "yaml")
        ampersand = folder / "pods-ampersand.yaml"
        text = plain.read_text()
        image = re.search(r"^( *)(- )?image: ", text, flags=re.M)
        assert image is not None
        at = image.start()
        indent = image.group(1) + ("  " if image.group(2) else "")
        ampersand.write_text(f"{text[:at]}{image.group(1)}{image.group(2) or ''}command: [sh, -c, 'a && b']\n"
                             f"{indent}{text[at + len(image.group(1)) + len(image.group(2) or ''):]}")
        size = plain.stat().st_size / 2**20
        for path, label in ((plain, f"{args.pods} pods ({size:.0f} MiB)"), (ampersand, "the same, one '&'")):
            for mode in ("old", "review", "audit"):
                runs = [run(mode, path) for _ in range(args.repeats)]
                seconds, peak, outcome = min(runs)
                shown = "old loader" if mode == "old" else mode
                print(f"{label:<34} {shown:>10} {seconds:>8.2f} {peak:>9.1f} {peak - base:>10.1f}  {outcome}")
    print("target: a bomb refused in well under a second and under 50 MiB extra; the ordinary file no slower")
    return 0


if __name__ == "__main__":
    sys.exit(main())
