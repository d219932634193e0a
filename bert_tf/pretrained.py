"""Any BERT checkpoint in one line: `bert_tf.from_pretrained(path, task=..., text_input=...)`.

`path` may be an original release directory (`bert_config.json`, `vocab.txt`,
`bert_model.ckpt.*`), a Hugging Face directory, a keras-hub preset, a Model Garden checkpoint,
a TF Hub or bert_tf SavedModel (also in a TF Serving `<dir>/<version>/` folder, the newest,
or under `<dir>/encoder/`), or one of our training output directories
(the table in `bert_tf.convert.formats` tells them apart). The config, vocab and casing come from the source:

  original / training / Model Garden   `bert_config.json` beside the checkpoint (training: else
                 the config of an export under `export/`; Model Garden: else the checkpoint's
                 shapes, with what `params.yaml`'s BERT encoder says over them), `vocab.txt`
                 beside it, casing as the original release named its models (`uncased_...`
                 lower-cases, `cased_...`/`multi_cased_...` not, others: the original's
                 default, True)
  Hugging Face   `config.json` (none beside a `.safetensors`: pass `bert_config_file=`),
                 `vocab.txt`, `tokenizer_config.json` (`do_lower_case`, `strip_accents`)
  keras-hub      the preset's config, `assets/tokenizer/vocabulary.txt`, `tokenizer.json`
                 (`lowercase`, `strip_accents`: keras-hub's `BertTokenizer(lowercase=True)`
                 lower-cases and keeps accents, and so does the text model built from it)
  SavedModels    the weights' shapes (TF Hub) or the export's metadata, its vocab asset and
                 `do_lower_case`

With `text_input=True` the model takes raw strings (`BertTextModel`: the in-graph tokenizer in
front), so `model.fit(list_of_strings, labels)` and `model.predict(strings)` work, as with
keras-hub's `BertTextClassifier.from_preset`, and `model.save("m.keras")` reloads after
`import bert_tf`.

>>> clf = bert_tf.from_pretrained("uncased_L-12_H-768_A-12", task="classification",
...                               num_classes=2, text_input=True)      # doctest: +SKIP
>>> clf.fit(["a fine film", "a dull film"], [1, 0])                    # doctest: +SKIP
"""
import bert_tf  # noqa: F401  (sets KERAS_BACKEND before keras is imported)
import keras

from bert_tf import BertError
from bert_tf.convert import formats
from bert_tf.convert.common import casing_from_name  # noqa: F401  (API)
from bert_tf.convert.source import Source as PretrainedSource  # noqa: F401  (API)
from bert_tf.modeling import models as bm
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.keras_data import KerasConventions
from bert_tf.tokenization.text_graph import BertPreprocessingLayer

TASKS = {None: BertEncoder, "pretraining": bm.BertPretrainer, "classification": bm.BertClassifier,
         "span": bm.BertSpanLabeler, "tagging": bm.BertTokenClassifier,
         "embeddings": bm.BertEmbedder}


def read_pretrained(path, bert_config_file=None, vocab_file=None, do_lower_case=None):
    """Detects the format of `path` and finds its config, vocab and casing
    (`bert_tf.convert.formats.read`).

    Args:
        path: see the module docstring.
        bert_config_file: overrides the source's config (or gives what it lacks, e.g. for a
            training directory without an export).
        vocab_file: overrides the source's vocab (or gives what it lacks).
        do_lower_case: overrides the source's casing (or gives what it lacks).

    Returns:
        A `bert_tf.convert.source.Source` (format, path, directory, bert_config, vocab_file,
        do_lower_case, strip_accents, casing_from: "source", "name", "argument" or None).
    """
    return formats.read(path, bert_config_file, vocab_file, do_lower_case)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTextModel(KerasConventions, keras.Model):
    """A task model (or encoder) with the in-graph tokenizer in front: strings in.

    Input: a string batch [B], or a tuple of two (sentence pairs: `[CLS] a [SEP] b [SEP]`).
    Output: the task model's `logits` tensor for classification / tagging (so `fit(texts,
    labels)` works as in keras-hub), the `embedding` tensor for embeddings, otherwise its
    output dict. `fit`, `evaluate`, `predict`, `validation_data` and direct calls take Python
    lists or arrays (a tuple of two lists for pairs; labels as lists or arrays), and
    `export(path)` writes the text-in TF Serving SavedModel
    (`bert_tf.export.keras_export.export_model`). `fit`, `evaluate` and `predict` compute
    each batch at its real length as the inner model's outputs allow
    (`bert_tf.modeling.keras_data`: per-position models are cut in `predict` only, their
    outputs back at seq_length, 0 at padding) unless `pad_to_max_seq_length` (attribute, or
    keyword of the three).

    Args:
        preprocessor: a `BertPreprocessingLayer` (vocab, casing, seq_length).
        model: a `BertEncoder` or `bert_tf.modeling.models` task model.
        **kwargs: `keras.Model` arguments.
    """

    _text_input = True

    def __init__(self, preprocessor, model, pad_to_max_seq_length=False, **kwargs):
        super().__init__(**kwargs)
        self.pad_to_max_seq_length = bool(pad_to_max_seq_length)
        self.preprocessor = preprocessor
        self.model = model
        # Strings never go through XLA (Keras' jit_compile="auto" would try).
        self.supports_jit = preprocessor.supports_jit = False

    @property
    def encoder(self):
        """The BertEncoder inside."""
        return bm.find_encoder(self.model)

    def build(self, input_shape=None):
        bm.ensure_built(self.model)
        self.built = True

    def get_build_config(self):
        return {"input_shape": None}  # build() needs no shapes

    def call(self, inputs, training=None):
        texts = list(inputs) if isinstance(inputs, (list, tuple)) else inputs
        inputs = self.preprocessor(texts)
        # fit / evaluate / predict cut the inner model's call (strings never go through XLA).
        out = self._call_cut(lambda x: self.model(x, training=training), inputs, self.model)
        if isinstance(self.model, (bm.BertClassifier, bm.BertTokenClassifier)):
            return out["logits"]
        if isinstance(self.model, bm.BertEmbedder):
            return out["embedding"]
        return out

    def get_config(self):
        return {"preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
                "model": keras.saving.serialize_keras_object(self.model),
                "pad_to_max_seq_length": self.pad_to_max_seq_length,
                "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("preprocessor", "model"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


def _task_model(task, cfg, num_classes, pooling=None, normalize=False):
    if task != "embeddings" and (pooling is not None or normalize):
        raise BertError(f"pooling / normalize are only for task='embeddings', not task={task!r}")
    if task == "embeddings":
        if num_classes is not None:
            raise BertError("num_classes is only for task='classification' or 'tagging', not "
                            "task='embeddings'")
        return bm.BertEmbedder.from_bert_config(cfg, pooling=pooling or "cls",
                                                normalize=normalize)
    if task not in TASKS:
        raise BertError(f"task={task!r}: expected one of "
                        f"{', '.join(repr(t) for t in TASKS)}")
    if task in ("classification", "tagging"):
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
            raise BertError(f"task={task!r} needs num_classes (a positive int), got "
                            f"{num_classes!r}")
        return TASKS[task].from_bert_config(cfg, num_classes)
    if num_classes is not None:
        raise BertError(f"num_classes is only for task='classification' or 'tagging', not "
                        f"task={task!r}")
    if task is None:
        return BertEncoder.from_bert_config(cfg, name="encoder")
    return TASKS[task].from_bert_config(cfg)


def from_pretrained(path, task=None, num_classes=None, text_input=False, seq_length=None, *,
                    bert_config_file=None, vocab_file=None, do_lower_case=None, pooling=None,
                    normalize=None, labels=None, pad_to_max_seq_length=False):
    """A built Keras model holding the weights of any BERT checkpoint bert_tf reads.

    Args:
        path: an original release directory or checkpoint prefix, a Hugging Face directory, a
            keras-hub preset, a Model Garden checkpoint (directory or prefix), a TF Hub or
            bert_tf SavedModel, or one of our training output directories.
        task: None (the BertEncoder), "pretraining" (BertPretrainer), "classification"
            (BertClassifier), "span" (BertSpanLabeler), "tagging" (BertTokenClassifier) or
            "embeddings" (BertEmbedder: one vector per input, pooled and normalised as a
            sentence-transformers directory's `1_Pooling/config.json` and `modules.json`
            say, else BERT's pooler output). Heads the checkpoint lacks keep their
            initialisation (logged).
        num_classes: int, for "classification" and "tagging".
        text_input: put the in-graph tokenizer in front (`BertTextModel`); classification
            and tagging models come compiled as keras-hub's (Adam 5e-5, sparse categorical
            cross-entropy on the logits, accuracy).
        seq_length: int, what text input is packed (and truncated) to; default: a
            sentence-transformers directory's max_seq_length, else 128.
        bert_config_file: keyword-only override of the source's config (see
            `read_pretrained`).
        vocab_file: keyword-only override of the source's vocab.
        do_lower_case: keyword-only override of the source's casing.
        pooling: task="embeddings": "cls" (the pooler), "cls_token" (the [CLS] vector) or
            "mean" (masked mean); overrides the source's sentence-transformers config.
        normalize: task="embeddings": L2-normalise (overrides the source's).
        labels: "classification" / "tagging": class or tag names in logit order (num_classes
            defaults to their count); kept in the model's config and served by every export.
        pad_to_max_seq_length: True: `fit` / `evaluate` / `predict` keep every batch at full
            length (default: each batch cut to its real length; `keras_data`).

    Returns:
        The model (the encoder or task model, or a `BertTextModel` with text_input).

    Raises:
        BertError: one line: unknown format (listing what was looked for), a missing config or
            vocab, a bad task / num_classes, a config that does not fit the weights.
    """
    src = read_pretrained(path, bert_config_file, vocab_file, do_lower_case)
    if task == "embeddings":
        st_pooling, st_normalize = src.pooling(pooling is None)
        pooling = pooling or st_pooling
        normalize = st_normalize if normalize is None else bool(normalize)
    if labels is not None:
        if task not in ("classification", "tagging"):
            raise BertError(f"labels are only for task='classification' or 'tagging', not "
                            f"task={task!r}")
        labels = bm.check_labels(labels, len(labels) if num_classes is None else num_classes,
                                 "num_classes")
        num_classes = len(labels)
    model = _task_model(task, src.bert_config, num_classes, pooling, normalize)
    if labels is not None:
        model.labels = labels
    if isinstance(model, KerasConventions):  # the encoder alone has no fit / predict
        model.pad_to_max_seq_length = bool(pad_to_max_seq_length)
    bm.build_model(model)
    # An embedder's only weights are its encoder's.
    target = model.encoder if isinstance(model, bm.BertEmbedder) else model
    src.load(target)
    if not text_input:
        return model
    return text_model(model, src, seq_length or src.max_seq_length or 128,
                      pad_to_max_seq_length)


def text_model(model, source, seq_length=128, pad_to_max_seq_length=False):
    """`BertTextModel` around `model` with `source`'s vocab and casing.

    Args:
        model: the built encoder or task model.
        source: a `PretrainedSource`.
        seq_length: int, the packed length.
        pad_to_max_seq_length: compute every batch at seq_length (default: its real length).
    """
    where = source.detected.path
    if source.vocab_file is None:
        raise BertError(f"{where}: no vocab found with the checkpoint: pass vocab_file=...")
    cfg = source.bert_config
    if not 3 <= int(seq_length) <= cfg.max_position_embeddings:
        raise BertError(f"seq_length={seq_length}: must be in [3, max_position_embeddings="
                        f"{cfg.max_position_embeddings}]")
    pre = BertPreprocessingLayer(source.vocab_file, source.do_lower_case, int(seq_length),
                                 strip_accents=source.strip_accents, name="preprocessor")
    from bert_tf.tokenization.vocab_check import check_vocab_count
    check_vocab_count(len(pre.vocabulary), cfg.vocab_size, source.vocab_file, where)
    out = BertTextModel(pre, model, pad_to_max_seq_length, name=f"{model.name}_text")
    out.build()
    if isinstance(model, (bm.BertClassifier, bm.BertTokenClassifier)):
        out.compile(optimizer=keras.optimizers.Adam(5e-5),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=[keras.metrics.SparseCategoricalAccuracy()])
    return out
