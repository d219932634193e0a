"""Every public function, class and method of the library has a docstring, with an Args:
section when it takes two or more parameters (Keras overrides such as call/get_config are
documented by their class)."""
import ast
import pathlib

import pytest

LIB = pathlib.Path(__file__).resolve().parent.parent / "bert_tf"
KERAS_OVERRIDES = {"call", "get_config", "build", "from_config", "compute_output_shape",
                   "compute_output_spec", "get_build_config", "build_from_config"}


def _public_defs(node, prefix="", in_class=False):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if child.name.startswith("_"):
                continue
            if not (in_class and child.name in KERAS_OVERRIDES):
                yield prefix + child.name, child
            if isinstance(child, ast.ClassDef):
                yield from _public_defs(child, prefix + child.name + ".", True)


def _problems(path):
    for name, node in _public_defs(ast.parse(path.read_text(encoding="utf-8"))):
        doc = ast.get_docstring(node)
        where = f"{path.relative_to(LIB.parent)}:{node.lineno} {name}"
        if not doc:
            yield f"{where}: no docstring"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = [a.arg for a in node.args.args + node.args.kwonlyargs
                      if a.arg not in ("self", "cls")]
            if len(params) >= 2 and "Args:" not in doc:
                yield f"{where}: {len(params)} parameters but no Args: section"


def test_scanner_finds_an_undocumented_function(tmp_path):
    bad = LIB / "_docstring_probe_never_committed.py"
    try:
        bad.write_text('def f(a, b):\n    """Adds."""\n\n\ndef g():\n    pass\n')
        assert [p.split(": ", 1)[1] for p in _problems(bad)] == [
            "2 parameters but no Args: section", "no docstring"]
    finally:
        bad.unlink()


@pytest.mark.parametrize("package", sorted(
    p.name for p in LIB.iterdir() if p.is_dir() and (p / "__init__.py").exists()) + ["."])
def test_public_definitions_are_documented(package):
    root = LIB / package
    files = sorted(root.rglob("*.py")) if package != "." else sorted(root.glob("*.py"))
    problems = [msg for path in files for msg in _problems(path)]
    assert not problems, "\n".join(problems)
