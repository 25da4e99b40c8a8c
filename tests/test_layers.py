"""The layer contract: docs/architecture.md's "Layers" diagram, read as the order the imports keep.

Each line of the diagram's code block is a floor, top first; the names on it are the packages
(folders with __init__.py) and the modules of gpuprobe/ itself that live there, subpackages
in parentheses beside their package. A module may import its own package and anything on a
lower floor; never a higher floor, nor another package of its own floor. Every import counts,
the ones inside functions too: a lazy import is still an arrow.
"""
import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# The repository's folders and the names they install under (setup.py's package_dir).
FOLDERS = {"gpuprobe": "gpuprobe", "collectors": "gpuprobe.collectors", "dashboard": "gpuprobe.dashboard"}

# Arrows against the order that stand in files other work is changing now, so they move
# after it lands (importing module, imported module): why each is here.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def diagram_floors(text: str) -> list[list[str]]:
    """The names on each floor of the code block under '## Layers', top floor first."""
    section = text.split("\n## Layers", 1)[1]
    block = section.split("```", 2)[1]
    floors = []
    for line in block.splitlines()[1:]:  # [0] is the fence's language tag
        line = line.split("#", 1)[0]
        names = re.findall(r"[A-Za-z_][\w.]*", line)
        if names:
            floors.append(names)
    return floors


def packages() -> set[str]:
    """Every package of the three trees as the diagram names it (gpuprobe's own left off:
    `decide`, `deploy.plans`, `collectors`, `dashboard.views`)."""
    out = set()
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            name = ".".join(rel[1:] if rel[0] == "gpuprobe" else rel)
            if name:
                out.add(name)
    return out


def unit_of(dotted: str) -> str:
    """The diagram's name for a module: its top package (`decide`, `collectors`), a module of
    gpuprobe/ itself (`errors`), or `__init__` for the package's own __init__."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> dict[str, Path]:
    """Dotted installed name -> file, for every module of the three trees."""
    out = {}
    for folder, installed in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            rel = rel[:-1] if rel[-1] == "__init__" else rel
            out[".".join((installed, *rel))] = path
    return out


@functools.lru_cache(maxsize=None)
def tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for every test of this file."""
    return ast.parse(path.read_text(), str(path))


def imports(path: Path, dotted: str, known: set[str]) -> set[str]:
    """The gpuprobe modules `path` imports (`from a import b` is a.b where that is a module)."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = dotted.split(".")[: len(dotted.split(".")) - node.level + (1 if is_pkg else 0)]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            out.update(subs or [base])
    return {m for m in out if m == "gpuprobe" or m.startswith("gpuprobe.")}


def wrong_way_arrows(floors: list[list[str]]) -> list[tuple[str, str, str]]:
    """(importing file, imported module, why it breaks the order) for every arrow against it."""
    floor_of = {name: i for i, names in enumerate(floors) for name in names}
    known = modules()
    bad = []
    for dotted, path in sorted(known.items()):
        src = unit_of(dotted)
        for target in sorted(imports(path, dotted, known)):
            dst = unit_of(target)
            if dst == src:
                continue
            rel = str(path.relative_to(ROOT))
            if src not in floor_of or dst not in floor_of:
                bad.append((rel, target, f"{src if src not in floor_of else dst} is not in the diagram"))
            elif floor_of[dst] < floor_of[src]:
                bad.append((rel, target, f"{src} imports {dst}, a higher floor"))
            elif floor_of[dst] == floor_of[src]:
                bad.append((rel, target, f"{src} imports {dst}, on its own floor"))
    return bad


@pytest.fixture(scope="module")
def floors():
    return diagram_floors(ARCHITECTURE.read_text())


def test_every_package_is_in_the_diagram_and_nothing_else(floors):
    named = {n for names in floors for n in names}
    top_modules = {p.stem for p in (ROOT / "gpuprobe").glob("*.py")}  # errors, units, ..., __init__
    assert packages() - named == set(), "packages missing from docs/architecture.md's Layers diagram"
    assert named - packages() - top_modules == set(), "the diagram names packages or modules that do not exist"


def test_imports_keep_the_layer_order(floors):
    bad = [(f, m, why) for f, m, why in wrong_way_arrows(floors) if (f, m) not in KNOWN_EXCEPTIONS]
    assert bad == [], "\n".join(f"{f} imports {m}: {why}" for f, m, why in bad)


def test_known_exceptions_still_exist(floors):
    """An exception that has been moved is taken off the list, so the list says what is left."""
    arrows = {(f, m) for f, m, _ in wrong_way_arrows(floors)}
    assert set(KNOWN_EXCEPTIONS) - arrows == set()


def test_the_check_reads_the_diagram_and_sees_a_wrong_way_arrow(floors):
    text = "intro\n## Layers\n```text\ncli  (cli.commands)\n  |\nstore | units   # the file\n```\nmore"
    assert diagram_floors(text) == [["cli", "cli.commands"], ["store", "units"]]
    upside_down = [["errors"]] + [[n for n in names if n != "errors"] for names in floors]
    assert ("gpuprobe/store/store.py", "gpuprobe.errors", "store imports errors, a higher floor") in \
        wrong_way_arrows(upside_down)


def test_only_the_store_touches_its_connection():
    """The store's connection, lock and raw reads (`_conn`, `_lock`, `_read`, `_write`) are
    used on `self` inside gpuprobe/store/ only; every other module reads through its methods
    and store/reads.py (a class's own `self._lock` is its own)."""
    private = {"_conn", "_lock", "_read", "_write"}
    found = []
    for dotted, path in sorted(modules().items()):
        if dotted.startswith("gpuprobe.store"):
            continue
        for node in ast.walk(tree(path)):
            if (isinstance(node, ast.Attribute) and node.attr in private
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert found == []
