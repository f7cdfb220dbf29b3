"""The package's shape: its imports run one way (no cycle), the engine imports nothing above
it, no module reads another's private names, the evals' tallies and decisions import no app
code, no function is over 60 lines and no module over 600.

Both read the source as text (ast), so they run in a second and need no model. The installed
package is lazymlx/ with models/ and cli/ installed inside it (pyproject.toml's package-dir), so
all three are walked, under the names they are imported by.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {"lazymlx": "lazymlx", "lazymlx.models": "models", "lazymlx.cli": "cli"}
MAX_FUNCTION_LINES = 60
# modules of lazymlx/evals/ that only tally records or decide from them: they re-decide an
# earlier run's journal anywhere, so they must not reach the modules that run a conversation
TALLIES = ("summary", "choice", "search_plan", "scoring", "records", "card")
APP_MODULES = ("llm", "session", "contexts", "turn", "generation")


def _modules() -> dict[str, Path]:
    """Every module of the installed package, by its import name."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _imported(tree: ast.Module, name: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """(module, name) pairs a module imports anywhere (a function's lazy imports too, since
    they run as soon as the function does), but not those only for type checkers."""
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package up
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            yield from ((base, alias.name) for alias in node.names)


def _import_graph() -> dict[str, set[str]]:
    """Each module's imports of other modules of the package (`from a import b` imports the
    module a.b where there is one, else a)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for base, member in _imported(tree, name, path.name == "__init__.py"):
            target = f"{base}.{member}" if f"{base}.{member}" in modules else base
            if target in modules and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
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


def test_the_package_has_no_import_cycle():
    assert _cycles(_import_graph()) == [], (
        "modules that import each other (directly or round a loop)"
    )


def test_the_cycle_finder_finds_a_loop_and_passes_a_chain():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through other modules of the package."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_tallies_and_decisions_import_no_app_code():
    graph = _import_graph()
    app = {f"lazymlx.{name}" for name in APP_MODULES}
    found = {
        module: sorted(_reached(graph, module) & app)
        for module in (f"lazymlx.evals.{name}" for name in TALLIES)
    }
    assert all(module in graph for module in found)
    assert {module: app_code for module, app_code in found.items() if app_code} == {}, (
        "these evals modules reach app code; import from lazymlx.evals.records instead"
    )


def test_the_walk_follows_imports_through_other_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _reached(graph, "a") == {"a", "b", "c"} and _reached(graph, "d") == set()


def _long_functions() -> Iterator[str]:
    """Every function (methods and nested ones too) over MAX_FUNCTION_LINES, from its `def` to
    its last line, docstring included."""
    for path in _modules().values():
        where = path.relative_to(REPO).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    yield f"{where}:{node.lineno} {node.name} ({lines} lines)"


def test_no_function_is_over_60_lines():
    assert list(_long_functions()) == []


# what the engine may import of the rest of the package: it runs below everything else, and a
# parallel group hands it what it changes through lazymlx/engine/hooks.py
ENGINE_MAY_IMPORT = ("lazymlx.engine", "lazymlx.errors", "lazymlx.platform", "lazymlx.models")


def test_the_engine_imports_nothing_above_it():
    graph = _import_graph()
    found = {
        module: sorted(
            target
            for target in targets
            if not any(
                target == allowed or target.startswith(f"{allowed}.")
                for allowed in ENGINE_MAY_IMPORT
            )
        )
        for module, targets in graph.items()
        if module.startswith("lazymlx.engine")
    }
    assert found and {module: above for module, above in found.items() if above} == {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_reads() -> Iterator[str]:
    """Every read of another module's private name: `module._name` on a module of the package
    imported by name, or `from module import _name`."""
    modules = _modules()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    elif node.module in modules and _private(alias.name):
                        yield f"{name}: from {node.module} import {alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _private(node.attr)
            ):
                yield f"{name}: {bound[node.value.id]}.{node.attr}"


def test_no_module_reads_another_modules_private_names():
    assert sorted(set(_private_reads())) == []


MAX_FILE_LINES = 600


def test_no_module_is_over_600_lines():
    long = {
        path.relative_to(REPO).as_posix(): lines
        for path in _modules().values()
        if (lines := len(path.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert long == {}
