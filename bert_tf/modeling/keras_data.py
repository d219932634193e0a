"""Keras conventions for every bert_tf model: Python lists and NumPy arrays as data.

`KerasConventions` (a keras.Model mixin) turns the x / y / sample_weight / validation_data of
`fit`, `evaluate`, `predict` and the inputs of a direct call into what Keras' data adapters
take (Keras itself refuses a list of labels, and blames x for it), and names the argument at
fault in a one-line `BertError`. Text-in models take strings (a tuple of two lists for
sentence pairs); ids-in models take the dict of `input_word_ids`, `input_mask`,
`input_type_ids`. `export(path)` writes the TF Serving export (`bert_tf.export.keras_export`).

`fit`, `evaluate` and `predict` compute only the real tokens, as `real_length` rules: each
batch is cut to its longest real length (rounded up to a multiple of 8) before the model runs.
What is cut follows what the model returns (`real_length.output_kinds`):
- models without per-position outputs (classifier, embedder) are cut in all three;
- models with per-position outputs (token classifier, span labeler, a subclass returning
  [B, S, ...]) are cut in `predict` only (their losses in `fit` / `evaluate` see every
  position): those outputs come back [B, S, ...], padding positions holding 0 or what the
  model declares (`padding_values`: -1e9 for span start/end logits);
- a call given inputs beyond the encoder's (BertPretrainer's masked_lm_positions) and a model
  whose outputs cannot be classified (logged once) are not cut.
A direct call (and `predict_on_batch` / `train_on_batch` / `test_on_batch`) computes what it
is given. Under XLA (Keras' `jit_compile`, which "auto" turns on for ids-in models on a GPU)
and under a tf.distribute strategy other than the default or OneDeviceStrategy (logged once)
nothing is cut: the compiled step keeps the fixed shape, and such a strategy (MirroredStrategy,
even with one replica) runs replicas in threads that do not see the call's mode.
`pad_to_max_seq_length=True` (a keyword of the three, or the model attribute) keeps the fixed
shape everywhere. The mode lives in the traced step: Keras' step functions are kept per mode,
so switching between `fit` and `predict` never retraces, and another thread's direct call is
never cut.
"""
import contextlib

import numpy as np
import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling import real_length
from bert_tf.modeling.real_length import INPUT_NAMES  # noqa: F401  (API)

_KINDS = ("train", "test", "predict")  # Keras' cached step functions

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

    def _mode(self, pad_to_max_seq_length, stage):
        """The `real_length.keras_scope` mode of a fit / evaluate / predict (`stage`)."""
        pad = self.pad_to_max_seq_length if pad_to_max_seq_length is None \
            else pad_to_max_seq_length
        try:
            jit = bool(self.jit_compile)  # Keras' "auto" resolved: XLA needs static shapes
        except AttributeError:
            jit = False
        strategy = self.distribute_strategy
        tpu = isinstance(strategy, (tf.distribute.TPUStrategy,
                                    tf.distribute.experimental.TPUStrategy))
        if not real_length.cuts(pad_to_max_seq_length=pad, tpu=tpu, xla=jit):
            return "off"
        # tf.distribute strategies (MirroredStrategy, even with one replica) run the replica
        # function in a thread of its own, which does not see this thread's mode.
        if not isinstance(strategy, tf.distribute.OneDeviceStrategy) and \
                type(strategy).__name__ != "_DefaultDistributionStrategy":
            real_length._log_once(type(self).__name__, f"{type(strategy).__name__}: its "
                                  "replicas run in threads that do not see the call's mode")
            return "off"
        return "outputs" if stage == "predict" else "losses"

    @contextlib.contextmanager
    def _keras_mode(self, mode):
        """Runs a Keras entry in `mode` with the step functions traced in it (kept per mode,
        so a switch never retraces). Only the outermost call decides: fit's evaluate of
        validation_data inherits fit's mode and step functions."""
        if real_length.keras_mode() is not None:
            yield
            return
        steps = self.__dict__.setdefault("_real_length_steps", {})
        for kind in _KINDS:
            setattr(self, f"{kind}_function", steps.get((kind, mode)))
        try:
            with real_length.keras_scope(mode):
                yield
        finally:
            for kind in _KINDS:
                fn = getattr(self, f"{kind}_function", None)
                if fn is not None:
                    steps[(kind, mode)] = fn

    def _call_cut(self, call, inputs, model):
        """`call(inputs)` as this thread's Keras mode says: on the real length, or (per-position
        outputs in fit / evaluate, unclassifiable outputs) as given."""
        mode = real_length.keras_mode()
        kinds = None
        if mode in ("losses", "outputs") and real_length.cuttable(inputs):
            kinds = real_length.output_kinds(
                call, inputs, model.__dict__.setdefault("_real_length_outputs", {}),
                type(model).__name__)
        if kinds is None or (kinds and mode == "losses"):
            with real_length.keras_scope(None):  # inner models compute what they are given
                return call(inputs)
        return real_length.call_on_real_length(call, inputs, kinds,
                                               real_length.padding_values(model))

    def compile(self, *args, **kwargs):
        """`keras.Model.compile` (step functions of an earlier compile are dropped)."""
        self.__dict__.pop("_real_length_steps", None)
        return super().compile(*args, **kwargs)

    def _build_optimizer(self):
        """Creates the optimizer's variables before the train step is traced. Keras (TF backend,
        no strategy) creates them inside the first trace, and a tf.function that creates
        variables traces twice: the whole model's step, at every first fit (tiny model: 2
        traces and 6.3 CPU-s -> 1 trace and 2.6 s; the same variables, the same numbers)."""
        optimizer = getattr(self, "optimizer", None)
        # Keras' own test of a built model: a layer that makes its variables when first called
        # would be missing from trainable_variables (Keras then builds it all in the trace).
        if optimizer is not None and not optimizer.built and all(
                layer.built for layer in self._flatten_layers()):
            with self.distribute_strategy.scope():
                optimizer.build(self.trainable_variables)

    def train_on_batch(self, *args, **kwargs):
        """`keras.Model.train_on_batch`: computes the batch as given (never cut)."""
        self._build_optimizer()
        with self._keras_mode("off"):
            return super().train_on_batch(*args, **kwargs)

    def test_on_batch(self, *args, **kwargs):
        """`keras.Model.test_on_batch`: computes the batch as given (never cut)."""
        with self._keras_mode("off"):
            return super().test_on_batch(*args, **kwargs)

    def predict_on_batch(self, *args, **kwargs):
        """`keras.Model.predict_on_batch`: computes the batch as given (never cut)."""
        with self._keras_mode("off"):
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
        self._build_optimizer()
        with self._keras_mode(self._mode(pad_to_max_seq_length, "fit")):
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
        with self._keras_mode(self._mode(pad_to_max_seq_length, "evaluate")):
            return super().evaluate(x, y, batch_size=batch_size, verbose=verbose,
                                    sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, verbose="auto", pad_to_max_seq_length=None,
                **kwargs):
        """`keras.Model.predict`; x as for `fit`. A predict (or evaluate) called inside a
        `fit` (from a callback) runs in fit's mode: fit's cut, or fit's fixed shape, decides,
        not this call's pad_to_max_seq_length.

        Args:
            x, batch_size, verbose: as `keras.Model.predict`.
            pad_to_max_seq_length: as for `fit` (outside a fit).
            **kwargs: its other keyword arguments.
        """
        with self._keras_mode(self._mode(pad_to_max_seq_length, "predict")):
            return super().predict(self._x(x, "x"), batch_size=batch_size, verbose=verbose,
                                   **kwargs)

    def __call__(self, *args, **kwargs):
        if args:
            args = (self._x(args[0], "inputs"),) + args[1:]
        elif "inputs" in kwargs:
            kwargs["inputs"] = self._x(kwargs["inputs"], "inputs")
        if real_length.keras_mode() in ("losses", "outputs") and not self._text_input \
                and args:
            rest = args[1:]
            return self._call_cut(lambda x: super(KerasConventions, self).__call__(
                x, *rest, **kwargs), args[0], self)
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
