"""The fine-tuning scripts' main(): flags -> config -> run() -> report.

Every flag is a field of the task's config dataclass (bert_tf.script_flags.flag); a script
calls `script_flags.define_flags(ConfigClass)` and ends with `run_script(run, ConfigClass,
report)`: absl's app.run with flag errors (unknown flag, bad value) and BertErrors as one
`error: ...` line, exit status 1. `--init_checkpoint` hands its config, vocab and casing to
the run (`bert_tf.convert.handoff`), and the `Source` read for it to `run` (`init_source=`):
the checkpoint is read once per run.
"""
from bert_tf import script_flags
from bert_tf.script_flags import main_for, parse_flags  # noqa: F401  (API)


def with_handoff(run):
    """`run` after the --init_checkpoint hand-off: a callable taking the options, which calls
    `run(options, init_source=<the Source read, or None>)`, or `run(options)` for a `run`
    without that keyword (it then reads --init_checkpoint again itself).

    Args:
        run: callable taking the options instance (and the keyword `init_source`).
    """
    import inspect
    takes_source = "init_source" in inspect.signature(run).parameters

    def run_with_handoff(options):
        from bert_tf.convert.handoff import hand_off
        options, source = hand_off(options)
        return run(options, init_source=source) if takes_source else run(options)
    return run_with_handoff


def run_script(run, options_cls, report=None):
    """`script_flags.run_script` with the --init_checkpoint hand-off before `run`.

    Args:
        run: callable taking the options instance and the keyword `init_source` (the
            `Source` read for --init_checkpoint, or None): it loads from that Source. A `run`
            without the keyword is given the options only.
        options_cls: the options dataclass.
        report: optional callable given run's result.
    """
    script_flags.run_script(with_handoff(run), options_cls, report)


def print_eval(result):
    """Print eval_results' `key = value` lines and where the export went."""
    for key, value in sorted((result.get("eval") or {}).items()):
        print(f"{key} = {value}")
    if result.get("export_dir"):
        print(f"exported to {result['export_dir']}")
