"""The fine-tuning scripts' main(): flags -> config -> run() -> report.

Every flag is a field of the task's config dataclass (bert_tf.script_flags.flag); a script
calls `script_flags.define_flags(ConfigClass)` and ends with `run_script(run, ConfigClass,
report)`: absl's app.run with flag errors (unknown flag, bad value) and BertErrors as one
`error: ...` line, exit status 1. `--init_checkpoint` hands its config, vocab and casing to
the run (`bert_tf.convert.handoff`).
"""
from bert_tf import script_flags
from bert_tf.script_flags import main_for, parse_flags  # noqa: F401  (API)


def run_script(run, options_cls, report=None):
    """`script_flags.run_script` with the --init_checkpoint hand-off before `run`.

    Args:
        run: callable taking the options instance.
        options_cls: the options dataclass.
        report: optional callable given run's result.
    """
    def run_with_handoff(options):
        from bert_tf.convert.handoff import fill_options
        return run(fill_options(options))
    script_flags.run_script(run_with_handoff, options_cls, report)


def print_eval(result):
    """Print eval_results' `key = value` lines and where the export went."""
    for key, value in sorted((result.get("eval") or {}).items()):
        print(f"{key} = {value}")
    if result.get("export_dir"):
        print(f"exported to {result['export_dir']}")
