"""Keras conventions for every bert_tf model: Python lists and NumPy arrays as data.

`KerasConventions` (a keras.Model mixin) turns the x / y / sample_weight / validation_data of
`fit`, `evaluate`, `predict` and the inputs of a direct call into what Keras' data adapters
take (Keras itself refuses a list of labels, and blames x for it), and names the argument at
fault in a one-line `BertError`. Text-in models take strings (a tuple of two lists for
sentence pairs); ids-in models take the dict of `input_word_ids`, `input_mask`,
`input_type_ids`. `export(path)` writes the TF Serving export (`bert_tf.export.keras_export`).

`fit`, `evaluate` and `predict` compute only the real tokens: each batch is cut to its longest
real length (rounded up to one of `real_length.length_buckets(S)`) before the model runs.
What is cut depends on the model's declared outputs (`position_outputs`, a class attribute):
- models whose outputs are all pooled (classifier, embedder) are cut in all three;
- per-position models (token classifier, span labeler) are cut in `predict` only (their
  losses in `fit` / `evaluate` see every position): their per-position outputs come back
  [B, S, ...] with 0 at every padding position (`SPAN_PAD_LOGIT`, -1e9, for span start/end
  logits);
- `BertPretrainer` is never cut (`cut_in_keras = False`: its masked-LM positions may point
  past the cut).
A direct call (and `predict_on_batch` / `train_on_batch` / `test_on_batch`) computes what it
is given. Under XLA (Keras' `jit_compile`, which "auto" turns on for ids-in models on a GPU)
nothing is cut: the compiled step keeps the fixed shape. `pad_to_max_seq_length=True` (a
keyword of the three, or the model attribute) keeps the fixed shape everywhere.
"""
import contextlib

import numpy as np
import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling import real_length
from bert_tf.modeling.real_length import SPAN_PAD_LOGIT

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# What restored per-position outputs hold at padding (others: 0).
PAD_VALUES = {"start_logits": SPAN_PAD_LOGIT, "end_logits": SPAN_PAD_LOGIT}

_PASS_THROUGH = (tf.Tensor, tf.data.Dataset, tf.RaggedTensor, tf.SparseTensor)


def _is_array_like(v):
    return isinstance(v, (list, tuple, np.ndarray))


def _first_bad(values, ok):
    for i, v in enumerate(values):
        if not ok(v):
            return i, v
    return None


def to_text(x, what="x"):
    """Strings (list, NumPy array, tensor) or a tuple of two of them -> tf.string tensors.

    Args:
        x: the data; datasets, generators and tensors pass through.
        what: the argument's name, for errors.
    """
    if x is None or isinstance(x, _PASS_THROUGH) or not _is_array_like(x) and not isinstance(
            x, (str, bytes)):
        return x  # datasets, generators, PyDatasets, tensors: Keras' own business
    if isinstance(x, (str, bytes)):
        raise BertError(f"{what}: a single string; pass a list of strings")
    pair = isinstance(x, tuple) or any(isinstance(v, _PASS_THROUGH) for v in x)
    if pair and len(x) == 2 and not isinstance(x[0], (str, bytes)):
        a, b = to_text(x[0], what), to_text(x[1], what)
        if a.shape[0] != b.shape[0]:
            raise BertError(f"{what}: the two lists of a sentence pair have {a.shape[0]} and "
                            f"{b.shape[0]} texts")
        return a, b
    values = np.asarray(x, dtype=object)
    if values.ndim != 1:
        raise BertError(f"{what}: expected a flat list of strings (or a tuple of two lists for "
                        f"sentence pairs), got shape {list(values.shape)}")
    bad = _first_bad(values.tolist(), lambda v: isinstance(v, (str, bytes)))
    if bad is not None:
        raise BertError(f"{what}: expected strings, got {type(bad[1]).__name__} {bad[1]!r} at "
                        f"index {bad[0]}")
    return tf.constant([v if isinstance(v, bytes) else v.encode("utf-8")
                        for v in values.tolist()], tf.string)


def to_ids(x, what="x"):
    """A dict of int lists / arrays (the encoder's inputs) -> dict of int32 arrays.

    Args:
        x: the data; datasets, generators and tensors pass through.
        what: the argument's name, for errors.
    """
    if x is None or isinstance(x, _PASS_THROUGH):
        return x
    if _is_array_like(x):
        flat = np.asarray(x, dtype=object).ravel().tolist()
        if flat and all(isinstance(v, (str, bytes)) for v in flat):
            raise BertError(f"{what}: strings need a text-in model (bert_tf.from_pretrained(..., "
                            f"text_input=True)); this model takes a dict of input_word_ids, "
                            f"input_mask, input_type_ids")
        raise BertError(f"{what}: expected a dict of input_word_ids, input_mask, input_type_ids "
                        f"(int arrays [batch, seq]), got a {type(x).__name__}")
    if not isinstance(x, dict):
        return x
    if "input_word_ids" not in x:
        raise BertError(f"{what}: the dict has no input_word_ids (keys: {', '.join(map(str, x))})")
    out = {}
    for k, v in x.items():
        if _is_array_like(v):
            arr = _array(v, f"{what}[{k!r}]")
            if arr.dtype.kind not in "iub":
                raise BertError(f"{what}[{k!r}]: expected int ids, got dtype {arr.dtype}")
            v = arr.astype(np.int32)
        out[k] = v
    return out


def _array(v, what):
    try:
        arr = np.asarray(v)
    except ValueError as e:  # ragged nested lists
        raise BertError(f"{what}: not a rectangular array ({str(e).splitlines()[0]})") from None
    if arr.dtype == object:
        raise BertError(f"{what}: not a rectangular array of numbers")
    return arr


def to_targets(y, what="y"):
    """Labels / targets / sample weights as lists or arrays (or a dict of them) -> arrays.

    Args:
        y: the data; datasets and tensors pass through.
        what: the argument's name, for errors.
    """
    if isinstance(y, dict):
        return {k: to_targets(v, f"{what}[{k!r}]") for k, v in y.items()}
    if not _is_array_like(y):
        return y
    arr = _array(y, what)
    if arr.dtype.kind in "USO":
        raise BertError(f"{what}: expected numbers (class ids 0..n-1 for classification), got "
                        f"strings such as {arr.ravel().tolist()[0]!r}")
    return arr


def num_examples(data):
    """Batch size of converted x or y, or None when it is not known up front."""
    if isinstance(data, dict):
        data = data.get("input_word_ids", next(iter(data.values()), None))
    if isinstance(data, tuple) and len(data) == 2:
        data = data[0]
    shape = getattr(data, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) and shape[0] is not None else None


def call_on_real_length(fn, inputs, position_outputs=()):
    """`fn(inputs)` computed on the batch cut to its real length (rounded up to one of
    `real_length.length_buckets(S)`, S static; else a multiple of 8), the outputs named in
    `position_outputs` restored to [B, S, ...] with 0 (`PAD_VALUES`: -1e9 for span logits) at
    every padding position. Pooled, class and real-position outputs equal the full-length
    computation's within float rounding.

    Args:
        fn: the model call, a function of the inputs dict, returning a dict.
        inputs: dict with the int [B, S] encoder inputs (other keys pass unchanged).
        position_outputs: the keys of fn's per-position outputs (a list of them is restored
            element by element).
    """
    mask = tf.convert_to_tensor(inputs["input_mask"])
    s = mask.shape[1]
    length = real_length.real_length(mask)
    length = (real_length.bucket_length(length, s) if s is not None else
              real_length.bucket_length(length, tf.shape(mask)[1], step=8))
    out = fn(real_length.cut(inputs, length, keys=[k for k in INPUT_NAMES if k in inputs]))

    def restore(key, v):
        if isinstance(v, (list, tuple)):
            return type(v)(restore(key, x) for x in v)
        return real_length.restore(v, mask, PAD_VALUES.get(key, 0))

    return {k: restore(k, v) if k in position_outputs else v for k, v in out.items()}


class KerasConventions:
    """keras.Model mixin: list / array data in fit, evaluate, predict, validation_data and
    direct calls, one-line errors naming the argument, and `export` for TF Serving.

    A subclass sets `_text_input` (True: strings in, False: the ids dict).

    Attributes:
        pad_to_max_seq_length: False (default): `fit`, `evaluate` and `predict` cut each batch
            to its real length (see the module docstring); True: the fixed shape.
    """

    _text_input = False
    pad_to_max_seq_length = False
    # Declared by each model: the keys of its per-position outputs ([B, S, ...]); a model
    # with any is cut in `predict` only. cut_in_keras False: never cut (BertPretrainer).
    position_outputs = ()
    cut_in_keras = True
    _cutting = None  # inside fit / evaluate / predict: whether batches are cut; None: outside
    _functions_cut = None  # the mode Keras' cached step functions were traced in; None: unknown

    def _cut_now(self):
        """Cut this call? Inside fit / evaluate / predict as they decided; a direct call
        computes what it is given (the trainer and the exports cut before their own
        compiled steps)."""
        return bool(self._cutting)

    def _cut_spec(self):
        """(cut_in_keras, position_outputs) of the model that computes (a wrapper: its inner
        model's)."""
        return self.cut_in_keras, tuple(self.position_outputs)

    def _set_mode(self, cut):
        if self._functions_cut is None or self._functions_cut != cut:
            # Keras caches its traced steps; one traced in the other mode (or outside ours,
            # e.g. by predict_on_batch) must not be reused.
            self.train_function = self.test_function = self.predict_function = None
        self._functions_cut = self._cutting = cut

    @contextlib.contextmanager
    def _real_length(self, pad_to_max_seq_length, stage):
        """Cut batches in this fit / evaluate / predict (`stage`) unless padded, XLA-compiled,
        opted out, or (outside predict) per-position. Only the outermost call decides: fit's
        own evaluate of validation_data inherits fit's mode and traced functions."""
        if self._cutting is not None:
            yield
            return
        pad = self.pad_to_max_seq_length if pad_to_max_seq_length is None \
            else pad_to_max_seq_length
        try:
            jit = bool(self.jit_compile)  # Keras' "auto" resolved: XLA needs static shapes
        except AttributeError:
            jit = False
        allowed, positions = self._cut_spec()
        self._set_mode(not pad and not jit and allowed and (stage == "predict" or not positions))
        try:
            yield
        finally:
            self._cutting = None

    @contextlib.contextmanager
    def _uncut(self):
        """A Keras entry that computes what it is given (the *_on_batch methods)."""
        if self._cutting is not None:
            yield
            return
        self._set_mode(False)
        try:
            yield
        finally:
            self._cutting = None

    def train_on_batch(self, *args, **kwargs):
        """`keras.Model.train_on_batch`: computes the batch as given (never cut)."""
        with self._uncut():
            return super().train_on_batch(*args, **kwargs)

    def test_on_batch(self, *args, **kwargs):
        """`keras.Model.test_on_batch`: computes the batch as given (never cut)."""
        with self._uncut():
            return super().test_on_batch(*args, **kwargs)

    def predict_on_batch(self, *args, **kwargs):
        """`keras.Model.predict_on_batch`: computes the batch as given (never cut)."""
        with self._uncut():
            return super().predict_on_batch(*args, **kwargs)

    def _x(self, x, what):
        return to_text(x, what) if self._text_input else to_ids(x, what)

    def _xy(self, x, y, sample_weight, what_x="x", what_y="y", what_w="sample_weight"):
        x, y = self._x(x, what_x), to_targets(y, what_y)
        sample_weight = to_targets(sample_weight, what_w)
        nx, ny = num_examples(x), num_examples(y)
        if nx is not None and ny is not None and nx != ny:
            where = "x and y" if what_x == "x" else what_x
            raise BertError(f"{where}: {nx} inputs but {ny} labels")
        return x, y, sample_weight

    def _validation(self, data):
        if isinstance(data, list) and len(data) in (2, 3):
            data = tuple(data)
        if not isinstance(data, tuple) or len(data) not in (2, 3):
            return data
        x, y, w = self._xy(*(data + (None,))[:3], what_x="validation_data",
                           what_y="validation_data (labels)",
                           what_w="validation_data (sample weights)")
        return (x, y) if len(data) == 2 else (x, y, w)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
            sample_weight=None, pad_to_max_seq_length=None, **kwargs):
        """`keras.Model.fit`; x, y, sample_weight and validation_data may be lists / arrays
        (strings for a text-in model, a tuple of two lists for sentence pairs).

        Args:
            x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
                shuffle, class_weight, sample_weight: as `keras.Model.fit`.
            pad_to_max_seq_length: True: every batch at full length (default: the model's
                attribute, False: each batch cut to its real length).
            **kwargs: its other keyword arguments.
        """
        x, y, sample_weight = self._xy(x, y, sample_weight)
        with self._real_length(pad_to_max_seq_length, "fit"):
            return super().fit(x, y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                               callbacks=callbacks, validation_split=validation_split,
                               validation_data=self._validation(validation_data),
                               shuffle=shuffle, class_weight=class_weight,
                               sample_weight=sample_weight, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 pad_to_max_seq_length=None, **kwargs):
        """`keras.Model.evaluate`; x, y and sample_weight as for `fit`.

        Args:
            x, y, batch_size, verbose, sample_weight: as `keras.Model.evaluate`.
            pad_to_max_seq_length: as for `fit`.
            **kwargs: its other keyword arguments.
        """
        x, y, sample_weight = self._xy(x, y, sample_weight)
        with self._real_length(pad_to_max_seq_length, "evaluate"):
            return super().evaluate(x, y, batch_size=batch_size, verbose=verbose,
                                    sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, verbose="auto", pad_to_max_seq_length=None,
                **kwargs):
        """`keras.Model.predict`; x as for `fit`.

        Args:
            x, batch_size, verbose: as `keras.Model.predict`.
            pad_to_max_seq_length: as for `fit`.
            **kwargs: its other keyword arguments.
        """
        with self._real_length(pad_to_max_seq_length, "predict"):
            return super().predict(self._x(x, "x"), batch_size=batch_size, verbose=verbose,
                                   **kwargs)

    def __call__(self, *args, **kwargs):
        if args:
            args = (self._x(args[0], "inputs"),) + args[1:]
        elif "inputs" in kwargs:
            kwargs["inputs"] = self._x(kwargs["inputs"], "inputs")
        if self._cut_now() and not self._text_input and args and isinstance(args[0], dict) \
                and "input_mask" in args[0]:
            rest = args[1:]
            return call_on_real_length(lambda x: super(KerasConventions, self).__call__(
                x, *rest, **kwargs), args[0], self._cut_spec()[1])
        return super().__call__(*args, **kwargs)

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None,
               **kwargs):
        """Writes the TF Serving SavedModel (Keras 3's `export`, same name and meaning).

        `filepath` is the SavedModel folder itself, as in Keras; TF Serving loads
        `<model_base>/<version>/`, so pass e.g. `models/clf/1` and serve `models/clf`. See
        `bert_tf.export.keras_export.export_model` for what is written and the keyword
        arguments (vocab_file, labels, seq_length, warmup_texts, ...).

        Args:
            filepath: the export folder (replaced atomically if it exists).
            format: "tf_saved_model" (the only one bert_tf writes itself; others go to Keras).
            verbose: print where the export went and its signatures (default True).
            input_signature: must be None: the signatures are bert_tf's.
            **kwargs: `export_model` keyword arguments.
        """
        if format != "tf_saved_model":
            return super().export(filepath, format=format, verbose=verbose,
                                  input_signature=input_signature, **kwargs)
        if input_signature is not None:
            raise BertError("export: input_signature is fixed by bert_tf (text or ids "
                            "signatures); leave it unset")
        import bert_tf  # the export package is a higher layer: reached through its exporter
        return bert_tf.exporter("model")(self, filepath, verbose=True if verbose is None else verbose,
                            **kwargs)
