"""`--init_checkpoint=<any format>` supplies --bert_config_file, --vocab_file and
--do_lower_case where the source carries them, as `bert_tf.from_pretrained` does.

Every script calls `hand_off(options)` (the fine-tuning scripts through
`bert_tf.tasks.cli.run_script`, run_pretraining in its main, bert-export-savedmodel through
`fill_flags`) and passes the `Source` it returns to its own load (`init_source=`), so
--init_checkpoint is read once per run; `bert_config(options, source)` gives the run's config
without reading it again. A flag the user gave that contradicts the source is a one-line
BertError; one note on stderr says which values came from the source.
"""
import dataclasses
import sys

from bert_tf import BertError
from bert_tf.convert import formats

HANDED = ("bert_config_file", "vocab_file", "do_lower_case")
# BertConfig fields that make a config another model (dropout and the initializer may differ).
SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "type_vocab_size", "hidden_act")


def _read_source(init_checkpoint, bert_config_file):
    """(finished Source, whether its config is the source's own)."""
    where = f"--init_checkpoint={init_checkpoint}"
    try:
        src = formats.read_source(init_checkpoint)
    except BertError as e:  # one line that names the flag instead of the bare path
        raise BertError(f"{where}: {str(e).removeprefix(f'{init_checkpoint}: ')}") from None
    if src.bert_config is not None or bert_config_file:
        own = src.bert_config is not None
        if not own:  # a bad --bert_config_file is that flag's error, not the checkpoint's
            return formats.finish(src, bert_config_file, flags=True), own
        try:
            return formats.finish(src, None, flags=True), own
        except BertError as e:  # a problem inside the source itself: name the flag
            raise BertError(f"{where}: {str(e).removeprefix(f'{src.path}: ')}") from None
    # a source without a config (e.g. a bare training checkpoint) and no flag giving one
    raise BertError(f"{where}: {src.config_hint}: pass --bert_config_file (and --vocab_file "
                    f"for text input)")


def resolve(init_checkpoint, current, explicit):
    """The handed-off values for one script run.

    Args:
        init_checkpoint: the --init_checkpoint path.
        current: {flag name: value} of the script's HANDED flags (those it has).
        explicit: names among them the user set (on the command line, or non-default).

    Returns:
        ({flag name: new value}, [flag names taken from the source], the `source.Source`
        read: the script loads its weights from it, `formats.load_checkpoint(model, src)`).

    Raises:
        BertError: an explicit flag contradicts the source (one line, naming both).
    """
    from bert_tf.tokenization import vocab_tokens
    where = f"--init_checkpoint={init_checkpoint}"
    given_cfg = current.get("bert_config_file") if "bert_config_file" in explicit else None
    src, cfg_from_source = _read_source(init_checkpoint, given_cfg)
    values, taken = {}, []
    if "bert_config_file" in current and cfg_from_source:
        if given_cfg:
            mine = formats.read_config(given_cfg).to_dict()
            theirs = src.bert_config.to_dict()
            diff = [k for k in SHAPE_FIELDS if mine.get(k) != theirs.get(k)]
            if diff:
                raise BertError(f"--bert_config_file={given_cfg}: {diff[0]} {mine.get(diff[0])}"
                                f" but {where} has {theirs.get(diff[0])} (a different model)")
        else:
            # its own config file where it has one, else the checkpoint itself: scripts read
            # --bert_config_file through formats.read_config, which takes both
            values["bert_config_file"] = src.config_file or init_checkpoint
            taken.append("bert_config_file")
    if "vocab_file" in current and src.vocab_file:
        given = current.get("vocab_file") if "vocab_file" in explicit else None
        if given:
            if vocab_tokens(given) != vocab_tokens(src.vocab_file):
                raise BertError(f"--vocab_file={given}: not the vocab of {where} "
                                f"({src.vocab_file})")
        else:
            values["vocab_file"] = src.vocab_file
            taken.append("vocab_file")
    if "do_lower_case" in current and src.casing_from in ("source", "name"):
        if "do_lower_case" in explicit:
            if bool(current["do_lower_case"]) != src.do_lower_case:
                kind = "an uncased" if src.do_lower_case else "a cased"
                raise BertError(f"--do_lower_case={current['do_lower_case']}: {where} is "
                                f"{kind} model (do_lower_case={src.do_lower_case})")
        else:
            values["do_lower_case"] = src.do_lower_case
            taken.append("do_lower_case")
    return values, taken, src


def _note(init_checkpoint, values, taken):
    if taken:
        shown = ", ".join(f"--do_lower_case={values[n]}" if n == "do_lower_case" else f"--{n}"
                          for n in taken)
        print(f"note: {shown} from --init_checkpoint={init_checkpoint}", file=sys.stderr)


def _absl_explicit(names):
    """Names the user passed on the command line, or None when absl flags are not parsed."""
    try:
        from absl import flags
        fv = flags.FLAGS
        if not fv.is_parsed():
            return None
        return {n for n in names if n in fv and fv[n].present}
    except ImportError:
        return None


def hand_off(options, explicit=None):
    """(`options` with the source's config, vocab and casing where the user gave none, the
    `source.Source` read for --init_checkpoint or None): the script passes that Source to
    its load, so the checkpoint is read once and nothing is kept after the call.

    Args:
        options: a script's options dataclass (TrainerOptions subclass).
        explicit: names the user set; default: absl's `FLAGS[name].present` after parsing,
            else the fields whose value differs from the default.
    """
    init = getattr(options, "init_checkpoint", None)
    if not init:
        return options, None
    fields = {f.name: f for f in dataclasses.fields(options)}
    names = [n for n in HANDED if n in fields]
    if not names:
        return options, None
    if explicit is None:
        explicit = _absl_explicit(names)
    if explicit is None:
        explicit = {n for n in names if getattr(options, n) != fields[n].default}
    current = {n: getattr(options, n) for n in names}
    values, taken, src = resolve(init, current, set(explicit))
    _note(init, values, taken)
    return (dataclasses.replace(options, **values) if values else options), src


def fill_options(options, explicit=None):
    """`hand_off`'s options only (unchanged without --init_checkpoint).

    Args:
        options: a script's options dataclass (TrainerOptions subclass).
        explicit: names the user set (see `hand_off`).
    """
    return hand_off(options, explicit)[0]


def bert_config(options, source=None):
    """The run's BertConfig: the Source's where --bert_config_file names the source the
    hand-off read (--init_checkpoint itself or its config file: not read again), else
    `formats.read_config(options.bert_config_file)`.

    Args:
        options: a script's options (bert_config_file; init_checkpoint where it has one).
        source: the `source.Source` `hand_off` returned for --init_checkpoint, or None.
    """
    path = options.bert_config_file
    if source is not None and path and path in (getattr(options, "init_checkpoint", None),
                                                source.path, source.config_file):
        return source.bert_config
    return formats.read_config(path)


def fill_flags(flag_values):
    """`hand_off` for a script that reads absl FLAGS directly: sets the flags' values;
    returns the `source.Source` read for --init_checkpoint (None without one)."""
    init = flag_values["init_checkpoint"].value if "init_checkpoint" in flag_values else None
    if not init:
        return None
    names = [n for n in HANDED if n in flag_values]
    current = {n: flag_values[n].value for n in names}
    values, taken, src = resolve(init, current, {n for n in names if flag_values[n].present})
    _note(init, values, taken)
    for name, value in values.items():
        flag_values[name].value = value
    return src
