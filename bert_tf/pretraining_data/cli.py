"""Glue between create_pretraining_data.py's absl flags and `runner.run`."""
import sys

from bert_tf import BertError


def options_from_flags(flag_values, extra_args=()):
    """absl FLAGS -> Options (every field but beam_args and progress is a flag of that name).

    --runner implies --mode=beam.

    Args:
        flag_values: the parsed absl FLAGS.
        extra_args: the command line's flags that absl did not know; with --runner they are
            Beam pipeline options, otherwise an error.
    """
    from bert_tf import script_flags
    from bert_tf.pretraining_data.options import Options
    overrides = {"beam_args": tuple(extra_args)}
    if flag_values["runner"].value and not flag_values["mode"].present:
        overrides["mode"] = "beam"
    return script_flags.options_from_flags(Options, flag_values, **overrides)


def main(options):
    """Run; a BertError becomes `error: <one line>` and exit status 1 (no traceback); a stop
    by SIGTERM/SIGINT prints `interrupted: ...` and exits with 75 (`guard.PREEMPTED_EXIT_CODE`)."""
    from bert_tf.pretraining_data import guard
    from bert_tf.pretraining_data.runner import run
    try:
        return run(options)
    except BertError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt as e:  # a stop signal: "try again", as a preempted run_pretraining
        line = e.message if isinstance(e, guard.Interrupted) else guard.interrupted_line(
            options.mode, 0, 0)
        print(line, file=sys.stderr)
        sys.exit(guard.PREEMPTED_EXIT_CODE)
