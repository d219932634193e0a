"""The command-line programs, one module each; `pip install` makes them console commands.

Each module's `main()` (no arguments) parses sys.argv with the original script's absl flags and
runs it. The same work runs as `bert-<name>`, `python -m bert_tf.commands.<module>`, or the
top-level `<module>.py` of the checkout (a thin wrapper). Flags are defined when the command
runs, not at import: two commands' modules in one process would define clashing flags.
"""
import sys

from bert_tf import tf_env

# Every command imports this package before TensorFlow: a training job's CPU allocator and
# oneDNN kernels (bert_tf/tf_env.py).
tf_env.apply(commands=True)

# Console command -> module (whose main() it calls). setup.py lists the same entry points;
# tests/test_install.py checks the two agree.
COMMANDS = {
    "bert-create-pretraining-data": "bert_tf.commands.create_pretraining_data",
    "bert-pack-pretraining-data": "bert_tf.commands.pack_pretraining_data",
    "bert-run-pretraining": "bert_tf.commands.run_pretraining",
    "bert-run-classifier": "bert_tf.commands.run_classifier",
    "bert-run-squad": "bert_tf.commands.run_squad",
    "bert-run-ner": "bert_tf.commands.run_ner",
    "bert-extract-features": "bert_tf.commands.extract_features",
    "bert-export-savedmodel": "bert_tf.commands.export_savedmodel",
    "bert-convert": "bert_tf.commands.convert",
    "bert-demo": "bert_tf.demo",
}


def command_name(module):
    """The console command that runs `module` (e.g. bert_tf.commands.run_ner), or None."""
    return next((name for name, m in COMMANDS.items() if m == module), None)


def show_in_help(module_name):
    """Makes `--help` list the flags `module_name` defined and print its docstring.

    absl's --help shows the key flags and docstring of the program (sys.argv[0], the
    `__main__` module): a console script or a top-level wrapper defines no flags itself.
    """
    from absl import flags
    fv = flags.FLAGS
    for flag in fv.get_key_flags_for_module(module_name):
        fv.register_key_flag_for_module(sys.argv[0], flag)
    module, main = sys.modules.get(module_name), sys.modules.get("__main__")
    if module is not None and main is not None and module is not main and module.__doc__:
        main.__doc__ = module.__doc__


_HELP_FLAGS = {"?", "help", "helpshort", "helpfull", "helpxml"}  # absl's (no -h)


def exit_zero_on_help(run):
    """Calls `run()` (a command's absl `app.run`) with quiet console output (`quiet.setup`);
    after --help, exits 0 as other CLIs do.

    Every command's main runs through here, before TensorFlow is imported. absl exits with
    status 1 once it has printed the help.
    """
    from bert_tf.commands import quiet
    quiet.setup()
    try:
        run()
    except SystemExit as e:
        args = sys.argv[1:sys.argv.index("--")] if "--" in sys.argv else sys.argv[1:]
        asked = any(a.startswith("-") and a.lstrip("-").split("=")[0] in _HELP_FLAGS
                    for a in args)
        if e.code == 1 and asked:
            sys.exit(0)
        raise
