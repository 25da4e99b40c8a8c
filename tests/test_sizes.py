"""Small files, short functions: no file over MAX_FILE_LINES lines and no function (methods and
nested functions included, from `def` to its last line) over MAX_FUNCTION_LINES, in the three
trees that ship (gpuprobe/, collectors/, dashboard/)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ("gpuprobe", "collectors", "dashboard")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80


def sources() -> list[Path]:
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py"))


def long_functions(path: Path, max_lines: int = MAX_FUNCTION_LINES) -> list[str]:
    """'file:line name (N lines)' for each function of `path` longer than max_lines."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > max_lines:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                out.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_file_over_the_limit():
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in sources()
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]
    assert long == []


def test_no_function_over_the_limit():
    assert [f for p in sources() for f in long_functions(p)] == []


def test_a_long_function_is_seen(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n" + "    x = 1\n" * 4 + "\n\nclass C:\n    def g(self):\n        return 1\n")
    assert long_functions(src, max_lines=3) == [f"{src}:1 f (5 lines)"]
    assert long_functions(src, max_lines=1) == [f"{src}:1 f (5 lines)", f"{src}:9 g (2 lines)"]
