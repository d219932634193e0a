"""Shared plumbing of the checkpoint converters: paths, shape-checked assignment, reports.

Every loader checks all shapes before assigning anything and returns a report
`{"loaded": [...], "skipped": [...], "missing": [...]}`: names as in the file for loaded and
skipped, TF1-style names (see `tf1.tf1_name_map`) of model variables the file lacks for
missing. Missing heads keep their initialisation (logged); missing encoder variables are an
error (wrong checkpoint).
"""
import logging
import os
import posixpath
import re

import numpy as np
import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling.models import find_encoder

log = logging.getLogger("bert_tf")


def _inside(directory, prefix):
    """`prefix` (what the directory's `checkpoint` file names) when it lies inside `directory`;
    an absolute or `..` name pointing elsewhere is never read: the checkpoint of that name in
    `directory` is taken instead where there is one, else BertError."""
    if prefix is None:
        return None
    def norm(p):
        if "://" in p:
            scheme, _, rest = p.partition("://")
            return f"{scheme}://{posixpath.normpath(rest)}"
        return os.path.abspath(p)
    base = norm(directory).rstrip("/" + os.sep) + ("/" if "://" in directory else os.sep)
    if norm(prefix).startswith(base):
        return prefix
    here = posixpath.join(directory, posixpath.basename(prefix))
    if tf.io.gfile.exists(here + ".index"):
        return here
    raise BertError(f"{directory}: its checkpoint file names {prefix}, outside this directory; "
                    f"refusing to read it (pass the prefix of a checkpoint inside it)")


def resolve_prefix(path):
    """A checkpoint prefix from a prefix, a `.index` file or a directory (its latest checkpoint).

    Args:
        path: str or PathLike (gs:// works).

    Raises:
        BertError: no checkpoint there, or several in a directory without a `checkpoint` file.
    """
    path = os.fspath(path)
    if tf.io.gfile.isdir(path):
        latest = _inside(path, tf.train.latest_checkpoint(path))
        if latest is None:
            indexes = sorted(tf.io.gfile.glob(posixpath.join(path, "*.index")))
            if len(indexes) != 1:
                raise BertError(f"{path}: no checkpoint found in this directory"
                                if not indexes else
                                f"{path}: {len(indexes)} checkpoints in this directory; "
                                f"pass the prefix of one")
            latest = indexes[0][:-len(".index")]
        return latest
    if path.endswith(".index"):
        path = path[:-len(".index")]
    if not tf.io.gfile.exists(path + ".index"):
        raise BertError(f"{path}: checkpoint not found (no {posixpath.basename(path)}.index)")
    return path


def reader(prefix):
    """tf.train.load_checkpoint with a one-line BertError for unreadable files."""
    try:
        return tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BertError(f"{prefix}: cannot read checkpoint ({msg})") from None


def assign_all(source, plan, where):
    """Assigns arrays to variables after checking every shape first (all or nothing).

    Args:
        source: file name for error messages.
        plan: list of (name in the file, variable, transpose, array).
        where: "checkpoint" or "file", for error messages.
    """
    for name, var, transpose, value in plan:
        shape = tuple(value.shape[::-1] if transpose else value.shape)
        if shape != tuple(var.shape):
            file_shape = list(value.shape)
            model_shape = list(var.shape[::-1] if transpose else var.shape)
            raise BertError(f"{source}: {name} has shape {file_shape} in the {where} but "
                            f"{model_shape} in the model (wrong bert_config for this checkpoint?)")
    for name, var, transpose, value in plan:
        value = np.asarray(value)
        if transpose:
            value = value.T
        var.assign(value.astype(var.dtype, copy=False))


def is_encoder_name(tf1_name):
    """True for TF1 names the encoder must have (embeddings and blocks; the pooler may be new)."""
    return tf1_name.startswith("bert/") and not tf1_name.startswith("bert/pooler/")


def finish(source, model, loaded, skipped, missing_tf1, layer_of):
    """Raises for a config/file mismatch or a missing encoder, logs missing heads; the report.

    Args:
        source: file name for messages.
        model: the model being loaded.
        loaded, skipped: names in the file.
        missing_tf1: TF1 names of model variables the file lacks.
        layer_of: callable, file name -> encoder layer index or None.
    """
    n_layers = find_encoder(model).bert_config.num_hidden_layers
    extra = [i for n in skipped for i in [layer_of(n)] if i is not None and i >= n_layers]
    if extra:
        raise BertError(f"{source}: the file has encoder layer {max(extra)} but the model only "
                        f"{n_layers} layers (wrong num_hidden_layers?)")
    missing_encoder = [n for n in missing_tf1 if is_encoder_name(n)]
    if missing_encoder:
        raise BertError(f"{source}: {len(missing_encoder)} encoder variables of the model are not "
                        f"in the file, e.g. {missing_encoder[0]} (not a BERT checkpoint for this "
                        f"config?)")
    if missing_tf1:
        heads = sorted({n.split("/")[1] if n.startswith("cls/") else n.split("/")[0]
                        for n in missing_tf1})
        if set(heads) == {"predictions", "seq_relationship"}:
            log.warning("%s holds an encoder only: the masked-LM and next-sentence heads start "
                        "from fresh weights, as expected when pre-training continues from an "
                        "encoder checkpoint (nothing to do)", source)
        else:
            log.warning("%s has no %s: %d variables start from fresh weights, as expected for a "
                        "task head the checkpoint was not trained with (nothing to do)", source,
                        ", ".join(heads), len(missing_tf1))
    return {"loaded": sorted(loaded), "skipped": sorted(skipped), "missing": sorted(missing_tf1)}


def layer_matcher(pattern):
    """file name -> encoder layer index (group 1 of `pattern`), or None."""
    regex = re.compile(pattern)

    def layer_of(name):
        m = regex.match(name)
        return int(m.group(1)) if m else None
    return layer_of


def casing_from_name(path):
    """do_lower_case from the model's name, as the original release named its checkpoints:
    True for `uncased_...`, False for `cased_...` / `multi_cased_...`, else None.

    Args:
        path: the checkpoint path; its last three components are looked at, deepest first
            (TF Hub handles end in a version number).
    """
    import re
    for part in reversed(re.split(r"[/\\]", path.rstrip("/\\"))[-3:]):
        name = part.lower()
        if "uncased" in name:
            return True
        if re.search(r"(^|[^a-z])cased", name):
            return False
    return None
