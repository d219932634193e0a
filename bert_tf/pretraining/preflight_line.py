"""What the pre-flight line says (bert_tf.pretraining.preflight): its figures cover the whole
data, from the packer's journal (`<dir>/.bert_tf/<name>.stats.json`,
bert_tf.pretraining_data.sequence_packing_run) when every file is a shard of one, else the
records sampled. No TensorFlow import for local files.
"""
import json
import os
import posixpath

from bert_tf.fileio import is_local


def _open(path):
    if is_local(path):
        return open(path, "rb")
    import tensorflow as tf
    return tf.io.gfile.GFile(path, "rb")


def _listdir(folder):
    if is_local(folder):
        return os.listdir(folder)
    import tensorflow as tf
    return tf.io.gfile.listdir(folder)


def _path_lib(path):
    # gs://b/x must keep its "//" (os.path.normpath would make it gs:/b/x).
    return os.path if is_local(path) else posixpath


def _norm(path):
    return os.path.normpath(path) if is_local(path) else path


def packer_journal(files, shape):
    """Whole-data figures of packed `files` from bert-pack-pretraining-data's journals
    (`<dir>/.bert_tf/*.stats.json`), or None unless every file is a shard of a complete
    journal of the same (S, P, N).

    Args:
        files: the packed record files.
        shape: (S, P, N) of their records.
    Returns:
        {"rows", "sequences", "padding", "sequences_per_row", "journals"} or None.
    """
    rows = sequences = tokens = 0
    journals, left = set(), {_norm(p) for p in files}
    for folder in sorted({_path_lib(p).dirname(p) for p in left}):
        path_lib = _path_lib(folder)
        meta = path_lib.join(folder, ".bert_tf")
        try:
            names = sorted(n for n in _listdir(meta) if n.endswith(".stats.json"))
        except Exception:  # noqa: BLE001 - no journal folder: the figures are sampled
            return None
        for name in names:
            try:
                with _open(path_lib.join(meta, name)) as f:
                    j = json.loads(f.read())
                if (j.get("mode"), j.get("complete")) != ("pack", True) or (
                        j["max_seq_length"], j["num_predictions"],
                        j["max_sequences_per_pack"]) != tuple(shape):
                    continue
                for i, output in enumerate(j["outputs"]):
                    path = path_lib.join(folder, posixpath.basename(output))
                    if path in left:  # the journal names where it wrote; the data may be moved
                        shard = j["shards"][str(i)]
                        rows, sequences = rows + shard["packs"], sequences + shard["sequences"]
                        tokens += shard["tokens"]
                        left.discard(path)
                        journals.add(path_lib.join(meta, name))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    if left or not rows:
        return None
    return {"rows": rows, "sequences": sequences, "padding": 1 - tokens / (rows * shape[0]),
            "sequences_per_row": sequences / rows, "journals": sorted(journals)}


def summary_line(info, records_per_file, batch_size=None, label=None):
    """The pre-flight line: the records' kind, and figures that say what they cover.

    Args:
        info: `check_pretraining_files`' result.
        records_per_file: leading records checked per file (named for sampled figures).
        batch_size: --train_batch_size (packed: the line gives the sequences a step holds).
        label: what the records are for ("phase 2"), said first; None: nothing.
    """
    s, p, n = info["shape"]
    kind = (f"packed records (up to {n} sequences per pack; {p} predictions)" if info["packed"]
            else "ordinary (unpacked) records")
    checked = f"{info['records']} record(s) of {info['files']} file(s) checked"
    if info["source"] == "journal":
        cover = (f"the whole data (the packer's journal): {info['rows']} rows holding "
                 f"{info['sequences']} sequences, ")
    else:
        each = f" ({records_per_file} at most of each file)" if info["files"] > 1 else ""
        cover = f"in a sample, the first {info['records']} record(s){each}: "
    figures = f"padding {100 * info['padding']:.1f}% of the tokens"
    if info["packed"]:
        figures = f"{info['sequences_per_row']:.2f} sequences per row on average, " + figures
        if batch_size:
            batch_flag = "--phase2_train_batch_size" if label == "phase 2" else \
                "--train_batch_size"
            figures += (f"; a step of {batch_flag}={batch_size} rows holds "
                        f"{batch_size * info['sequences_per_row']:.1f} sequences on average")
    head = f"pre-flight ({label})" if label else "pre-flight"
    return f"{head}: {kind}, {checked}; {cover}{figures}"
