"""The config package's shape: its modules import each other without a cycle (counting imports
inside functions, which is how the old config_sections <-> plugins cycle was hidden), it imports
nothing else of seafl_dist (it sits under every other layer), and no module outside it imports a
private name from it."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETTINGS = REPO / "seafl_dist" / "settings"
PREFIX = "seafl_dist.settings"
# Private imports that predate the public name; remove an entry when its module switches (set_dotted
# has been public since the configuration reference landed).
PENDING: set = set()  # private imports still to be replaced (none left)


def _from_imports(path: Path):
    """(module, imported name) of every ``from X import Y`` in the file, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None


def _graph() -> dict[str, set[str]]:
    modules = {p.stem for p in SETTINGS.glob("*.py")}
    graph = {}
    for name in modules:
        edges = set()
        for module, imported in _from_imports(SETTINGS / f"{name}.py"):
            if module == PREFIX:
                edges.add(imported if imported in modules else "__init__")
            elif module.startswith(PREFIX + "."):
                edges.add(module.split(".")[2])
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, str] = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path + [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = "done"
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return []


def test_settings_modules_import_each_other_without_a_cycle():
    graph = _graph()
    assert {"core", "sections", "plugins", "errors", "keys", "files", "reference"} <= set(graph)
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))
    assert "__init__" not in set().union(*(graph[m] for m in graph if m != "__init__"))


def test_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_settings_imports_nothing_else_of_the_package():
    for path in SETTINGS.glob("*.py"):
        for module, _ in _from_imports(path):
            if module.startswith("seafl_dist"):
                assert module == PREFIX or module.startswith(PREFIX + "."), f"{path.name} imports {module}"


def test_no_module_outside_settings_imports_a_private_name_from_it():
    found = set()
    for top in ("seafl_dist", "benchmarks", "tests"):
        for path in (REPO / top).rglob("*.py"):
            if SETTINGS in path.parents:
                continue
            for module, imported in _from_imports(path):
                if (module == PREFIX or module.startswith(PREFIX + ".")) and imported and imported.startswith("_"):
                    found.add((path.relative_to(REPO).as_posix(), imported))
    assert found - PENDING == set(), "import the public name (seafl_dist.settings.__all__) instead"
    assert PENDING - found == set(), "these import the public name now: drop them from PENDING"
