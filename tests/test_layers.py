"""The layering of docs/design.md §1, checked on the source: no upward or private
cross-package imports, no import circles. Each package knows only the ones below it, through
their exported names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

# Lowest first; a package may import only packages listed before it (and corral's shared
# top-level modules such as corral.errors, corral._limits, corral._fs, corral._config).
LAYERS = [
    "sandbox",
    "network",
    "templates",
    "engine",
    "sources",
    "tools",
    "mistral",
    "batch",
    "client",
    "e2b",
    "http",
    "mcp",
    "cli",
]
FRONT_ENDS = {"http", "mcp", "cli"}
NUMERIC_MAY_IMPORT: set[str] = set()  # runs inside the sandbox: the standard library only
CLIENT_MAY_IMPORT = {"corral.engine", "corral.errors", "corral._public"}  # never the server


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [n for n in names if n == "corral" or n.startswith("corral.")]


def _package(path: Path) -> str | None:
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else None


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_respect_the_layers(path: Path) -> None:
    own = _package(path)
    problems: list[str] = []
    for name in _imports(path):
        parts = name.split(".")
        target = parts[1] if len(parts) > 1 else None
        if target is None or target not in LAYERS or target == own:
            continue
        cli_over_front_end = own == "cli" and target in FRONT_ENDS
        upward = own in LAYERS and LAYERS.index(target) > LAYERS.index(own)
        if upward and not cli_over_front_end:
            problems.append(f"{name}: {own} may not import the layer above it")
        if len(parts) > 2 and parts[2].startswith("_"):
            problems.append(f"{name}: private module of another package")
    assert not problems, problems


def test_numeric_imports_only_the_standard_library() -> None:
    names = _imports(SRC / "numeric.py")
    assert set(names) <= {"corral"} | NUMERIC_MAY_IMPORT, names


def test_the_layer_table_covers_every_package() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYERS)


SANDBOX = SRC / "sandbox"
# The modules both sides of the sandbox boundary share (the MIME table, standard library only,
# is corral's own and every surface's).
BOUNDARY = {
    "corral._mime",
    "corral.sandbox._case_protocol",
    "corral.sandbox._control_protocol",
    "corral.sandbox._descriptors",
    "corral.sandbox._protocol",
    "corral.sandbox._seqpacket",
    "corral.sandbox._syscalls",
}


def _sandbox_modules(side: str) -> list[Path]:
    return sorted((SANDBOX / side).rglob("*.py"))


@pytest.mark.parametrize("path", _sandbox_modules("inside"), ids=lambda p: p.name)
def test_code_inside_the_sandbox_never_imports_the_server_side(path: Path) -> None:
    # corral itself for its install path; corral.numeric is the standard-library-only helper
    # that user code imports.
    allowed = BOUNDARY | {"corral", "corral.errors", "corral.numeric"}
    problems = [
        name
        for name in _imports(path)
        if name != "corral.sandbox.inside"
        and not name.startswith("corral.sandbox.inside.")
        and name not in allowed
        and name != "corral.sandbox"  # `from corral.sandbox import _syscalls`
    ]
    assert not problems, problems


def _imported_names(path: Path, module_prefix: str) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(module_prefix):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names if a.name.startswith(module_prefix))
    return names


@pytest.mark.parametrize("path", _sandbox_modules("host"), ids=lambda p: p.name)
def test_server_side_handles_take_only_constants_from_inside(path: Path) -> None:
    names = _imported_names(path, "corral.sandbox.inside")
    assert all(name.isupper() for name in names), names


def test_the_client_knows_only_result_types_and_errors() -> None:
    for path in (SRC / "client").rglob("*.py"):
        names = {n for n in _imports(path) if not n.startswith("corral.client")}
        assert names <= CLIENT_MAY_IMPORT, (path.name, names)


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, set[str]]:
    """Module to the corral modules it imports, at any depth of the file (a function's lazy
    import and a TYPE_CHECKING block count). Packages' ``__init__`` re-export facades are
    left out: importing ``corral.sandbox`` for a name is importing the module it names."""
    modules = {_module_name(path): path for path in _modules()}
    facades = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if name in facades:
            continue
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t not in facades and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle a depth-first walk from each module finds (one per back edge)."""
    circles: list[list[str]] = []
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        if module in path:
            circles.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        path.append(module)
        for target in sorted(graph[module]):
            visit(target)
        path.pop()
        done.add(module)

    for start in sorted(graph):
        visit(start)
    return circles


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others() -> None:
    circles = _circles(_module_graph())
    assert not circles, circles
