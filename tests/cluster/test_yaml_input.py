"""The one YAML reader refuses what kube-apiserver refuses for its aliases, exactly where go-yaml would, and reads
everything else as PyYAML does (issue 41). The reference is go-yaml's decoder written out here as it is, aliases
expanded node by node (go.yaml.in/yaml/v2/decode.go, ``unmarshal``, ``alias``, ``mapping``, ``merge``), and
``kubectl`` where it is on PATH: its go-yaml says ``excessive aliasing`` of a file before it asks any server."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.yaml_bombs import alias_lines, bomb
from webhook.cluster import yaml_input
from webhook.cluster.yaml_input import EXCESSIVE, Refused, yaml_problem

C_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# -- go-yaml's decoder, written out ----------------------------------------------------------------------------------
class _Tripped(Exception):
    def __init__(self, aliased: int, decoded: int, line: int) -> None:
        self.aliased, self.decoded, self.line = aliased, decoded, line


def _tree(text: str) -> tuple[Any, dict[str, Any]]:
    """The first document as go-yaml's parser sees it: ("alias", name, line) kept, not resolved."""
    anchors: dict[str, Any] = {}
    stack: list[list[Any]] = [[]]
    node: Any
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent):
            stack[-1].append(("alias", event.anchor, line))
        elif isinstance(event, yaml.ScalarEvent):
            node = ("scalar", event.value, event.tag, event.implicit[0], line)
            stack[-1].append(node)
            if event.anchor:
                anchors[event.anchor] = node
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            children: list[Any] = []
            node = ("seq" if isinstance(event, yaml.SequenceStartEvent) else "map", children, line)
            stack[-1].append(node)
            stack.append(children)
            if event.anchor:
                anchors[event.anchor] = node
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            stack.pop()
    return ("doc", stack[0][0], 0), anchors


def _ratio(decoded: int) -> float:  # allowedAliasRatio
    if decoded <= 400000:
        return 0.99
    if decoded >= 4000000:
        return 0.10
    return 0.99 - 0.89 * (float(decoded - 400000) / float(4000000 - 400000))


def go_yaml(text: str) -> tuple[int, int, int] | None:
    """(aliased, decoded, line) where go-yaml stops with excessive aliasing, or None where it decodes the first
    document; the line is the node's, or inside an alias's expansion, the outermost alias's."""
    doc, anchors = _tree(text)
    state = {"decoded": 0, "aliased": 0, "depth": 0, "line": 0}

    def unmarshal(n: Any) -> None:
        state["decoded"] += 1
        if state["depth"] > 0:
            state["aliased"] += 1
        else:
            state["line"] = n[-1]
        a, d = state["aliased"], state["decoded"]
        if a > 100 and d > 1000 and float(a) / float(d) > _ratio(d):
            raise _Tripped(a, d, state["line"])
        if n[0] == "doc":
            unmarshal(n[1])
        elif n[0] == "alias":
            state["depth"] += 1
            unmarshal(anchors[n[1]])
            state["depth"] -= 1
        elif n[0] == "seq":
            for child in n[1]:
                unmarshal(child)
        elif n[0] == "map":
            pairs = n[1]
            for k, v in zip(pairs[::2], pairs[1::2], strict=True):
                if k[0] == "scalar" and k[1] == "<<" and (k[3] or k[2] == "tag:yaml.org,2002:merge"):
                    merge(v)
                else:
                    unmarshal(k)
                    unmarshal(v)

    def merge(n: Any) -> None:
        if n[0] == "seq":
            for child in reversed(n[1]):
                unmarshal(child)
        else:
            unmarshal(n)

    try:
        unmarshal(doc)
    except _Tripped as trip:
        return trip.aliased, trip.decoded, trip.line
    return None


def ours(text: str) -> tuple[int, int, int] | None:
    """The same, as the reader says it: (aliased, decoded, line) from its message, or None where it loads."""
    try:
        yaml_input.load_all(text)
    except Refused as exc:
        message = yaml_problem("f", exc)
        assert EXCESSIVE in message, message
        words = message.split("(")[1].split()
        return int(words[0].replace(",", "")), int(words[4].replace(",", "")), int(message.split(":")[1])
    return None


KUBECTL = shutil.which("kubectl")


def kubectl_refuses(tmp_path: Path, text: str) -> bool:
    """Whether kubectl's go-yaml says excessive aliasing of ``text`` (it decodes the file before it asks for the
    server, which the empty kubeconfig does not name)."""
    assert KUBECTL is not None
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    done = subprocess.run([KUBECTL, "create", "--dry-run=client", "--validate=false", "-o", "name", "-f", str(path),
                           "--kubeconfig", "/dev/null", "--request-timeout", "1s"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert EXCESSIVE in done.stderr or "Object 'Kind' is missing" in done.stderr, done.stderr[:500]  # decoded
    return EXCESSIVE in done.stderr


# -- documents near the budget ---------------------------------------------------------------------------------------
def aliases_of_a_list(count: int, width: int = 200, plain: int = 0) -> str:
    """``plain`` plain values, then a list of ``width`` values anchored, then ``count`` aliases of it."""
    return (f"p: [{', '.join(['0'] * plain)}]\n" if plain else "") + \
        f"a: &a [{', '.join(['0'] * width)}]\nb: [{', '.join(['*a'] * count)}]\n"


def first_refused(make: Any, low: int, high: int) -> int:
    """The smallest count ``make(count)`` the reader refuses, between ``low`` (loads) and ``high`` (refused)."""
    assert ours(make(low)) is None and ours(make(high)) is not None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if ours(make(mid)) is not None else (mid, high)
    return high


# A merged sequence: go-yaml decodes its maps last to first. With the alias last in the file, it is decoded first,
# before the plain map that would otherwise keep the share of aliased nodes under 99 %. (``a`` is 97 wide: its
# aliases alone stay under 99 %, 98 of every 99 nodes.)
def merged(count: int, plain: int = 500, alias_last: bool = True) -> str:
    maps = [f"{{{', '.join(f'k{i}: 0' for i in range(plain))}}}", "{big: *b}"]
    return (f"a: &a [{', '.join(['0'] * 97)}]\nb: &b [{', '.join(['*a'] * count)}]\n"
            f"c:\n  <<: [{', '.join(maps if alias_last else maps[::-1])}]\n")


# -- tests -----------------------------------------------------------------------------------------------------------
def test_the_billion_laughs_is_refused_at_the_line_of_an_alias_in_the_apiservers_words() -> None:
    text = bomb(9)
    with pytest.raises(Refused) as caught:
        yaml_input.load_all(text)
    message = yaml_problem("pod.yaml", caught.value)
    line = int(message.split(":")[1])
    assert message.startswith(f"pod.yaml:{line}: {EXCESSIVE} (") and "\n" not in message, message
    assert line in alias_lines(text)
    assert ours(text) == go_yaml(text)  # the very node go-yaml stops at: its counts and its line


def test_a_document_loads_as_pyyaml_loads_it_anchors_merge_keys_and_all() -> None:
    """A kustomize-style manifest that repeats its labels through anchors: the same values, and the same nodes
    (the state finds a field's line from them)."""
    text = textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: web
          labels: &labels {app: web, tier: front, "app.kubernetes.io/part-of": shop}
        spec:
          selector: {matchLabels: *labels}
          template:
            metadata: {labels: *labels}
            spec:
              containers:
              - &web
                name: web
                image: nginx:1.27
                resources: &res {requests: {cpu: 500m, memory: 256Mi}}
              - <<: *web
                name: sidecar
                resources: *res
              - {<<: [*web, {image: busybox}], name: third}
        ---
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: a-and-b}
        data: {cmd: "a && b", url: "http://x/?a=1&b=2"}
        ---
        """)
    assert yaml_input.load_all(text) == list(yaml.load_all(text, Loader=C_LOADER))
    ours_nodes, theirs = list(yaml_input.compose_all(text)), list(yaml.compose_all(text, Loader=C_LOADER))
    assert [_shape(n) for n in ours_nodes] == [_shape(n) for n in theirs]
    assert yaml_input.load(text.split("---")[0]) == yaml.safe_load(text.split("---")[0])


def _shape(node: Any) -> Any:
    kind = type(node).__name__
    marks = (node.start_mark.line, node.start_mark.column, node.end_mark.line, node.end_mark.column)
    if isinstance(node, yaml.ScalarNode):
        return kind, node.tag, node.value, node.style, marks
    if isinstance(node, yaml.SequenceNode):
        return kind, node.tag, [_shape(c) for c in node.value], marks
    return kind, node.tag, [(_shape(k), _shape(v)) for k, v in node.value], marks


@pytest.mark.parametrize(("make", "low", "high"), [
    (aliases_of_a_list, 1, 1000),                                    # a share over 99 % past 1000 nodes
    (lambda n: aliases_of_a_list(n, width=120), 1, 20000),           # the same, nearer the 101 aliased nodes
    (merged, 1, 1000),                                               # a merged sequence, decoded last to first
    (lambda n: merged(n, alias_last=False), 1, 5000),
])
def test_the_threshold_is_go_yamls_just_under_and_just_over(make: Any, low: int, high: int) -> None:
    first = first_refused(make, low, high)
    assert go_yaml(make(first - 1)) is None
    assert ours(make(first)) == go_yaml(make(first)) is not None


def test_a_merged_sequence_is_counted_last_to_first() -> None:
    """go-yaml refuses the merge with the alias last in the file and decodes it with the alias first: counted in
    file order, it would be the other way round."""
    assert go_yaml(merged(500)) is not None and ours(merged(500)) == go_yaml(merged(500))
    assert go_yaml(merged(500, alias_last=False)) is None and ours(merged(500, alias_last=False)) is None


def test_an_anchor_that_contains_itself_is_refused_in_go_yamls_words() -> None:
    with pytest.raises(Refused) as caught:
        yaml_input.load("a: &a [1, {b: *a}]\n")
    assert yaml_problem("f.yaml", caught.value) == "f.yaml:1: yaml: anchor 'a' value contains itself"


def test_anchors_are_a_documents_own() -> None:
    with pytest.raises(yaml.YAMLError, match="found undefined alias 'a'"):
        yaml_input.load_all("a: &a [1]\n---\nb: *a\n")
    with pytest.raises(yaml.YAMLError, match="found duplicate anchor 'a'"):
        yaml_input.load_all("a: &a [1]\nb: &a [2]\n")


def test_one_document_or_none_is_what_load_reads() -> None:
    assert yaml_input.load("") is None
    for text in ("a: 1\n---\nb: 2\n", "a: &a 1\n---\nb: 2\n"):  # composed in C, and here
        with pytest.raises(yaml.YAMLError, match="expected a single document"):
            yaml_input.load(text)


@pytest.mark.parametrize(("decoded", "ratio"), [(1000, 0.99), (400000, 0.99), (2200000, 0.545), (4000000, 0.10),
                                                (9000000, 0.10)])
def test_the_allowed_share_tightens_with_size_as_go_yamls(decoded: int, ratio: float) -> None:
    assert yaml_input.allowed_ratio(decoded) == pytest.approx(ratio)
    assert yaml_input.allowed_ratio(decoded) == _ratio(decoded)


TIGHTENING = 50000  # plain nodes first: the alias at the limit is decoded past 400 000 nodes, under 99 %


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
def test_kubectl_refuses_what_the_reader_refuses_and_no_more(tmp_path: Path) -> None:
    """Real go-yaml, just under and just over: the 99 % share, the share tightening with size, merged sequences
    both ways round, and the bomb."""
    def tightening(n: int) -> str:
        return aliases_of_a_list(n, width=1000, plain=TIGHTENING)

    cases: list[tuple[Callable[[int], str], int, int]] = [
        (aliases_of_a_list, 1, 1000), (tightening, 600, 660), (merged, 1, 1000),
        (lambda n: merged(n, alias_last=False), 1, 5000)]
    for make, low, high in cases:
        first = first_refused(make, low, high)
        assert (kubectl_refuses(tmp_path, make(first - 1)), kubectl_refuses(tmp_path, make(first))) == (False, True)
        if make is tightening:
            refused = ours(make(first))
            assert refused is not None and refused[1] > 400000 and refused[0] / refused[1] < 0.99
    assert kubectl_refuses(tmp_path, bomb(9)) and ours(bomb(9)) is not None


def test_a_plain_node_trips_the_budget_where_the_allowed_share_falls_under_the_aliased_count() -> None:
    """Past 2.2 million nodes the allowed share falls faster than the aliased share does: go-yaml can stop at a
    node that comes through no alias (600 000 aliased nodes, then over 3 million plain ones; too large a file to
    compose here, so the count is set)."""
    aliased = 600000
    first = next(d for d in range(2200000, 4000000) if float(aliased) / float(d) > _ratio(d))
    comp = yaml_input.Composer(yaml_input.LOADER(""))
    mark = yaml.Mark("f", 0, 41, 0, None, 0)
    comp._aliased, comp._decoded = aliased, first - 2
    comp._step(mark)  # the node before: within the budget
    with pytest.raises(Refused) as caught:
        comp._step(mark)
    assert yaml_problem("f", caught.value) == (f"f:42: {EXCESSIVE} (600,000 of the first {first:,} nodes decoded "
                                               f"come from aliases; kube-apiserver refuses more than "
                                               f"{_ratio(first):.1%})")
