"""The fine-tuning scripts' main(): flags -> config -> run() -> report.

Every flag is a field of the task's config dataclass (bert_tf.script_flags.flag); a script
calls `script_flags.define_flags(ConfigClass)` and ends with `run_script(run, ConfigClass,
report)`: absl's app.run with flag errors (unknown flag, bad value) and BertErrors as one
`error: ...` line, exit status 1.
"""
from bert_tf.script_flags import main_for, parse_flags, run_script  # noqa: F401  (API)


def print_eval(result):
    """Print eval_results' `key = value` lines and where the export went."""
    for key, value in sorted((result.get("eval") or {}).items()):
        print(f"{key} = {value}")
    if result.get("export_dir"):
        print(f"exported to {result['export_dir']}")
