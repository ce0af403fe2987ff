"""srb/ reads bottom-up: no module imports, even inside a function, one that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

SRB = Path(__file__).resolve().parents[1] / "srb"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRB.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every srb module `path` imports anywhere in its body (top level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from srb.data.schema import X` names srb.data.schema, not the package srb.data
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in known:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SRB.rglob("*.py")}
    known = set(files)
    return {m: imports_of(p, known) - {m} for m, p in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    assert "srb.llm.server" in graph["srb.llm.client"]  # imported inside a method
    assert "srb.errors" in graph["srb.config"]


def test_no_import_cycles_in_srb() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_errors_and_tables_sit_at_the_bottom() -> None:
    graph = import_graph()
    assert graph["srb.errors"] == set()
    assert graph["srb.tables"] <= {"srb.atomic"}
