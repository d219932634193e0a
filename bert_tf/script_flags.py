"""Flags -> options: every script flag is defined once, as a field of an options dataclass.

A field made with `flag(default, help)` is a command-line flag of that name, type and default
(`define_flags(cls)`), and `options_from_flags(cls)` builds the dataclass from the parsed flags.
A script lists its options class (and which fields to leave out); subclasses override a field
to change its default or help. No TensorFlow import: parsing flags stays fast.
"""
import dataclasses
import sys
import types
import typing


def flag(default, help, *, enum=None, kind=None):  # noqa: A002  (absl's argument name)
    """A dataclass field that is also a command-line flag.

    Args:
        default: the flag's and the field's default.
        help: the `--help` text.
        enum: allowed values (a DEFINE_enum flag).
        kind: "string", "integer", "float", "bool" or "list"; default: from the field's type.
    """
    return dataclasses.field(default=default,
                             metadata={"help": help, "enum": enum, "kind": kind})


def flag_fields(cls, exclude=()):
    """The fields of options class `cls` that are flags, minus `exclude`."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata and f.name not in exclude]


_KINDS = {bool: "bool", int: "integer", float: "float", str: "string", list: "list"}


def _kind(field):
    if field.metadata.get("kind"):
        return field.metadata["kind"]
    if field.metadata.get("enum"):
        return "enum"
    t = field.type
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        t = next(a for a in typing.get_args(t) if a is not type(None))
    t = typing.get_origin(t) or t
    if t not in _KINDS:
        raise TypeError(f"{field.name}: no flag type for {field.type!r}")
    return _KINDS[t]


def define_flags(cls, exclude=(), flag_values=None):
    """Defines an absl flag for every flag field of `cls` (skipping ones already defined).

    Args:
        cls: an options dataclass whose flag fields were made with `flag()`.
        exclude: field names that are not flags of this script.
        flag_values: absl FlagValues (default: absl.flags.FLAGS).
    """
    from absl import flags
    fv = flag_values or flags.FLAGS
    for f in flag_fields(cls, exclude):
        if f.name in fv:
            continue
        kind, help_text = _kind(f), f.metadata["help"]
        if kind == "enum":
            flags.DEFINE_enum(f.name, f.default, list(f.metadata["enum"]), help_text,
                              flag_values=fv)
        else:
            getattr(flags, f"DEFINE_{kind}")(f.name, f.default, help_text, flag_values=fv)


def options_from_flags(cls, flag_values=None, **overrides):
    """An instance of `cls` from parsed flags (or any object with those attributes).

    Args:
        cls: the options dataclass.
        flag_values: absl FlagValues or a namespace (default: absl.flags.FLAGS).
        **overrides: field values that win over the flags.
    """
    if flag_values is None:
        from absl import flags
        flag_values = flags.FLAGS
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            values[f.name] = overrides[f.name]
        elif f.name in _names(flag_values):
            values[f.name] = getattr(flag_values, f.name)
    return cls(**values)


def _names(obj):
    try:
        return set(obj)  # absl FlagValues iterate over flag names
    except TypeError:
        return set(vars(obj))


def parse_flags(argv):
    """absl flag parsing; a bad flag exits with one line instead of absl's usage text."""
    from absl import flags
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        sys.exit(f"error: {e}")


def main_for(run, options_cls, report=None):
    """An absl main: flags -> options_cls -> run(options) -> report(result).

    A BertError (from run) exits with one `error: ...` line and status 1.

    Args:
        run: callable taking the options instance; the script's work.
        options_cls: the options dataclass built from the parsed flags.
        report: optional callable given run's result (e.g. to print it).

    Returns:
        `main(argv)` for `absl.app.run`.
    """
    def main(argv):
        if len(argv) > 1:
            sys.exit(f"error: unexpected arguments {' '.join(argv[1:])}")
        from bert_tf import BertError
        try:
            result = run(options_from_flags(options_cls))
        except BertError as e:
            sys.exit(f"error: {e}")
        if report is not None:
            report(result)
    return main


def run_script(run, options_cls, report=None):
    """A script's `if __name__ == "__main__"` body: app.run(main_for(...)) at INFO verbosity.

    Args:
        run: callable taking the options instance.
        options_cls: the options dataclass.
        report: optional callable given run's result.
    """
    from absl import app, logging
    logging.set_verbosity(logging.INFO)
    app.run(main_for(run, options_cls, report), flags_parser=parse_flags)

