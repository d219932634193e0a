"""Every console command's `--help` states its flags' real defaults (docstring usage lines too)."""
import functools
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from bert_tf import commands

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# In a fresh process (commands define clashing flags): --help as the console command prints
# it, then each flag's default as the command sees it with no flags given.
_PROBE = textwrap.dedent("""
    import contextlib, importlib, io, json, sys
    sys.argv = [sys.argv[1], "--help"]
    module = importlib.import_module({module!r})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            module.main()
        except SystemExit as e:
            code = e.code
    from absl import flags
    defaults = {{name: flags.FLAGS[name].default for name in flags.FLAGS}}
    print(json.dumps({{"code": code, "help": out.getvalue(),
                      "defaults": {{k: v if isinstance(v, (str, int, float, bool, type(None)))
                                   else repr(v) for k, v in defaults.items()}}}}))
""")


@functools.lru_cache(maxsize=None)  # bert-demo's is read by two tests: probed once
def _help(name, module):
    code = _PROBE.format(module=module)
    proc = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _as_shown(value):
    """A default as absl's help and a usage line write it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def test_every_console_command_is_probed():
    assert len(commands.COMMANDS) == 10 and "bert-demo" in commands.COMMANDS


@pytest.mark.parametrize("name", sorted(commands.COMMANDS))
def test_help_states_the_real_defaults(name):
    got = _help(name, commands.COMMANDS[name])
    text, defaults = got["help"], got["defaults"]
    assert got["code"] == 0
    # Optional flags in usage lines: `[--train_steps 1000]` / `[--output_dir=demo_out]`.
    usage = re.findall(r"\[--(\w+)[ =]([^\]\s]+)\]", text)
    for flag, shown in usage:
        assert flag in defaults, (name, flag)
        assert shown == _as_shown(defaults[flag]), (name, flag, shown, defaults[flag])
    # absl's per-flag `(default: '...')`: every flag listed, with the value the command uses.
    blocks = re.split(r"\n(?=  --(?:\[no\])?\w+: )", text)
    listed = 0
    for block in blocks:
        m = re.match(r"\s+--(?:\[no\])?(\w+):", block)
        if not m or m.group(1) not in defaults:
            continue
        listed += 1
        d = re.search(r"\(default: '(.*?)'\)", " ".join(block.split()))
        value = defaults[m.group(1)]
        if value is None:
            assert d is None, (name, block)
        else:
            assert d and d.group(1) == _as_shown(value), (name, m.group(1), block, value)
    assert listed >= 3, (name, text[:2000])  # the command's own flags are in its --help
    # Help that is still true: --init_checkpoint takes every format, not "TF1 or ours".
    init = [b for b in blocks if re.match(r"\s+--init_checkpoint:", b)]
    assert not [b for b in init if "one of ours" in b], init
    if name in ("bert-run-pretraining", "bert-run-classifier", "bert-extract-features"):
        assert init and "Hugging Face" in " ".join(init[0].split()), (name, init)
    # Flags a command does not use are not in its help (extract_features reads text).
    if name == "bert-extract-features":
        assert "--skip_corrupt_records" not in text and "--[no]skip_corrupt_records" not in text


def test_demo_usage_line_names_its_defaults():
    got = _help("bert-demo", "bert_tf.demo")
    usage = dict(re.findall(r"\[--(\w+)[ =]([^\]\s]+)\]", got["help"]))
    assert {"train_steps", "output_dir", "export_base"} <= set(usage)
    assert usage["train_steps"] == str(got["defaults"]["train_steps"])
