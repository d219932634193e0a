"""What a sentence-transformers directory says about its model: the Pooling module's mode
(`1_Pooling/config.json`), Normalize (`modules.json`) and `max_seq_length`
(`sentence_bert_config.json`). Read for the Hugging Face format's `Source`."""
import json
import posixpath

from bert_tf import BertError, fileio
from bert_tf.convert.source import file_in, safe_relative

# sentence-transformers' Pooling modes bert_tf has (the pooler is BERT's, "cls").
_POOLING = {"pooling_mode_cls_token": "cls_token", "pooling_mode_mean_tokens": "mean"}
_OTHER = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
          "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


def _modules(path):
    import tensorflow as tf
    if tf.io.gfile.stat(path).length > fileio.MAX_JSON_BYTES:
        raise BertError(f"{path}: over {fileio.MAX_JSON_BYTES >> 20} MiB, not a modules list")
    try:
        modules = json.loads(fileio.read_text(path))
    except ValueError:
        modules = None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BertError(f"{path}: expected a list of modules")
    return modules


def _folders(directory):
    """(folder, modules.json path or None) of the model's own folder, then its parent when
    the parent's modules.json lists this folder as its Transformer (`0_Transformer/`)."""
    here = directory.rstrip("/\\")
    yield here, file_in(here, "modules.json")
    up = posixpath.dirname(here)
    if up and file_in(up, "modules.json"):
        modules = _modules(file_in(up, "modules.json"))
        if posixpath.basename(here) in [m.get("path") for m in modules
                                        if str(m.get("type")).endswith(".Transformer")]:
            yield up, file_in(up, "modules.json")


def pooling(directory, read_pooling=True):
    """(pooling, normalize) a sentence-transformers model declares, else (None, False).

    Reads `modules.json` (the Pooling module's folder, and normalize when it lists a
    `sentence_transformers.models.Normalize`) and the Pooling folder's `config.json`
    (`pooling_mode_cls_token` -> "cls_token", the [CLS] vector without BERT's pooler, as
    sentence-transformers pools; `pooling_mode_mean_tokens` -> "mean").

    Args:
        directory: the checkpoint's directory (None: nothing to read).
        read_pooling: False skips the Pooling config (pooling given explicitly).
    """
    if not directory:
        return None, False
    for d, modules_file in _folders(directory):
        folder, normalize = "1_Pooling", False
        for m in _modules(modules_file) if modules_file else []:
            kind = str(m.get("type", ""))
            if kind.endswith(".Pooling") and m.get("path"):
                folder = m["path"]
                if not isinstance(folder, str):
                    raise BertError(f"{modules_file}: the Pooling module's path is not a string")
                safe_relative(d, folder, "module path")  # never read outside the model
            normalize = normalize or kind.endswith(".Normalize")
        config_file = file_in(d, f"{folder}/config.json") if read_pooling else None
        if config_file is None:
            if modules_file:
                return None, normalize
            continue
        conf = fileio.read_json(config_file)
        modes = [k for k in (*_POOLING, *_OTHER) if isinstance(conf, dict) and conf.get(k)]
        if len(modes) != 1 or modes[0] not in _POOLING:
            raise BertError(f"{config_file}: pooling {' + '.join(modes) or '(none)'} is not "
                            f"supported (bert_tf pools with {' or '.join(_POOLING)}; pass "
                            f"pooling=... to choose)")
        return _POOLING[modes[0]], normalize
    return None, False


def max_seq_length(directory):
    """`sentence_bert_config.json`'s max_seq_length (int), or None."""
    for d, _ in _folders(directory):
        path = file_in(d, "sentence_bert_config.json")
        if path:
            value = fileio.read_json(path).get("max_seq_length")
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 3):
                raise BertError(f"{path}: max_seq_length {value!r} is not an int >= 3")
            return value
    return None
