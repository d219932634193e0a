"""Builds the documentation site, offline, with mkdocs (`make docs`; tests/test_docs_site.py).

    .venv/bin/python docs/build_site.py [--site_dir site]

The site is README.md (the home page), the shipped guides (bert_tf/resources/docs/, in
bert_tf.resources.GUIDES order), an API reference that mkdocstrings renders from the docstrings,
and one page per command with its flags (the command's own --help, run at build time). The
pages are laid out as in the repository (README.md at the top, the guides under
bert_tf/resources/docs/), so the README's relative links work on GitHub and in the site alike.
mkdocs runs with --strict: a warning (a broken link or anchor, a docstring that does not
render, a page left out of the navigation) fails the build. Needs the `docs` extra.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bert_tf import commands, resources  # noqa: E402  (no TensorFlow import)

GUIDES_DIR = "bert_tf/resources/docs"
# Reference page -> (title, what it documents: `::: object` identifiers; a package that
# re-exports its submodules' functions names them after a colon).
REFERENCE = {
    "from_pretrained": ("from_pretrained", ["bert_tf.pretrained"]),
    "models": ("Models and config", ["bert_tf.modeling.config", "bert_tf.modeling.encoder",
                                     "bert_tf.modeling.models"]),
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
MKDOCSTRINGS_OPTIONS = {
    "docstring_style": "google",
    # The docstrings say what a parameter is in words, without types; a parameter the
    # docstring names but the signature lacks still warns (and fails the build).
    "docstring_options": {"warn_missing_types": False, "warn_unknown_params": True},
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
    """mkdocstrings' `::: object` (with the members to show, for `package:a,b`)."""
    name, _, members = obj.partition(":")
    if not members:
        return f"::: {name}"
    return f"::: {name}\n    options:\n      members: [{members}]"


def stage(src, extra_pages=None, reference=True):
    """Writes the site's pages under `src`; returns mkdocs' nav.

    Args:
        src: the (empty) mkdocs docs_dir.
        extra_pages: {path under src: markdown}, added to the guides (the tests' broken page).
        reference: also the API reference and the commands' pages.
    """
    shutil.copy(os.path.join(ROOT, "README.md"), os.path.join(src, "index.md"))
    os.makedirs(os.path.join(src, GUIDES_DIR))
    guides = []
    for name, (filename, what, _) in resources.GUIDES.items():
        shutil.copy(resources.doc_file(name), os.path.join(src, GUIDES_DIR, filename))
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
        with open(os.path.join(src, "reference", "commands", name + ".md"), "w",
                  encoding="utf-8") as f:
            f.write(f"# {name}\n\nThe flags of `{name}` (also `python -m {module}`), as its "
                    f"`--help` prints them.\n\n```text\n{command_help(name, module)}```\n")
        flags.append({name: f"reference/commands/{name}.md"})
    return [{"Home": "index.md"}, {"Guides": guides}, {"API reference": reference},
            {"Commands": flags}]


def build(site_dir, extra_pages=None, reference=True):
    """Builds the site into `site_dir`; returns the number of HTML pages (404 page left out).

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
            "theme": {"name": "mkdocs", "highlightjs": False, "locale": "en"},
            "nav": stage(src, extra_pages, reference),
            "markdown_extensions": ["tables", "fenced_code", {"toc": {"permalink": True}}],
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
             if f.endswith(".html") and f != "404.html"]
    return len(pages)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site_dir", default=os.path.join(ROOT, "site"))
    args = parser.parse_args()
    print(f"{build(args.site_dir)} pages in {args.site_dir}")


if __name__ == "__main__":
    main()
