"""The house rules of ARCHITECTURE.md that no linter checks: every module small enough to read in one sitting, and no
circle of imports at run time (a TYPE_CHECKING import is a type, not an import). The layers and the independence of
analysis/'s families are import-linter's contracts in pyproject.toml; one home per torch or OS message is
tests/unit/test_torch_text.py's."""

from __future__ import annotations

from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parents[2] / "dlprobe"
MAX_LINES = 600
# `from dlprobe import watch` re-exports the API lazily, in dlprobe/__init__.py's __getattr__: the one import that
# runs only when asked for, as pyproject.toml's contracts ignore it too.
LAZY_EDGES = {("dlprobe", "dlprobe.api")}


def test_no_module_is_over_600_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these by what they own: {long}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_circle_and_nothing_else():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_at_run_time():
    graph = grimp.build_graph("dlprobe", cache_dir=None, exclude_type_checking_imports=True)
    edges = {
        module: {
            target
            for target in graph.find_modules_directly_imported_by(module)
            if target.startswith("dlprobe") and (module, target) not in LAZY_EDGES
        }
        for module in graph.modules
        if module.startswith("dlprobe")
    }
    assert _cycles(edges) == []
