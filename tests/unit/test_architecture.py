"""The import rules of docs/architecture.md hold in the code.

The page's tables are the rules: "The layers" says which seafl_dist layers each layer may import,
"imported only by" which layers may import torch.distributed, lightning and wandb. Every import
statement of the package (module level or inside a function) is read with ``ast``; relative
imports are resolved. A layer missing from the table fails too, so a new package gets a row.
"""
import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "seafl_dist"
PAGE = ROOT / "docs" / "architecture.md"
LIBRARIES = ("torch.distributed", "lightning", "wandb", "opacus")


def layer_of(path: Path) -> str:
    """``runtime/server.py`` → ``runtime``; ``cli.py`` → ``cli``."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else Path(parts[0]).stem


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (``from x import y`` also counts ``x.y``)."""
    package = ["seafl_dist", *path.relative_to(PACKAGE).parts[:-1]]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names |= {module} | {f"{module}.{a.name}" for a in node.names}
    return names


def code_imports() -> tuple[dict, dict]:
    """({layer: seafl_dist layers it imports}, {library: layers importing it}), from the code."""
    layers, libraries = defaultdict(set), defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        layer = layer_of(path)
        layers.setdefault(layer, set())
        for name in imported_modules(path):
            parts = name.split(".")
            if parts[0] == "seafl_dist" and len(parts) > 1 and parts[1] != layer:
                layers[layer].add(parts[1])
            for lib in LIBRARIES:
                if name == lib or name.startswith(lib + "."):
                    libraries[lib].add(layer)
    return layers, libraries


def table(heading_cell: str) -> dict[str, set[str]]:
    """The page's table whose header starts with ``| heading_cell |``: first cell → names in the last cell."""
    rows, inside = {}, False
    for line in PAGE.read_text().splitlines():
        if line.startswith(f"| {heading_cell} |"):
            inside = True
        elif inside and not line.startswith("|"):
            break
        elif inside and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            key = re.sub(r"\.py$|/$", "", cells[0].strip("`"))
            rows[key] = {re.sub(r"\.py$|/$", "", n) for n in re.findall(r"`([^`]+)`", cells[-1])}
    assert rows, f"{PAGE}: no table headed '| {heading_cell} |'"
    return rows


def test_every_layer_imports_only_what_the_page_allows():
    allowed = table("layer")
    actual, _ = code_imports()
    missing = sorted(set(actual) - set(allowed))
    assert not missing, f"docs/architecture.md, 'The layers': no row for {missing}; add one with what it may import"
    gone = sorted(set(allowed) - set(actual))
    assert not gone, f"docs/architecture.md, 'The layers': rows for {gone}, which seafl_dist no longer has"
    wrong = [f"{layer} imports {sorted(actual[layer] - allowed[layer])}" for layer in sorted(actual)
             if actual[layer] - allowed[layer]]
    assert not wrong, "imports against docs/architecture.md's layers: " + "; ".join(wrong)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """{module: the package's modules it imports}, at module level or inside functions; ``from pkg import
    sub`` imports the module ``pkg.sub`` (``pkg`` is imported first by Python, not by the importer)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join((package[:len(package) - node.level + 1] if node.level else []) +
                                ([node.module] if node.module else []))
                edges |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def test_no_module_imports_one_that_imports_it_back():
    """No import cycle between the package's modules, however long, imports inside functions included."""
    graph, cycles = module_graph(), []
    assert {"seafl_dist.sim.churn", "seafl_dist.sim.jobs"} <= graph["seafl_dist.sim.scheduler"]  # the reader sees

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    for name in sorted(graph):
        back = sorted(m for m in graph[name] if name in reach(m))
        cycles += [f"{name} -> {m} -> ... -> {name}" for m in back]
    assert not cycles, "import cycles: " + "; ".join(cycles)


def test_distributed_lightning_and_wandb_stay_in_their_layers():
    allowed = table("library")
    assert set(allowed) == set(LIBRARIES), allowed
    _, actual = code_imports()
    wrong = [f"{lib} imported by {sorted(actual[lib] - allowed[lib])}" for lib in LIBRARIES if actual[lib] - allowed[lib]]
    assert not wrong, "against docs/architecture.md: " + "; ".join(wrong)
    assert not actual["torch.distributed"] & {"sim", "algo"} and not actual["lightning"] & {"sim", "algo"}


def test_the_rules_see_real_imports():
    """The reader finds what is there (a reader that finds nothing would pass every rule)."""
    layers, libraries = code_imports()
    assert {"sim", "algo", "train", "transport"} <= layers["runtime"]
    assert "models" in layers["train"] and libraries["torch.distributed"] >= {"transport", "runtime"}
    assert "seafl_dist.settings" in imported_modules(PACKAGE / "algo" / "fedavg.py")  # from ..settings import ...


def test_importing_the_package_imports_neither_torch_nor_lightning():
    code = ("import sys, seafl_dist, seafl_dist.cli, seafl_dist.settings; "
            "print(sorted(m for m in ('torch', 'lightning', 'wandb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
