"""Builds the documentation site, offline, with mkdocs (`make docs`; tests/test_docs_site.py).

    .venv/bin/python docs/build_site.py [--site_dir site]

The site is README.md (the home page), the shipped guides (bert_tf/resources/docs/, in
bert_tf.resources.GUIDES order), an API reference that mkdocstrings renders from the docstrings,
and one page per command with its flags (the command's own --help, run at build time), also
for each runnable module the guides recommend (`python -m ...`). The sidebar (the readthedocs
theme's) lists every page, so the main entry points (`from_pretrained`, `BertConfig`,
`BertEncoder`, the task models, each command) are one click from any page. The
pages are laid out as in the repository (README.md at the top, the guides under
bert_tf/resources/docs/), so the README's relative links work on GitHub and in the site alike.
mkdocs runs with --strict: a warning (a broken link or anchor, a docstring that does not
render, a page left out of the navigation) fails the build. Needs the `docs` extra.

Docstrings stay written for help() and doctest; `SiteDocstrings` (a griffe extension) turns
their `>>>` examples into highlighted code blocks and their aligned two-column text into tables
for the site. Pages are `page.html` files, so the site also works opened from disk.
"""
import argparse
import html
import os
import re
import subprocess
import sys
import tempfile

import griffe
import yaml
from pygments.formatters import HtmlFormatter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bert_tf import commands, resources  # noqa: E402  (no TensorFlow import)

GUIDES_DIR = "bert_tf/resources/docs"
# Reference page -> (title in the sidebar, what it documents: `::: object` identifiers; a
# package that re-exports its submodules' functions names them after a colon; `module!name`
# is the module without `name`, for a page that shows its entry point first).
REFERENCE = {
    "from_pretrained": ("from_pretrained", ["bert_tf.pretrained.from_pretrained",
                                            "bert_tf.pretrained!from_pretrained"]),
    "config": ("BertConfig", ["bert_tf.modeling.config.BertConfig",
                              "bert_tf.modeling.config!BertConfig"]),
    "encoder": ("BertEncoder", ["bert_tf.modeling.encoder.BertEncoder",
                                "bert_tf.modeling.encoder!BertEncoder"]),
    "models": ("Task models", ["bert_tf.modeling.models"]),
    "layers": ("Layers and heads", ["bert_tf.modeling.layers", "bert_tf.modeling.heads"]),
    "export": ("Export", ["bert_tf.export:export_preprocessor,export_encoder,export_end_to_end,"
                          "export_for_serving,next_version,write_models_config,"
                          "models_config_text,load_as_keras_layer,load_as_keras_model"]),
    "convert": ("Convert", ["bert_tf.convert.checkpoints", "bert_tf.convert.formats",
                            "bert_tf.convert.source", "bert_tf.convert.tf1",
                            "bert_tf.convert.native", "bert_tf.convert.hf",
                            "bert_tf.convert.model_garden", "bert_tf.convert.tfhub",
                            "bert_tf.convert.keras_hub"]),
    "tokenization": ("Tokenization", ["bert_tf.tokenization", "bert_tf.tokenization.text_graph"]),
    "resources": ("Shipped files", ["bert_tf.resources"]),
}
# Runnable modules the guides recommend that are no console command: page -> (title, module).
# Their flags page is `python -m module --help`, run at build time (None: no flags; the page
# says how it is called).
MODULES = {
    "vocab_builder": ("python -m bert_tf.tokenization.vocab_builder",
                      "bert_tf.tokenization.vocab_builder"),
    "resources": ("python -m bert_tf.resources", "bert_tf.resources"),
}
# Commands that also run as another module than their own (`python -m bert_tf.convert`).
ALSO_MODULE = {"bert-convert": "bert_tf.convert"}
MKDOCSTRINGS_OPTIONS = {
    "docstring_style": "google",
    # Parameters as a list ("name – what it is"): the signatures carry no annotations, so a
    # table's Type column would be empty.
    "docstring_section_style": "list",
    "extensions": [os.path.abspath(__file__) + ":SiteDocstrings"],
    # The docstrings say what a parameter is in words, without types; a parameter the
    # docstring names but the signature lacks still warns (and fails the build). Returns is
    # prose: a wrapped line with a colon is not a second returned value (a leading `name:`
    # is still a name, but a colon later in the line is not a type's end).
    "docstring_options": {"warn_missing_types": False, "warn_unknown_params": True,
                          "returns_multiple_items": False},
    # Headings name the object; the signature is a highlighted block under it.
    "separate_signature": True,
    "show_source": False,
    "show_root_heading": True,
    "show_root_full_path": True,
    "heading_level": 2,
    "members_order": "source",
    "filters": ["!^_"],
    "show_submodules": False,
    "show_if_no_docstring": False,
    "merge_init_into_class": True,
}


# The docstrings are written for help() and doctest; on the site, examples become code blocks
# and aligned two-column text becomes a table.
DOCTEST_DIRECTIVE = re.compile(r"\s*#\s*doctest:.*$")
TABLE_ROW = re.compile(r"^(\S.*?)\s{2,}(\S.*)$")  # key, 2+ spaces, value
SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Yields|Raises|Attributes|Examples?|"
                     r"Notes?|Warnings?|Other Parameters|Receives|Warns):\s*$")


def _indent(line):
    return len(line) - len(line.lstrip())


def _example(lines, i, out):
    """A `>>>` example (to its first blank line) -> a fenced pycon block, no doctest directives."""
    pad = " " * _indent(lines[i])
    block = []
    while i < len(lines) and lines[i].strip() and lines[i].startswith(pad):
        block.append(pad + DOCTEST_DIRECTIVE.sub("", lines[i][len(pad):]).rstrip())
        i += 1
    if out and out[-1].strip():
        out.append("")
    out.extend([pad + "```pycon", *block, pad + "```", ""])
    return i


def _table(block):
    """Aligned `key  value` lines (deeper-indented lines continue the value) -> an HTML table,
    or None when the lines are not such a table."""
    base = _indent(block[0])
    split = [TABLE_ROW.match(line[base:]) for line in block]
    cols = [base + m.start(2) for m in split if m]
    if not cols:
        return None
    col = max(set(cols), key=cols.count)  # where most values start
    rows, starts = [], []
    for n, (line, match) in enumerate(zip(block, split)):
        text = line.strip()
        if _indent(line) > base and rows:
            rows[-1][1] += " " + text
        elif match:
            rows.append(list(match.groups()))
            starts.append(base + match.start(2))
        elif line[col - 1:col] == " " and line[col:col + 1] not in ("", " "):
            rows.append([line[base:col].strip(), line[col:].strip()])  # a one-space gap
            starts.append(col)
        elif n == 0 and base > 0:
            rows.append(["", text])  # an unlabelled first row
        else:
            return None
    # At the left margin only a strictly aligned block is a table (not prose with 2 spaces).
    if sum(bool(key) for key, _ in rows) < 2 or (base == 0 and len(set(starts)) > 1):
        return None

    def cell(text):
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(" ".join(text.split()),
                                                                    quote=False))
    body = "".join(f"<tr><td>{cell(k)}</td><td>{cell(v)}</td></tr>" for k, v in rows)
    return f'<table class="docstring-table"><tbody>{body}</tbody></table>'


def site_docstring(text):
    """A docstring as the site renders it (see above); fenced blocks are left as they are."""
    lines, out, i, fence = text.splitlines(), [], 0, False
    while i < len(lines):
        line = lines[i]
        prev = out[-1] if out else ""
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.lstrip().startswith(">>>"):
            i = _example(lines, i, out)
            continue
        elif not fence and line.strip() and (not prev.strip() or (
                _indent(line) > 0 and _indent(prev) == 0 and not SECTION.match(prev))):
            # A paragraph, or an indented run after a plain line: a table?
            end, base = i, _indent(line)
            while end < len(lines) and lines[end].strip() and _indent(lines[end]) >= base:
                end += 1
            table = _table(lines[i:end])
            if table:
                out.extend(["", table, ""])
                i = end
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


class SiteDocstrings(griffe.Extension):
    """Griffe extension (mkdocstrings' `extensions` option): `site_docstring` on every docstring."""

    def on_object(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = site_docstring(obj.docstring.value)


def command_help(name, module):
    """`name --help`, as a user sees it (the module's path in absl's flag listing replaced by
    the command's name)."""
    code = f"import sys; sys.argv[0] = {name!r}; from {module} import main; main()"
    proc = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or not text.strip():
        sys.exit(f"error: {name} --help failed (exit {proc.returncode}):\n{text}")
    lines = []
    for line in text.splitlines():
        # absl heads each module's flags with the module's file path.
        if line.endswith(".py:") and not line.startswith(" "):
            line = f"{name}:"
        lines.append(line.replace(ROOT + os.sep, "").rstrip())
    return "\n".join(lines).strip("\n") + "\n"


def directive(obj):
    """mkdocstrings' `::: object` (with the members to show, for `package:a,b`; without
    `name`, for `module!name`)."""
    if "!" in obj:
        name, _, left_out = obj.partition("!")
        filters = MKDOCSTRINGS_OPTIONS["filters"] + [f"!^{n}$" for n in left_out.split(",")]
        return f"::: {name}\n    options:\n      filters: {filters}"
    name, _, members = obj.partition(":")
    if not members:
        return f"::: {name}"
    return f"::: {name}\n    options:\n      members: [{members}]"


def module_help(module):
    """`python -m module --help` (paths of the build machine left out)."""
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          timeout=120)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or not text.strip():
        sys.exit(f"error: python -m {module} --help failed (exit {proc.returncode}):\n{text}")
    lines = []
    for line in text.splitlines():
        if line.endswith(".py:") and not line.startswith(" "):  # absl's module heading
            line = f"python -m {module}:"
        lines.append(line.replace(ROOT + os.sep, "").rstrip())
    return "\n".join(lines).strip("\n") + "\n"


def module_page(title, module):
    """The Markdown of a runnable module's page: its --help, or (bert_tf.resources, which
    takes a guide's name and no flags) how it is called."""
    if module == "bert_tf.resources":
        rows = "\n".join(f"| `{name}` | {what} |" for name, (_, what, _) in
                         resources.GUIDES.items())
        return (f"# {title}\n\n`python -m bert_tf.resources` takes no flags: alone it lists "
                f"the guides installed with the package (their paths on your machine); with a "
                f"guide's name (below) it prints that guide.\n\n```text\nusage: python -m "
                f"bert_tf.resources [guide]\n```\n\n"
                f"| guide | what |\n|---|---|\n{rows}\n")
    return (f"# {title}\n\nThe flags of `{title}`, as its `--help` prints them.\n\n"
            f"```text\n{module_help(module)}```\n")


LIST_ITEM = re.compile(r"^(?:[-*+]|\d+\.) ")


def copy_page(path, dest):
    """Copies a Markdown page, with a blank line put before a list that follows a paragraph
    line: GitHub starts the list there, Python-Markdown would run it into the paragraph."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, fence = [], False
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        elif (not fence and LIST_ITEM.match(line) and out and out[-1].strip()
              and not LIST_ITEM.match(out[-1]) and not out[-1].startswith((" ", "|", "#"))):
            out.append("")
        out.append(line)
    with open(dest, "w", encoding="utf-8") as f:
        f.write("\n".join(out))


def stage(src, extra_pages=None, reference=True):
    """Writes the site's pages under `src`; returns mkdocs' nav.

    Args:
        src: the (empty) mkdocs docs_dir.
        extra_pages: {path under src: markdown}, added to the guides (the tests' broken page).
        reference: also the API reference and the commands' pages.
    """
    copy_page(os.path.join(ROOT, "README.md"), os.path.join(src, "index.md"))
    os.makedirs(os.path.join(src, GUIDES_DIR))
    guides = []
    for name, (filename, what, _) in resources.GUIDES.items():
        copy_page(resources.doc_file(name), os.path.join(src, GUIDES_DIR, filename))
        with open(resources.doc_file(name), encoding="utf-8") as f:
            title = f.readline().lstrip("#").strip().replace("`", "")
        guides.append({title: f"{GUIDES_DIR}/{filename}"})
    for path, text in (extra_pages or {}).items():
        with open(os.path.join(src, path), "w", encoding="utf-8") as f:
            f.write(text)
        guides.append({path: path})
    if not reference:
        return [{"Home": "index.md"}, {"Guides": guides}]
    os.makedirs(os.path.join(src, "reference", "commands"))
    reference = []
    for page, (title, objects) in REFERENCE.items():
        body = "\n\n".join(directive(obj) for obj in objects)
        with open(os.path.join(src, "reference", page + ".md"), "w", encoding="utf-8") as f:
            f.write(f"# {title}\n\n{body}\n")
        reference.append({title: f"reference/{page}.md"})
    flags = []
    for name, module in commands.COMMANDS.items():
        also = " or ".join(f"`python -m {m}`" for m in (ALSO_MODULE.get(name), module) if m)
        with open(os.path.join(src, "reference", "commands", name + ".md"), "w",
                  encoding="utf-8") as f:
            f.write(f"# {name}\n\nThe flags of `{name}` (also {also}), as its "
                    f"`--help` prints them.\n\n```text\n{command_help(name, module)}```\n")
        flags.append({name: f"reference/commands/{name}.md"})
    for page, (title, module) in MODULES.items():
        with open(os.path.join(src, "reference", "commands", page + ".md"), "w",
                  encoding="utf-8") as f:
            f.write(module_page(title, module))
        flags.append({title: f"reference/commands/{page}.md"})
    return [{"Home": "index.md"}, {"Guides": guides}, {"API reference": reference},
            {"Commands": flags}]


def write_css(src):
    """The site's stylesheet (Pygments' colours for `.highlight`, docstring tables); returns its
    path under `src`."""
    os.makedirs(os.path.join(src, "css"))
    css = HtmlFormatter(style="default").get_style_defs(".highlight") + """
.highlight pre { padding: .5em; }
/* Room for a command's --help lines (about 100 columns) beside the sidebar. */
.wy-nav-content { max-width: 1000px; }
/* Table cells wrap (the theme keeps each on one line and scrolls the table). */
.wy-table-responsive table td, .wy-table-responsive table th { white-space: normal; }
/* Signatures wrap at the page's width, never clipped or scrolled; continuation lines are
   indented under the name. */
.doc-signature pre, .doc-signature pre code {
  white-space: pre-wrap !important; overflow-wrap: anywhere !important;
  word-break: normal !important; overflow-x: visible !important;
}
.doc-signature pre code { padding-left: calc(12px + 2em) !important; text-indent: -2em; }
table.docstring-table td { padding: .2em .8em .2em 0; vertical-align: top; }
table.docstring-table td:first-child { white-space: nowrap; font-weight: bold; }
"""
    with open(os.path.join(src, "css", "site.css"), "w", encoding="utf-8") as f:
        f.write(css)
    return "css/site.css"


def build(site_dir, extra_pages=None, reference=True):
    """Builds the site into `site_dir`; returns the number of HTML pages (the theme's 404 and
    search pages left out).

    Args:
        site_dir: where the site goes.
        extra_pages: see `stage`.
        reference: see `stage` (without it, the build needs no mkdocstrings and takes seconds).
    """
    site_dir = os.path.abspath(site_dir)
    with tempfile.TemporaryDirectory(prefix="bert_tf_docs_") as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        config = {
            "site_name": "bert_tf",
            "site_description": "Google's original BERT workflow on TensorFlow 2.20 / Keras 3",
            "docs_dir": src,
            "site_dir": site_dir,
            # page.html, not page/ (a folder): the links work opened from disk (file://).
            "use_directory_urls": False,
            # Code is highlighted at build time by Pygments (the theme's highlight.js would
            # come from a CDN).
            # readthedocs: a sidebar with every page (the mkdocs theme hides them in menus).
            "theme": {"name": "readthedocs", "highlightjs": False, "locale": "en",
                      "navigation_depth": 2, "collapse_navigation": True},
            "extra_css": [write_css(src)],
            "nav": stage(src, extra_pages, reference),
            "markdown_extensions": ["tables", {"pymdownx.highlight": {"use_pygments": True}},
                                    "pymdownx.superfences", {"toc": {"permalink": True}}],
            "plugins": ["search"] + ([{"mkdocstrings": {
                "default_handler": "python",
                "handlers": {"python": {"paths": [ROOT], "options": MKDOCSTRINGS_OPTIONS}}}}]
                if reference else []),
            # Every problem a reader would hit is a warning, so --strict fails on it.
            "validation": {
                "nav": {"omitted_files": "warn", "not_found": "warn", "absolute_links": "warn"},
                "links": {"not_found": "warn", "anchors": "warn", "absolute_links": "warn",
                          "unrecognized_links": "warn"}},
        }
        config_file = os.path.join(tmp, "mkdocs.yml")
        with open(config_file, "w", encoding="utf-8") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                               "-f", config_file], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            sys.exit(f"error: mkdocs build --strict failed (exit {proc.returncode})")
    pages = [os.path.join(d, f) for d, _, files in os.walk(site_dir) for f in files
             if f.endswith(".html") and not (d == site_dir and f in ("404.html", "search.html"))]
    return len(pages)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site_dir", default=os.path.join(ROOT, "site"))
    args = parser.parse_args()
    print(f"{build(args.site_dir)} pages in {args.site_dir}")


if __name__ == "__main__":
    main()
