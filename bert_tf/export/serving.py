"""TF Serving layout: export/<model_name>/<version>/ with warm-up requests, models.config.

A version folder is built as `<version>.tmp-<pid>-<rand>` next to its final place and renamed
when complete: TF Serving only loads all-digit folder names, so it never sees a half-written
version. Warm-up requests (`assets.extra/tf_serving_warmup_requests`, a TFRecord of
`PredictionLog`s holding real `PredictRequest`s) are replayed by the server at load time so the
first client request does not pay for graph initialisation.
"""
import re

import bert_tf  # noqa: F401
import numpy as np
import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.export import common
from bert_tf.export.end_to_end import EndToEndModule

WARMUP_FILE = "tf_serving_warmup_requests"

DEFAULT_WARMUP_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "",
    "Serving BERT with TF Serving: warm-up request.",
)
DEFAULT_FILL_MASK_TEXTS = ("The capital of France is [MASK].", "[MASK] is a [MASK].")
DEFAULT_WARMUP_PAIRS = (("Who jumps?", "The quick brown fox jumps over the lazy dog."),)


def _serving_apis():
    try:
        from tensorflow_serving.apis import predict_pb2, prediction_log_pb2
    except ImportError:
        raise BertError("tensorflow-serving-api is not installed: pip install "
                        "tensorflow-serving-api==2.20.0 (needed to write warm-up requests)"
                        ) from None
    return predict_pb2, prediction_log_pb2


def version_dirs(model_dir):
    """Integer versions present under model_dir (what TF Serving would consider)."""
    if not tf.io.gfile.isdir(model_dir):
        return []
    out = []
    for name in tf.io.gfile.listdir(model_dir):
        name = name.rstrip("/")
        if re.fullmatch(r"[0-9]+", name):
            out.append(int(name))
    return sorted(out)


def next_version(model_dir):
    """The version a new export under model_dir gets: one past the highest, else 1."""
    versions = version_dirs(model_dir)
    return versions[-1] + 1 if versions else 1


def predict_request(model_name, signature_name, inputs):
    """A tensorflow_serving PredictRequest.

    Args:
        model_name: the served model's name.
        signature_name: e.g. "serving_default".
        inputs: dict of input name -> array-like (dtype inferred).
    """
    predict_pb2, _ = _serving_apis()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def warmup_requests(module, model_name, texts=None, pairs=None):
    """PredictRequests covering serving_default (batch 1 and a batch), serving_pairs and
    predict_ids (ids computed in-graph from the same texts), so every signature is warm.

    Args:
        module: the EndToEndModule being exported.
        model_name: the served model's name.
        texts: warm-up sentences (default: fill_mask or plain examples by task).
        pairs: (text, text_b) tuples for serving_pairs; empty skips that signature.
    """
    if module.preprocessing is None:
        return ids_warmup_requests(model_name, module._cfg.vocab_size,
                                   ("serving_default", "predict_ids"))
    if texts is None:
        texts = DEFAULT_FILL_MASK_TEXTS if module.task == "fill_mask" else DEFAULT_WARMUP_TEXTS
    texts = [str(t) for t in texts]
    pairs = DEFAULT_WARMUP_PAIRS if pairs is None else pairs
    if not texts:
        raise BertError("warm-up texts: need at least one text")
    text_tensor = lambda xs: tf.constant([x.encode("utf-8") for x in xs], tf.string)
    reqs = [predict_request(model_name, "serving_default", {"text": text_tensor(texts[:1])}),
            predict_request(model_name, "serving_default", {"text": text_tensor(texts)})]
    if pairs:
        reqs.append(predict_request(model_name, "serving_pairs", {
            "text": text_tensor([a for a, _ in pairs]), "text_b": text_tensor([b for _, b in pairs])}))
    ids = module.preprocess(text_tensor(texts))
    reqs.append(predict_request(model_name, "predict_ids",
                                {k: v.numpy() for k, v in ids.items()}))
    return reqs


def ids_warmup_requests(model_name, vocab_size, signature_names=("serving_default",)):
    """PredictRequests for ids-in signatures: a batch of 1 and a padded batch of 2.

    Args:
        model_name: the served model's name.
        vocab_size: the model's vocab_size (the ids stay below it).
        signature_names: the signatures to warm.
    """
    ids = np.minimum(np.array([[1, 2, 3, 4], [1, 2, 0, 0]], np.int32), vocab_size - 1)
    mask = (np.arange(4)[None, :] < np.array([[4], [2]])).astype(np.int32)
    batch = {"input_word_ids": ids * mask, "input_mask": mask,
             "input_type_ids": np.zeros_like(ids)}
    first = {k: v[:1] for k, v in batch.items()}
    return [predict_request(model_name, name, inputs) for name in signature_names
            for inputs in (first, batch)]


def write_warmup_file(path, requests):
    """TFRecord of PredictionLog(predict_log=PredictLog(request=...)) at path (atomically).

    Args:
        path: usually `assets.extra/tf_serving_warmup_requests` of the export being built.
        requests: PredictRequests (`warmup_requests`).

    Returns:
        `path`.
    """
    _, prediction_log_pb2 = _serving_apis()
    tmp = fileio.tmp_name(path)
    with tf.io.TFRecordWriter(tmp) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return path


def read_warmup_file(path):
    """The PredictRequests stored in a warm-up file."""
    _, prediction_log_pb2 = _serving_apis()
    out = []
    for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        out.append(log.predict_log.request)
    return out


def run_predict_request(loaded, request):
    """Runs a PredictRequest against a tf.saved_model.load()ed object like the server does:
    signature by name, inputs from TensorProtos (checks warm-up files without a server).

    Args:
        loaded: the object tf.saved_model.load returned.
        request: a PredictRequest; an empty signature name means serving_default.

    Returns:
        Dict of output name -> numpy array.
    """
    name = request.model_spec.signature_name or "serving_default"
    if name not in loaded.signatures:
        raise BertError(f"warm-up request: unknown signature {name!r}")
    fn = loaded.signatures[name]
    kwargs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
    return {k: v.numpy() for k, v in fn(**kwargs).items()}


def write_version(module, version_dir, model_name, warmup_texts=None, warmup_pairs=None,
                  replace=False, metadata=None):
    """Saves an EndToEndModule (or IdsModule) at version_dir atomically, with its warm-up
    requests in assets.extra; returns version_dir.

    Args:
        module: the module to save.
        version_dir: the folder TF Serving loads (`<model_base>/<version>`).
        model_name: the served name the warm-up requests carry.
        warmup_texts, warmup_pairs: as `export_for_serving`.
        replace: swap out an existing version_dir (else BertError).
        metadata: extra keys for bert_tf_export.json.
    """
    requests = warmup_requests(module, model_name, warmup_texts, warmup_pairs)

    def add_warmup(tmp_dir):
        write_warmup_file(common.join(tmp_dir, common.EXTRA_DIR, WARMUP_FILE), requests)

    meta = module.metadata()
    meta.update(metadata or {})
    return common.write_saved_model(module, version_dir, module.signatures(), meta,
                                    before_publish=add_warmup, replace=replace)


def export_for_serving(export_base, model_name, version=None, *, model, vocab_file,
                       do_lower_case=True, task="embeddings", seq_length=128, labels=None,
                       top_k=5, max_masks=8, max_answer_length=30, warmup_texts=None,
                       warmup_pairs=None, strip_accents=None, pooling=None, normalize=None,
                       preprocessing=None):
    """Writes the end-to-end SavedModel to <export_base>/<model_name>/<version>/ atomically,
    with warm-up requests. Returns the version folder.

    Args:
        export_base: TF Serving's base folder (local or gs://...).
        model_name: letters, digits, _ . - (the served name).
        version: positive int; None takes the next free one. An existing version is an error:
            served versions are immutable.
        model: as `end_to_end.export_end_to_end`, as are the parameters below up to
            `max_answer_length`.
        vocab_file: the vocab of the in-graph tokenizer.
        do_lower_case: its casing.
        task: the export's task.
        seq_length: what text is packed to.
        labels: the class or tag names.
        top_k: fill-mask: predictions per mask.
        max_masks: fill-mask: masks per text.
        max_answer_length: span: the longest answer.
        warmup_texts: sentences for the warm-up requests (default: built-in examples).
        warmup_pairs: (text, text_b) tuples for serving_pairs warm-up.
        strip_accents: as `end_to_end.export_end_to_end`.
        pooling: as `end_to_end.export_end_to_end`.
        normalize: as `end_to_end.export_end_to_end`.
        preprocessing: a `TextPreprocessor` of these settings shared with other exports (its
            tokenizer is traced once for all of them).
    """
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", model_name or ""):
        raise BertError(f"--model_name: {model_name!r} is not a valid model name "
                        "(letters, digits, _ . -)")
    model_dir = common.join(export_base, model_name)
    if version is None:
        version = next_version(model_dir)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise BertError(f"--version: must be a positive integer, got {version!r}")
    final = common.join(model_dir, str(version))
    if tf.io.gfile.exists(final):
        raise BertError(f"{final}: version {version} already exists (versions are immutable "
                        "once served; pick another --version)")
    module = EndToEndModule(model, vocab_file, do_lower_case, task, seq_length, labels, top_k,
                            max_masks, max_answer_length, strip_accents=strip_accents,
                            pooling=pooling, normalize=normalize, preprocessing=preprocessing)
    return write_version(module, final, model_name, warmup_texts, warmup_pairs,
                         metadata=dict(model_name=model_name, version=version))


def models_config_text(models):
    """ModelServerConfig text proto for `--model_config_file`.

    models: iterable of (name, base_path) or dicts with name, base_path and optionally
    versions (list of ints to pin; default: serve the latest).
    """
    from google.protobuf import text_format
    try:
        from tensorflow_serving.config import model_server_config_pb2
    except ImportError:
        raise BertError("tensorflow-serving-api is not installed (needed for models.config)"
                        ) from None
    config = model_server_config_pb2.ModelServerConfig()
    seen = set()
    for entry in models:
        if not isinstance(entry, dict):
            entry = dict(zip(("name", "base_path"), entry))
        name, base_path = entry.get("name"), entry.get("base_path")
        if not name or not base_path:
            raise BertError(f"models.config: each model needs a name and a base_path, got {entry}")
        if name in seen:
            raise BertError(f"models.config: duplicate model name {name!r}")
        seen.add(name)
        item = config.model_config_list.config.add()
        item.name = name
        item.base_path = base_path
        item.model_platform = "tensorflow"
        if entry.get("versions"):
            item.model_version_policy.specific.versions.extend(int(v) for v in entry["versions"])
    return text_format.MessageToString(config)


def write_models_config(path, models):
    """Writes models_config_text(models) to path atomically; returns path.

    Args:
        path: the file for TF Serving's `--model_config_file`.
        models: as `models_config_text`.
    """
    return fileio.write_text_atomic(path, models_config_text(models))
