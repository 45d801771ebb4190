"""The tree is the architecture: layers in folders, imports that only go down, no cycles.

Read from the package's own source with :mod:`ast`, so an import counts wherever it stands: at
module level, inside a function (a lazy import), or under ``if TYPE_CHECKING:``. A lazy import
closes a cycle at run time as surely as a top-level one; a type-only one still says that the
lower layer knows about the upper one.

The layers, lowest first (DESIGN.md sections 1 and 19):

* base: the error tree, the OAuth token type, the choice of compiled code;
* ``_core/``: sans-IO and compiled (records, batches, accumulator, partitioner, sender core,
  futures, metrics);
* ``config/``: the one settings table and everything derived from it;
* ``_kafka/``: every module that imports aiokafka or writes Kafka's wire format;
* ``_runtime/``: the asyncio shell (pool, sender task, transactions, hooks, waits);
* the facade: ``Producer``, ``SyncProducer`` and the public re-exports at the root;
* the edges: ``otel``, ``prometheus``, ``integrations/``, ``compat/``, ``spark/``, ``serve/``,
  ``cli``.

A module may import from its own layer or any lower one. Edges may use each other (``serve``
uses the Prometheus collector, ``cli`` starts ``serve``) as long as no cycle forms.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aioaccum"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("aioaccum.errors", "aioaccum.oauth", "aioaccum._compiled", "aioaccum._speedups")),
    ("core", ("aioaccum._core",)),
    ("config", ("aioaccum.config",)),
    ("journal", ("aioaccum._journal",)),
    ("kafka", ("aioaccum._kafka",)),
    ("runtime", ("aioaccum._runtime",)),
    (
        "facade",
        (
            "aioaccum",
            "aioaccum.producer",
            "aioaccum._producer",
            "aioaccum.sync",
            "aioaccum.interceptors",
            "aioaccum.transactions",
            "aioaccum.metrics",
        ),
    ),
    (
        "edges",
        (
            "aioaccum.otel",
            "aioaccum.prometheus",
            "aioaccum.integrations",
            "aioaccum.compat",
            "aioaccum.spark",
            "aioaccum.serve",
            "aioaccum.schemas",
            "aioaccum.cli",
        ),
    ),
]
MAX_ROOT_MODULES = 16
MAX_MODULE_LINES = 900


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def layer_of(module: str) -> int:
    """The rank of the layer ``module`` belongs to: the longest prefix named in LAYERS."""
    best: tuple[int, int] | None = None  # (prefix length, rank)
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), rank)
    if best is None:
        raise AssertionError(f"{module} belongs to no layer: add it to a folder named in LAYERS")
    return best[1]


def _imported(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported aioaccum module, line) for every import in the file, wherever it stands."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = module.split(".") if is_package else module.split(".")[:-1]
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield (candidate if candidate in MODULES else base), node.lineno


def _known(name: str) -> str | None:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES else None


def import_graph() -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {}
    for module, path in MODULES.items():
        edges: dict[str, int] = {}
        for name, line in _imported(module, path):
            if not name.startswith("aioaccum"):
                continue
            target = _known(name)
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that import each other in a ring."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)  # raises, naming the module, when it has none


def test_imports_only_go_down() -> None:
    upward = []
    for module, edges in import_graph().items():
        rank = layer_of(module)
        for target, line in edges.items():
            if layer_of(target) > rank:
                upward.append(
                    f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: {module} "
                    f"({LAYERS[rank][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_no_import_cycles_lazy_imports_included() -> None:
    cycles = strongly_connected(import_graph())
    assert not cycles, "modules that import each other in a ring: " + "; ".join(
        " <-> ".join(group) for group in cycles
    )


def test_the_root_holds_few_modules() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, (
        f"{len(root)} modules in aioaccum/ (at most {MAX_ROOT_MODULES}): {root}; move the new one "
        "into the folder of its layer"
    )


def test_no_module_is_too_long() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in MODULES.values()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}; split them by job"


def test_the_checker_sees_lazy_and_type_only_imports(tmp_path: Path) -> None:
    """The checks above are only as good as the import reader: it must see every kind."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import aioaccum.errors\n"
        "if TYPE_CHECKING:\n"
        "    from aioaccum.producer import Producer\n"
        "def later():\n"
        "    from aioaccum import _speedups\n"
        "    from ._core import batch\n"
    )
    names = {name for name, _ in _imported("aioaccum.probe", source)}
    assert {
        "aioaccum.errors",
        "aioaccum.producer",
        "aioaccum._speedups",
        "aioaccum._core.batch",
    } <= names


def test_the_cycle_finder_finds_a_ring() -> None:
    ring = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert strongly_connected(ring) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b": 1}, "b": {}}) == []


@pytest.mark.parametrize(
    ("module", "layer"), [("aioaccum._core.batch", "core"), ("aioaccum", "facade")]
)
def test_layers_are_read_from_the_longest_prefix(module: str, layer: str) -> None:
    assert LAYERS[layer_of(module)][0] == layer
