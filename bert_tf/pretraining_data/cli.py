"""Glue between create_pretraining_data.py's absl flags and `runner.run`."""
import dataclasses
import sys

from bert_tf import BertError


def options_from_flags(flag_values, extra_args=()):
    """absl FLAGS -> runner.Options (every Options field but beam_args is a flag of that name).

    `extra_args`: the command line's flags that absl did not know; with --runner they are Beam
    pipeline options, otherwise an error. --runner implies --mode=beam.
    """
    from bert_tf.pretraining_data.runner import Options
    values = {}
    for field in dataclasses.fields(Options):
        if field.name in flag_values and flag_values[field.name].value is not None:
            values[field.name] = flag_values[field.name].value
    if values.get("runner") and not flag_values["mode"].present:
        values["mode"] = "beam"
    values["beam_args"] = tuple(extra_args)
    return Options(**values)


def main(options):
    """Run; a BertError becomes `error: <one line>` and exit status 1 (no traceback)."""
    from bert_tf.pretraining_data.runner import run
    try:
        return run(options)
    except BertError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("interrupted: finished shards are kept; rerun with --resume to continue")
