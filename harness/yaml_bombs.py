"""YAML alias bombs ("billion laughs") for tests/ and bench/: a few hundred bytes whose aliases expand to billions of
values (issue 41). kube-apiserver refuses them since CVE-2019-11253 (go.yaml.in/yaml/v2/decode.go, "excessive
aliasing"; staging/src/k8s.io/apimachinery/pkg/runtime/serializer/yaml/yaml_test.go holds the same shape)."""

from __future__ import annotations

import string


def bomb(levels: int = 9, width: int = 9) -> str:
    """A Pod whose ``metadata.annotations`` hold ``levels`` nested anchors, each a list of ``width`` aliases of the
    one before (the first of ``width`` strings): ``width ** levels`` strings once expanded (9: 387 420 489)."""
    names = string.ascii_lowercase
    lol = '"lol"'
    lines = ["apiVersion: v1", "kind: Pod", "metadata:", "  name: lol", "  annotations:",
             f"    a: &a [{','.join([lol] * width)}]"]
    lines += [f"    {names[i]}: &{names[i]} [{','.join(['*' + names[i - 1]] * width)}]" for i in range(1, levels)]
    lines += ["spec:", "  containers:", "  - {name: lol, image: busybox}"]
    return "\n".join(lines) + "\n"


def alias_lines(text: str) -> set[int]:
    """The lines (1-based) of ``text`` that hold an alias."""
    return {n for n, line in enumerate(text.splitlines(), 1) if "*" in line}
