"""`make docs`: the documentation site builds offline with mkdocs --strict (issue 34), so a
broken link or anchor, a docstring that does not render or a command whose --help fails breaks
the build, and the build here. What --strict does not see is checked in the HTML (issue 40):
docstring examples are highlighted code, aligned text is a table, no empty Type column. And
every installed command is listed wherever the docs list the commands. Issue 45: signatures
wrap instead of being clipped (checked in the built HTML and CSS), the main entry points are
one click away in every page's sidebar, and every runnable module the guides recommend has its
flags page."""
import ast
import glob
import html
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
    with open(os.path.join(site, "index.html" if page == "." else page + ".html"),
              encoding="utf-8") as f:
        return f.read()


def _reader_problems(html):
    """What a reader would see broken on a page, as short strings (empty: none)."""
    problems = []
    outside_code = re.sub(r"<pre\b.*?</pre>", "", html, flags=re.S)
    # Markdown reads a bare `>>>` as three nested block quotes.
    if ("&gt;&gt;&gt;" in outside_code or ">>> " in outside_code
            or re.search(r"<blockquote>\s*<blockquote>", outside_code)):
        problems.append(">>> outside a code block")
    for directive in re.findall(r"doctest:\s*[+-]\w+", html):
        problems.append(f"doctest directive shown: {directive}")
    for table in re.findall(r"<table\b.*?</table>", html, flags=re.S):
        heads = [re.sub(r"<[^>]+>|\s", "", h) for h in re.findall(r"<th\b.*?</th>", table, re.S)]
        if "Type" in heads:
            col = heads.index("Type")
            for row in re.findall(r"<tr\b.*?</tr>", table.split("</thead>")[-1], flags=re.S):
                cells = re.findall(r"<td\b.*?</td>", row, flags=re.S)
                if col < len(cells) and not re.sub(r"<[^>]+>|\s", "", cells[col]):
                    problems.append("empty Type cell")
    # Aligned plain text run together into one paragraph (a table or list that did not render).
    for par in re.findall(r"<p>(.*?)</p>", html, flags=re.S):
        if re.search(r"\S {3,}\S|\n {2,}\S|\n[-*] ", par):
            problems.append(f"aligned text in a paragraph: {par[:60]!r}")
    return problems


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(builder module, site folder, page count): the whole site, built once."""
    builder = _builder()
    site = str(tmp_path_factory.mktemp("docs") / "site")
    return builder, site, builder.build(site)


def _flag_pages(builder):
    from bert_tf import commands
    return ([f"reference/commands/{c}" for c in commands.COMMANDS]
            + [f"reference/commands/{p}" for p in builder.MODULES])


def test_site_builds_with_warnings_as_errors(built):
    from bert_tf import resources
    builder, site, pages = built
    guides = [f"bert_tf/resources/docs/{f[:-3]}" for f, _, _ in resources.GUIDES.values()]
    reference = [f"reference/{p}" for p in builder.REFERENCE]
    flags = _flag_pages(builder)
    assert pages == 1 + len(guides) + len(reference) + len(flags)
    # The home page is the README, and its links to the guides resolve to their pages.
    home = _read(site, ".")
    for guide in guides:
        assert f'href="{guide}.html"' in home, guide
    # Docstrings rendered: from_pretrained's Args are a parameter table with its parameters.
    page = _read(site, "reference/from_pretrained")
    assert re.search(r'id="bert_tf\.pretrained\.from_pretrained"', page)
    for param in ("task", "num_classes", "text_input", "seq_length"):
        assert f"<code>{param}</code>" in page, param
    assert 'id="bert_tf.modeling.encoder.BertEncoder"' in _read(site, "reference/encoder")
    assert 'id="bert_tf.export.export_for_serving"' in _read(site, "reference/export")
    # Each command's page holds its flags, from its own --help.
    assert "--init_checkpoint" in _read(site, "reference/commands/bert-run-pretraining")
    assert "--max_predictions_per_seq" in _read(site,
                                                "reference/commands/bert-create-pretraining-data")
    # Issue 40: every page reads right.
    problems = {}
    for path in glob.glob(os.path.join(site, "**", "*.html"), recursive=True):
        with open(path, encoding="utf-8") as f:
            found = _reader_problems(f.read())
        if found:
            problems[os.path.relpath(path, site)] = found
    assert problems == {}
    # The examples are Pygments-highlighted pycon blocks, one line each.
    page = _read(site, "reference/from_pretrained")
    assert page.count('<span class="gp">&gt;&gt;&gt; </span>') == 2
    assert page.count('<span class="gp">... </span>') == 1
    assert ".highlight .gp" in open(os.path.join(site, "css", "site.css")).read()
    assert re.search(r'<link href="\.\./css/site\.css" rel="stylesheet" ?/?>', page)
    # The aligned source table is a table; parameters are a list, with no Type column.
    (table,) = re.findall(r'<table class="docstring-table">.*?</table>', page)
    assert re.findall(r"<tr><td>(.*?)</td>", table) == [
        "original / training / Model Garden", "Hugging Face", "keras-hub", "SavedModels"]
    assert "<tr><td>Hugging Face</td><td><code>config.json</code>" in table
    assert "<th>Type</th>" not in page and "<b><code>seq_length</code></b>" in page


def _css_rules(css):
    """[(selectors, {property: value})] of a stylesheet, comments dropped (no nesting: @media
    blocks are skipped)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    css = re.sub(r"@[^{;]*\{(?:[^{}]*\{[^{}]*\})*[^{}]*\}", "", css)  # @media {...{...}}
    rules = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        decls = {}
        for decl in body.split(";"):
            prop, _, value = decl.partition(":")
            if prop.strip():
                decls[prop.strip().lower()] = " ".join(value.split()).lower()
        rules.append(([" ".join(x.split()) for x in selectors.split(",")], decls))
    return rules


def _stylesheets(site, page):
    """The rules of every stylesheet `page` links, in order."""
    rules = []
    for href in re.findall(r'<link href="([^"]+\.css)" rel="stylesheet"', _read(site, page)):
        path = os.path.normpath(os.path.join(site, os.path.dirname(page), href))
        with open(path, encoding="utf-8") as f:
            rules += _css_rules(f.read())
    return rules


# Entry point -> (its page, the object the page shows first).
ENTRY_POINTS = {"from_pretrained": ("reference/from_pretrained",
                                    "bert_tf.pretrained.from_pretrained"),
                "BertConfig": ("reference/config", "bert_tf.modeling.config.BertConfig"),
                "BertEncoder": ("reference/encoder", "bert_tf.modeling.encoder.BertEncoder"),
                "Task models": ("reference/models", "bert_tf.modeling.models")}


def test_signatures_wrap(built):
    """Issue 45: a long signature (from_pretrained's, BertConfig's, BertEncoder's) wraps at the
    page's width instead of being clipped mid-argument: every signature block is a <pre> under
    `.doc-signature`, whole in the HTML, and the stylesheets the page links make it wrap
    (white-space: pre-wrap, no overflow that clips or scrolls) with nothing overriding it."""
    _, site, _ = built
    # The first signature of the page is the entry point's, whole: to its last argument.
    last_argument = {"from_pretrained": "pad_to_max_seq_length=False",
                     "BertConfig": "source='BertConfig'", "BertEncoder": "**kwargs"}
    for title, (page, obj) in ENTRY_POINTS.items():
        blocks = re.findall(r'<div class="doc-signature highlight"><pre>(.*?)</pre>',
                            _read(site, page), flags=re.S)
        assert blocks, page
        for block in blocks:
            assert block.startswith("<span></span><code>") and block.endswith("</code>"), block
        if title in last_argument:
            text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", blocks[0])).split())
            assert text.startswith(title + "(") and text.endswith(f", {last_argument[title]})"), (
                page, text)
        rules = _stylesheets(site, page)
        ours = {}  # each selector's declarations, later rules over earlier ones
        for sels, decls in rules:
            for sel in sels:
                if "doc-signature" in sel:
                    ours.setdefault(sel, {}).update(decls)
        for sel in (".doc-signature pre", ".doc-signature pre code"):
            assert ours.get(sel, {}).get("white-space") == "pre-wrap !important", (sel, ours)
            assert ours[sel].get("overflow-x") == "visible !important", (sel, ours)
        # Nothing else forces another white-space or a clipping overflow over it.
        for sels, decls in rules:
            for prop in ("white-space", "overflow", "overflow-x"):
                value = decls.get(prop, "")
                if value.endswith("!important") and not value.startswith(("pre-wrap", "visible")):
                    assert False, (page, sels, prop, value)


def _sidebar(site, page):
    """The sidebar's links of `page`: {href resolved against the site root: link text}."""
    text = _read(site, page)
    m = re.search(r'<div class="wy-menu wy-menu-vertical".*?</div>', text, flags=re.S)
    assert m, f"{page}: no sidebar"
    links, here = {}, "index.html" if page == "." else page + ".html"
    for href, label in re.findall(r'<a class="[^"]*"\s+href="([^"]*)">(.*?)</a>', m.group(0),
                                  flags=re.S):
        if href.startswith("#") and href != "#":
            continue  # a heading of the page itself
        target = here if href == "#" else os.path.normpath(
            os.path.join(os.path.dirname(here), href)).replace(os.sep, "/")
        links[target] = html.unescape(re.sub(r"<[^>]+>", "", label)).strip()
    return links


def test_entry_points_are_one_click_from_every_page(built):
    """Issue 45: from the home page, a guide, a reference page and a command page alike, the
    sidebar links straight to from_pretrained, BertConfig, BertEncoder, the task models, every
    command and runnable module, and each entry point's page shows it first."""
    builder, site, _ = built
    wanted = {page + ".html": title for title, (page, _) in ENTRY_POINTS.items()}
    for page in _flag_pages(builder):
        wanted[page + ".html"] = None
    for page in (".", "bert_tf/resources/docs/serving", "reference/export",
                 "reference/commands/bert-run-classifier"):
        links = _sidebar(site, page)
        missing = sorted(set(wanted) - set(links))
        assert not missing, (page, missing)
        for target, title in wanted.items():
            assert title is None or links[target] == title, (page, target, links[target])
    for title, (page, obj) in ENTRY_POINTS.items():
        ids = re.findall(r'<h[1-6] id="([\w.]+)" class="doc doc-heading"', _read(site, page))
        assert ids and ids[0] == obj, (title, ids[:3])
    models = _read(site, "reference/models")
    for cls in ("BertClassifier", "BertSpanLabeler", "BertTokenClassifier", "BertPretrainer"):
        assert f'id="bert_tf.modeling.models.{cls}"' in models, cls


def test_every_recommended_module_has_a_flags_page(built):
    """Issue 45: each `python -m module` that README.md or a guide recommends has a page in the
    Commands section: the console command's (its module or an alias of it) or its own, which
    holds its --help (vocab_builder: its flags) or how it is called (bert_tf.resources)."""
    from bert_tf import commands, resources
    builder, site, _ = built
    texts = [open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()]
    for name in resources.GUIDES:
        with open(resources.doc_file(name), encoding="utf-8") as f:
            texts.append(f.read())
    recommended = {m.rstrip(".") for t in texts for m in re.findall(r"python -m ([\w.]+)", t)}
    assert {"bert_tf.tokenization.vocab_builder", "bert_tf.resources",
            "bert_tf.convert"} <= recommended
    pages = {module: f"reference/commands/{cmd}" for cmd, module in commands.COMMANDS.items()}
    pages.update({module: f"reference/commands/{cmd}"
                  for cmd, module in builder.ALSO_MODULE.items()})
    pages.update({module: f"reference/commands/{page}"
                  for page, (_, module) in builder.MODULES.items()})
    assert not recommended - set(pages), recommended - set(pages)
    for module in recommended:
        assert f"python -m {module}" in _read(site, pages[module]), module
    vocab = _read(site, "reference/commands/vocab_builder")
    for flag in ("--input_file", "--output_file", "--vocab_size", "--min_frequency"):
        assert flag in vocab, flag
    guides = _read(site, "reference/commands/resources")
    assert all(f"<code>{name}</code>" in guides for name in resources.GUIDES)


def test_reader_problems_are_caught():
    """The HTML checks above fail on what the site showed before issue 40."""
    before = ("<blockquote><blockquote><blockquote><p>clf.fit(x)   # doctest: +SKIP</p>"
              "</blockquote></blockquote></blockquote>"
              "<table><thead><tr><th>Name</th><th>Type</th></tr></thead><tbody><tr><td>"
              "<code>a</code></td><td>\n</td></tr></tbody></table>"
              "<p>Hugging Face   <code>config.json</code></p>")
    assert _reader_problems(before) == [
        ">>> outside a code block", "doctest directive shown: doctest: +SKIP", "empty Type cell",
        "aligned text in a paragraph: 'clf.fit(x)   # doctest: +SKIP'",
        "aligned text in a paragraph: 'Hugging Face   <code>config.json</code>'"]
    assert _reader_problems("<p>&gt;&gt;&gt; x = 1</p>") == [">>> outside a code block"]
    assert _reader_problems('<div class="highlight"><pre><span class="gp">&gt;&gt;&gt; </span>'
                            "x</pre></div><table><thead><tr><th>Type</th></tr></thead><tbody>"
                            "<tr><td><code>int</code></td></tr></tbody></table>") == []


def test_docstrings_for_the_site():
    """Examples become fenced pycon blocks without doctest directives; aligned `key  value`
    lines (deeper lines continue a value; a one-space gap at the common column) become a table;
    prose, Args sections and fenced blocks stay."""
    builder = _builder()
    doc = ("Intro:\n\n"
           "  alpha   the first, with `code`\n"
           "          and more\n"
           "  bet     b < c\n"
           "  longkey the third\n\n"
           ">>> f(1,\n...   2)   # doctest: +SKIP\n3\n\n"
           "Prose  with two spaces.  Twice.\nAnd a second line.\n\n"
           "Args:\n    a:  one\n    b:  two\n\n"
           "```text\n>>> kept\n```")
    assert builder.site_docstring(doc).split("\n") == [
        "Intro:", "", "",
        '<table class="docstring-table"><tbody><tr><td>alpha</td><td>the first, with '
        "<code>code</code> and more</td></tr><tr><td>bet</td><td>b &lt; c</td></tr>"
        "<tr><td>longkey</td><td>the third</td></tr></tbody></table>", "", "",
        "```pycon", ">>> f(1,", "...   2)", "3", "```", "", "",
        "Prose  with two spaces.  Twice.", "And a second line.", "",
        "Args:", "    a:  one", "    b:  two", "",
        "```text", ">>> kept", "```"]


def test_broken_links_fail_the_build(tmp_path, capsys):
    page = ("# Broken\n\n[a guide](no_such_guide.md), "
            "[an anchor](bert_tf/resources/docs/tfrecords.md#no-such-part)\n")
    with pytest.raises(SystemExit, match="mkdocs build --strict failed"):
        _builder().build(str(tmp_path / "site"), extra_pages={"broken.md": page},
                         reference=False)
    err = capsys.readouterr().err
    assert re.search(r"WARNING.*broken\.md.*no_such_guide\.md", err), err
    assert re.search(r"WARNING.*broken\.md.*no-such-part", err), err


def _entry_points():
    """setup.py's console commands (read, not run)."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    (scripts,) = [ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and node.targets[0].id == "CONSOLE_SCRIPTS"]
    return {s.split("=")[0].strip() for s in scripts}


def _named(text, commands, scripts=False):
    """The commands `text` names: `bert-x`, or (scripts=True) also the checkout's `x.py`."""
    return ({c for c in commands if f"`{c}" in text or f" {c} " in text} | (
        {c for c in commands if re.search(rf"\b{c[5:].replace('-', '_')}\.py\b", text)}
        if scripts else set()))


def _part(path, start, stop=r"\n\n"):
    """The text of `path` from the regex `start` to the next `stop`."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    m = re.search(start, text)
    assert m, (path, start)
    return text[m.start():][:re.search(stop, text[m.start() + 1:]).start() + 1]


def test_every_command_is_listed():
    """Issue 40: each list of the installed commands holds setup.py's entry points, all of them
    (bert-pack-pretraining-data was left out); the long-runs guide names every command that
    resumes and exits 75."""
    commands = _entry_points()
    assert len(commands) == 10 and "bert-pack-pretraining-data" in commands
    docs = "bert_tf/resources/docs/"
    lists = {
        "README.md": _part("README.md", r"`pip install` puts them on PATH", r"\);"),
        "install.md": _part(docs + "install.md", r"`pip install` gives the original scripts"),
        "commands.md": _part(docs + "commands.md", r"The\s+commands:", r"\)\.\n"),
    }
    for doc, text in lists.items():
        assert _named(text, commands) == commands, (doc, commands - _named(text, commands))
    with open(os.path.join(ROOT, docs, "commands.md"), encoding="utf-8") as f:
        assert "\n## Packing pre-training data\n\n`bert-pack-pretraining-data`" in f.read()
    # Commands that run briefly or start over: not in the long-runs guide. A new command goes
    # in the guide or here.
    one_shot = {"bert-extract-features", "bert-export-savedmodel", "bert-convert", "bert-demo"}
    with open(os.path.join(ROOT, docs, "long_runs.md"), encoding="utf-8") as f:
        assert _named(f.read(), commands, scripts=True) == commands - one_shot


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
