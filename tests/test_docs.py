"""docs/API.md's examples run, in order, as one program (so the docs cannot go stale).
The other docs' blocks, and API.md's non-python ones, run in tests/test_doc_blocks.py."""
import os
import re

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "API.md")


def _blocks():
    with open(DOC, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_doc_has_examples_for_each_module():
    text = "".join(_blocks())
    for module in ("config", "tokenization", "text_graph", "encoder", "models", "checkpoints",
                   "optimization", "export"):
        assert re.search(rf"\b{module}\b", text), module


def test_api_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "api_doc"}
    for i, block in enumerate(_blocks()):
        try:
            exec(compile(block, f"docs/API.md block {i + 1}", "exec"), namespace)
        except Exception as e:  # name the block that broke by its first line
            first = next((ln for ln in block.splitlines() if ln.strip()), "")
            pytest.fail(f"docs/API.md: block {first!r} (python block {i + 1}): "
                        f"{type(e).__name__}: {e}", pytrace=False)
    # The config example prints the one-line validation error.
    assert "hidden_size" in capsys.readouterr().out
