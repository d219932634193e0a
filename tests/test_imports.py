"""No import goes up the layers, lazy or not (issue 32): every `import` in bert_tf, including
those inside functions, read with ast."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "bert_tf"

# Low to high. A module may import its own layer and those below it.
LAYERS = [
    {"fileio", "progress", "tf_env"},  # helpers every layer uses (no bert_tf imports of their own)
    {"script_flags"},                # flag <-> dataclass plumbing of the options classes
    {"tokenization"},
    {"pretraining_data"},
    {"modeling"},
    {"convert"},
    {"pretrained"},                  # from_pretrained: the format table + models + tokenizer
    {"training"},                    # the trainer core: knows no task
    {"pretraining"},                 # the pre-training task on that trainer
    {"export"},
    {"tasks"},
    {"commands"},
    {"demo", "demo_predict", "demo_steps", "resources"},  # the demo drives the commands; resources: docs
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}

# Upward imports that are allowed, and why. `import bert_tf` (the package: BertError, the
# lazy `exporter` seam, KERAS_BACKEND) is allowed everywhere and is not listed.
ALLOWED = {}


def _package(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _is_module(name):
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or path.is_dir()


def imports():
    """(importing module, imported module, line) for every bert_tf import in bert_tf."""
    for f in sorted(ROOT.rglob("*.py")):
        rel = f.relative_to(ROOT.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from bert_tf import fileio` imports a module; `import BertError` the package
                names = [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}")
                         else node.module for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] == "bert_tf":
                    yield module, name, node.lineno


def test_no_upward_import_and_no_package_cycle():
    upward, edges = [], set()
    for module, name, line in imports():
        src, dst = _package(module), _package(name)
        if src is None or dst is None or src == dst:
            continue  # the facade, `import bert_tf`, or within a package
        assert src in LAYER and dst in LAYER, f"{module}: put {src!r}/{dst!r} in LAYERS"
        if (module, name) not in ALLOWED:
            edges.add((src, dst))
        if LAYER[dst] > LAYER[src] and (module, name) not in ALLOWED:
            upward.append(f"{module}:{line} imports {name} ({src} is below {dst})")
    assert not upward, "\n".join(upward)
    seen = {(m, n) for m, n, _ in imports()}
    stale = sorted(set(ALLOWED) - seen)
    assert not stale, f"ALLOWED lists imports that no longer exist: {stale}"
    # With no upward edge a cycle between packages could only run within one layer.
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    def reaches(a, b, seen=()):
        return b in graph.get(a, ()) or any(
            reaches(c, b, seen + (a,)) for c in graph.get(a, ()) if c not in seen)
    cycles = sorted((a, b) for a, b in edges if reaches(b, a))
    assert not cycles, cycles


def test_the_walk_sees_imports_inside_functions():
    found = {(m, n) for m, n, _ in imports()}
    # a function-level import (model.export() reaches bert_tf.export through this seam)
    assert ("bert_tf.modeling.keras_data", "bert_tf") in found
    assert ("bert_tf.training.checkpointing", "bert_tf.convert.checkpoints") in found


def test_the_trainer_core_knows_no_pretraining():
    """bert_tf.training is the core of every task (issue 43 D): it imports nothing of
    bert_tf.pretraining and names no pre-training feature; the task hands the trainer what it
    needs (its Task)."""
    found = [f"{m}:{line} imports {n}" for m, n, line in imports()
             if _package(m) == "training" and _package(n) == "pretraining"]
    assert not found, found
    named = []
    for f in sorted((ROOT / "training").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            text = node.value if isinstance(node, ast.Constant) else next(
                (getattr(node, a) for a in ("id", "attr", "name", "arg") if hasattr(node, a)),
                None)
            if isinstance(text, str) and ("masked_lm" in text or "next_sentence" in text):
                named.append(f"{f.name}:{node.lineno}: {text[:60]!r}")
    assert not named, named
