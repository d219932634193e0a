"""`make docs`: the documentation site builds offline with mkdocs --strict (issue 34), so a
broken link or anchor, a docstring that does not render or a command whose --help fails breaks
the build, and the build here."""
import importlib.util
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _builder():
    spec = importlib.util.spec_from_file_location("build_site",
                                                  os.path.join(ROOT, "docs", "build_site.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(site, page):
    with open(os.path.join(site, page, "index.html"), encoding="utf-8") as f:
        return f.read()


def test_site_builds_with_warnings_as_errors(tmp_path):
    from bert_tf import commands, resources
    builder = _builder()
    site = str(tmp_path / "site")
    pages = builder.build(site)
    guides = [f"bert_tf/resources/docs/{f[:-3]}" for f, _, _ in resources.GUIDES.values()]
    reference = [f"reference/{p}" for p in builder.REFERENCE]
    flags = [f"reference/commands/{c}" for c in commands.COMMANDS]
    assert pages == 1 + len(guides) + len(reference) + len(flags)
    # The home page is the README, and its links to the guides resolve to their pages.
    home = _read(site, ".")
    for guide in guides:
        assert f'href="{guide}/"' in home, guide
    # Docstrings rendered: from_pretrained's Args are a parameter table with its parameters.
    page = _read(site, "reference/from_pretrained")
    assert re.search(r'id="bert_tf\.pretrained\.from_pretrained"', page)
    for param in ("task", "num_classes", "text_input", "seq_length"):
        assert f"<code>{param}</code>" in page, param
    assert 'id="bert_tf.modeling.encoder.BertEncoder"' in _read(site, "reference/models")
    assert 'id="bert_tf.export.export_for_serving"' in _read(site, "reference/export")
    # Each command's page holds its flags, from its own --help.
    assert "--init_checkpoint" in _read(site, "reference/commands/bert-run-pretraining")
    assert "--max_predictions_per_seq" in _read(site,
                                                "reference/commands/bert-create-pretraining-data")


def test_broken_links_fail_the_build(tmp_path, capsys):
    page = ("# Broken\n\n[a guide](no_such_guide.md), "
            "[an anchor](bert_tf/resources/docs/tfrecords.md#no-such-part)\n")
    with pytest.raises(SystemExit, match="mkdocs build --strict failed"):
        _builder().build(str(tmp_path / "site"), extra_pages={"broken.md": page},
                         reference=False)
    err = capsys.readouterr().err
    assert re.search(r"WARNING.*broken\.md.*no_such_guide\.md", err), err
    assert re.search(r"WARNING.*broken\.md.*no-such-part", err), err


def test_readme_is_a_front_page():
    """The README stays a front page (issue 34: at most about 12 KB) that links every guide by
    its real path (what GitHub shows; the site lays the pages out the same way)."""
    from bert_tf import resources
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    size = len(readme.encode("utf-8"))
    assert size <= 12 * 1024, f"README.md: {size} bytes; it is a front page: move detail to a guide"
    linked = set(re.findall(r"\]\((bert_tf/resources/docs/[\w.]+\.md)(?:#[\w-]+)?\)", readme))
    assert linked == {f"bert_tf/resources/docs/{f}" for f, _, _ in resources.GUIDES.values()}
