"""The folders of service/ are layers, and imports point down only (docs/developing.md: "How the code is laid out").

Every import statement of every module is read from its source, those inside functions included, so a
late import cannot slip past the rule. The entry point service.main wires the layers into the app and
may import any of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each layer may import of ours, besides itself.
ALLOWED = {
    "service.core": set(),
    # The contract reads the pure core's registries (operator kinds), so a kind exists in both or in neither.
    "schemas": {"service.core"},
    "service.runtime": {"service.core", "schemas"},
    "service.persistence": {"service.runtime", "service.core", "schemas"},
    "service.rendering": {"service.core"},
    "service.translation": {"service.rendering", "service.persistence", "service.runtime", "service.core", "schemas"},
    "service.api": {"service.translation", "service.rendering", "service.persistence", "service.runtime",
                    "service.core", "schemas"},
    # The collector measures a device and posts to a service over HTTP: it imports nothing of ours.
    "service.measure": set(),
    # The CLI is a client of the translation layer, never of the HTTP app (no service.api, no service.main).
    "service.cli": {"service.translation", "service.rendering", "service.persistence", "service.runtime",
                    "service.core", "schemas", "service.measure"},
}
ENTRY_POINTS = {"service.main", "service"}
OURS = ("service", "schemas")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for top in OURS for p in (ROOT / top).rglob("*.py")}


def imports_of(path: Path, name: str) -> set[str]:
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            # `from service.persistence import repository` imports the module service.persistence.repository.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in OURS}


def layer_of(module: str) -> str | None:
    matches = [layer for layer in ALLOWED if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else None


GRAPH = {name: imports_of(path, name) for name, path in modules().items()}


def test_every_module_belongs_to_a_layer_or_is_an_entry_point():
    homeless = sorted(name for name in GRAPH if name not in ENTRY_POINTS and layer_of(name) is None)
    assert homeless == [], f"modules outside every layer: {homeless}"


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_point_down_only(layer):
    wrong = []
    for module, imported in GRAPH.items():
        if layer_of(module) != layer:
            continue
        for target in imported:
            target_layer = layer_of(target)
            if target in ENTRY_POINTS or (target_layer not in ALLOWED[layer] | {layer}):
                wrong.append(f"{module} imports {target}")
    assert wrong == [], "\n".join(sorted(wrong))


def test_no_import_cycles():
    known = set(GRAPH)
    edges = {m: {t for t in targets if t in known and t != m} for m, targets in GRAPH.items()}
    # A package's __init__ is imported on the way to its modules; count only module-to-module edges.
    packages = {m for m, p in modules().items() if p.name == "__init__.py"}
    edges = {m: targets - packages for m, targets in edges.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [node, nxt]) if nxt in stack else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert cycles == [], "\n".join(cycles)


def test_the_rule_catches_an_upward_import(tmp_path):
    """The checker itself must see a violation: a core module importing the persistence layer."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from service.persistence import repository\n")
    assert imports_of(source, "service.core.probe") >= {"service.persistence.repository"}
    assert layer_of("service.persistence.repository") not in ALLOWED["service.core"]
