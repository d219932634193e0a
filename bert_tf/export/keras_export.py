"""`model.export(path)` on every bert_tf model: the TF Serving SavedModel in one call.

`path` is the SavedModel folder itself, as in Keras' `export(filepath)`. TF Serving serves a
model base holding numbered versions, so export to `<model_base>/<version>`, e.g.
`clf.export("models/clf/1")` and serve `models/clf`. What is written there, with warm-up
requests in `assets.extra/tf_serving_warmup_requests`, is what `bert-export-savedmodel`
writes for the model's task:
  text-in models (`BertTextModel`) and any model given `vocab_file=`: the end-to-end export
      (`serving_default(text)`, `serving_pairs(text, text_b)`, `predict_ids`, `preprocess`),
      with the model's own vocab, casing and seq_length;
  ids-in task models without a vocab: the same task outputs from ids (`serving_default` and
      `predict_ids` take `input_word_ids`, `input_mask`, `input_type_ids`);
  a `BertPretrainer` without a vocab: the encoder export with its `mlm` sub-model
      (`bert-export-savedmodel --kind=encoder --with_mlm`).
The task follows the model: BertClassifier -> classification (regression with one output),
BertTokenClassifier -> tagging, BertSpanLabeler -> span, BertPretrainer -> fill_mask,
BertEmbedder / BertEncoder -> embeddings.
"""
import os
import re
import shutil
import tempfile

import bert_tf  # noqa: F401

from bert_tf import BertError
from bert_tf.export import common, serving
from bert_tf.export.end_to_end import TASKS, EndToEndModule, IdsModule
from bert_tf.modeling import models
from bert_tf.modeling.encoder import BertEncoder


def task_of(model):
    """The export task a bert_tf model (encoder or task model) serves."""
    if isinstance(model, models.BertClassifier):
        return "classification" if model.num_classes > 1 else "regression"
    if isinstance(model, models.BertTokenClassifier):
        return "tagging"
    if isinstance(model, models.BertSpanLabeler):
        return "span"
    if isinstance(model, models.BertPretrainer):
        return "fill_mask"
    if isinstance(model, (models.BertEmbedder, BertEncoder)):
        return "embeddings"
    raise BertError(f"export: {type(model).__name__} is not a bert_tf model (an encoder, a "
                    f"bert_tf.modeling.models task model or a from_pretrained text model)")


def unwrap(model):
    """(inner model, vocabulary tokens or None, do_lower_case, strip_accents, seq_length) of
    a bert_tf model; a text-in model gives its preprocessor's settings."""
    from bert_tf.pretrained import BertTextModel
    if isinstance(model, BertTextModel):
        pre = model.preprocessor
        return model.model, list(pre.vocabulary), pre.do_lower_case, pre.strip_accents, \
            pre.seq_length
    return model, None, None, None, None


def _served_name(filepath):
    parts = [p for p in re.split(r"[/\\]", filepath) if p]
    name = parts[-2] if len(parts) > 1 and parts[-1].isdigit() else (parts or ["model"])[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip("._-") or "model"


def export_model(model, filepath, *, vocab_file=None, do_lower_case=None, strip_accents=None,
                 task=None, seq_length=None, labels=None, pooling=None, normalize=None,
                 top_k=5, max_masks=8, max_answer_length=30, warmup_texts=None,
                 warmup_pairs=None, model_name=None, verbose=True):
    """Writes the TF Serving SavedModel of `model` at `filepath` (see the module docstring).

    Args:
        model: a `BertTextModel`, a `bert_tf.modeling.models` task model or a `BertEncoder`.
        filepath: the SavedModel folder, usually `<model_base>/<version>` (local or gs://);
            an existing one is replaced atomically (TF Serving does not reload a version it
            already serves: export a new version number for that).
        vocab_file: makes an ids-in model's export text-in (a text-in model has its own).
        do_lower_case, strip_accents: with vocab_file (default True / as do_lower_case).
        task: default from the model's class; "embeddings" serves any model's encoder.
        seq_length: packed length of the text signatures (default the text model's, else 128).
        labels: classification / tagging label strings, in logit order.
        pooling, normalize: embeddings: the `embedding` output (default a BertEmbedder's
            own, else "cls" unnormalised; see `end_to_end.export_end_to_end`).
        top_k, max_masks, max_answer_length: fill_mask / span settings.
        warmup_texts, warmup_pairs: sentences for the warm-up requests.
        model_name: the name in the warm-up requests (default the model base's folder name).
        verbose: print one line naming the export and its signatures.

    Returns:
        `filepath`.
    """
    filepath = os.fspath(filepath).rstrip("/\\")
    inner, tokens, lower, accents, length = unwrap(model)
    if tokens is not None and vocab_file is not None:
        raise BertError("export: vocab_file: a text-in model exports its own vocab")
    lower = lower if do_lower_case is None else bool(do_lower_case)
    accents = accents if strip_accents is None else bool(strip_accents)
    seq_length = int(seq_length or length or 128)
    models.ensure_built(inner)
    task = task or task_of(inner)
    if task not in TASKS:
        raise BertError(f"export: task={task!r}: expected one of {', '.join(TASKS)}")
    name = model_name or _served_name(filepath)
    options = dict(labels=labels, top_k=top_k, max_masks=max_masks,
                   max_answer_length=max_answer_length, pooling=pooling, normalize=normalize)
    tmp = None
    try:
        if tokens is not None:
            tmp = tempfile.mkdtemp(prefix="bert_tf_export_")
            vocab_file = os.path.join(tmp, "vocab.txt")
            with open(vocab_file, "w", encoding="utf-8", newline="\n") as f:
                f.write("\n".join(tokens) + "\n")
        if vocab_file is None and task == "fill_mask":
            from bert_tf.export.encoder import export_encoder
            requests = serving.ids_warmup_requests(name, inner.bert_config.vocab_size)
            export_encoder(inner, filepath, with_mlm=True, before_publish=lambda d: (
                serving.write_warmup_file(common.join(d, common.EXTRA_DIR, serving.WARMUP_FILE),
                                          requests)))
            signatures = ["serving_default"]
        else:
            if vocab_file is None:
                cfg = models.find_encoder(inner).bert_config
                module = IdsModule(inner, task, min(seq_length, cfg.max_position_embeddings),
                                   **options)
            else:
                module = EndToEndModule(inner, os.fspath(vocab_file),
                                        True if lower is None else lower, task, seq_length,
                                        strip_accents=accents, **options)
            last = os.path.basename(filepath)
            extra = dict(model_name=name, **({"version": int(last)} if last.isdigit() else {}))
            serving.write_version(module, filepath, name, warmup_texts, warmup_pairs,
                                  replace=True, metadata=extra)
            signatures = sorted(module.signatures())
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if verbose:
        print(f"Saved the {task} SavedModel for TF Serving at '{filepath}' (signatures: "
              f"{', '.join(signatures)}; warm-up requests included)")
        if not os.path.basename(filepath).isdigit():
            print(f"note: TF Serving loads numbered versions: serve a folder holding this one "
                  f"as e.g. <model_base>/1 (model.export('<model_base>/1'))")
    return filepath
