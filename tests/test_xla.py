"""TPU readiness without a TPU: the whole replica step compiles with XLA (jit_compile=True)
and runs, matching the uncompiled step (ner here; the classifier, span and unpacked
pre-training steps in the slow suite, packed pre-training in test_packed_training); every
training dataset has static shapes (fine-tuning's cut to bucketed lengths); bfloat16 runs.
Tiny configs, two steps each. On a GPU (device tool) the same tests run there."""
import numpy as np
import pytest

import keras
import tensorflow as tf

from bert_tf.tasks import classifier, classifier_data, finetune, ner, squad
from bert_tf.tokenization import FullTokenizer
from bert_tf.pretraining import pretraining
from conftest import TWO_CPUS, tiny_bert_config, write_pretraining_records

WORDS = [f"w{i}" for i in range(20)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
SEQ = 16


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return FullTokenizer(str(path))


def _text(rng, n):
    return " ".join(rng.choice(WORDS, n))


def _classifier(tok, cfg, bert_config, rng):
    labels = ["0", "1"]
    examples = [classifier_data.InputExample(str(i), _text(rng, 3), _text(rng, 2),
                                             labels[i % 2]) for i in range(8)]
    arrays = classifier_data.convert_examples_to_features(examples, labels, SEQ, tok)
    return classifier.ClassifierTask(cfg, bert_config, labels), arrays


def _squad(tok, cfg, bert_config, rng):
    examples = []
    for i in range(8):
        words = list(rng.choice(WORDS, 6))
        offsets = [sum(len(w) + 1 for w in words[:k]) for k in range(len(words))]
        examples.append(squad.SquadExample(str(i), _text(rng, 2), words, offsets,
                                           " ".join(words), words[2], 2, 2))
    feats = squad.convert_examples_to_features(examples, tok, SEQ, 8, 4, True)
    return squad.SquadTask(cfg, bert_config), squad.features_to_arrays(feats, True)


def _ner(tok, cfg, bert_config, rng):
    labels = ["O", "B-PER", "I-PER"]
    sents = [ner.Sentence(list(rng.choice(WORDS, 4)), ["B-PER", "I-PER", "O", "O"],
                          list(range(4))) for _ in range(8)]
    arrays, _ = ner.convert_sentences_to_features(sents, labels, SEQ, tok)
    return ner.NerTask(cfg, bert_config, labels), arrays


FINETUNE = {"classifier": _classifier, "squad": _squad, "ner": _ner}


def _finetune_trainer(name, tok, tmp_path, jit, precision="none"):
    cfg = finetune.RunConfig(output_dir=str(tmp_path / f"{name}-{jit}-{precision}"),
                             max_seq_length=SEQ, train_batch_size=4, learning_rate=1e-3,
                             seed=3, progress=False, strategy="one_device", jit_compile=jit,
                             mixed_precision=precision)
    bert_config = tiny_bert_config(vocab_size=len(VOCAB), num_hidden_layers=1)
    task, arrays = FINETUNE[name](tok, cfg, bert_config, np.random.default_rng(0))
    trainer = finetune.make_trainer(task, cfg)
    # No dropout in the heads either: XLA draws other random numbers than the plain step.
    for layer in trainer.model._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    trainer.build_optimizer(10, 1)
    # The commands' dataset: batches cut to their real length (not span training).
    return trainer, finetune.arrays_dataset_fn(arrays, cut=finetune.cuts_batches(cfg, task),
                                               task=task)


def _pretraining_trainer(pattern, tmp_path, jit, precision="none", strategy="one_device"):
    options = pretraining.PretrainingOptions(
        output_dir=str(tmp_path / f"pt-{jit}-{precision}-{strategy}"), max_seq_length=32,
        max_predictions_per_seq=5, train_batch_size=4, learning_rate=1e-3, num_train_steps=10,
        num_warmup_steps=1, seed=3, progress=False, strategy=strategy, jit_compile=jit,
        mixed_precision=precision)
    trainer = pretraining.make_trainer(tiny_bert_config(num_hidden_layers=1), options)
    return trainer, trainer.task.dataset_fn(pattern, True)


@pytest.fixture(scope="module")
def pattern(tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    write_pretraining_records(d / "data.tfrecord", 16, seed=0)
    return str(d / "*.tfrecord")


def _make(name, tok, pattern, tmp_path, jit, precision="none"):
    if name == "pretraining":
        return _pretraining_trainer(pattern, tmp_path, jit, precision)
    return _finetune_trainer(name, tok, tmp_path, jit, precision)


def _two_steps(trainer, dataset_fn):
    """The losses of two training steps; the iterator is kept as trainer.test_iterator."""
    iterator = trainer.test_iterator = iter(trainer.distribute(dataset_fn, training=True))
    return [trainer.task.summarize(
        {k: float(v) for k, v in trainer.train_loop(iterator, 1).items()}, 1)["loss"]
        for _ in range(2)]


def _xla_compiled(trainer, part="replica_step"):
    """True if XLA must compile the training loop's `part` (the whole replica step, or its
    forward_backward; kernels inside it, such as the fused GELU, may be compiled either way).
    The loop as traced for the trainer's test_iterator (a new input pipeline would cost
    seconds)."""
    fn = trainer._train_loop_fn.get_concrete_function(trainer.test_iterator, tf.constant(1))
    compiled = {f.signature.name for f in fn.graph.as_graph_def().library.function
                if f.attr["_XlaMustCompile"].b}
    assert compiled, "no XLA function at all: the fused GELU kernels are missing"
    return any(part in name for name in compiled)


@pytest.fixture
def restore_policy():
    yield
    from bert_tf.training.distribute import set_mixed_precision
    set_mixed_precision("none")


# The plain (float32, no XLA) two steps' losses by task: test_bfloat16_xla_step_runs compares
# with the ones test_whole_replica_step_compiles_with_xla computed (same seeds and data).
_PLAIN_LOSSES = {}


def _plain_losses(name, tokenizer, pattern, tmp_path):
    if name not in _PLAIN_LOSSES:
        plain, data = _make(name, tokenizer, pattern, tmp_path, jit=False)
        _PLAIN_LOSSES[name] = _two_steps(plain, data)
    return _PLAIN_LOSSES[name]


@pytest.mark.parametrize("name", [
    # Unpacked pre-training: the pre-training replica step (MLM/NSP heads and losses) is
    # compiled, run and matched with the plain step's losses on packed batches (a superset of
    # these inputs). slow: test_packed_training.py::test_xla_compiled_step_on_packed_batches
    pytest.param("pretraining", marks=pytest.mark.slow),
    # The classifier's step is the fine-tuning trainer's step with cut batches, as ner's; its
    # head trains under XLA in test_real_length_training's
    # test_train_step_shapes_bounded_under_xla_and_step_8_without[True].
    # slow: test_whole_replica_step_compiles_with_xla[ner]
    pytest.param("classifier", marks=pytest.mark.slow),
    # Span training is the fine-tuning step at full length: a per-token dense head and
    # sparse softmax cross-entropy as ner's, at a static shape as pre-training's.
    # slow: test_whole_replica_step_compiles_with_xla[ner] (and the packed pre-training
    # step of test_packed_training.py::test_xla_compiled_step_on_packed_batches)
    pytest.param("squad", marks=pytest.mark.slow), "ner"])
def test_whole_replica_step_compiles_with_xla(name, tokenizer, pattern, tmp_path, caplog):
    plain, data = _make(name, tokenizer, pattern, tmp_path, jit=False)
    want = _two_steps(plain, data)
    _PLAIN_LOSSES.setdefault(name, want)
    with caplog.at_level("INFO", logger="bert_tf"):
        xla, data = _make(name, tokenizer, pattern, tmp_path, jit=True)
    assert "--jit_compile: XLA compiles each replica's whole step" in caplog.text
    got = _two_steps(xla, data)
    assert all(np.isfinite(got)) and got[0] != got[1]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    assert _xla_compiled(xla) and not _xla_compiled(plain)
    assert (xla.xla_compiles, plain.xla_compiles) == ("replica_step", None)  # what it says
    assert xla.step == 2


@pytest.mark.skipif(not TWO_CPUS, reason="TensorFlow was initialised before conftest split the CPU")
def test_two_replicas_compile_forward_backward_with_xla(tokenizer, pattern, tmp_path, caplog):
    """Under a multi-device strategy XLA compiles each replica's forward and backward pass
    (the all-reduce and the update stay outside): two replicas' two steps match one device's
    uncompiled steps."""
    want = _plain_losses("pretraining", tokenizer, pattern, tmp_path)
    with caplog.at_level("INFO", logger="bert_tf"):
        two, data = _pretraining_trainer(pattern, tmp_path, jit=True, strategy="mirrored")
    assert "--jit_compile: XLA compiles each replica's forward and backward pass" in caplog.text
    assert two.strategy.num_replicas_in_sync == 2
    got = _two_steps(two, data)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    assert _xla_compiled(two, "forward_backward") and not _xla_compiled(two)
    assert two.xla_compiles == "forward_backward"


@pytest.mark.parametrize("name", ["pretraining", "classifier", "squad", "ner"])
def test_training_datasets_have_static_shapes(name, tokenizer, pattern, tmp_path):
    trainer, data = _make(name, tokenizer, pattern, tmp_path, jit=False)
    ds = data(tf.distribute.InputContext(), 4, 1, 0)
    specs = tf.nest.flatten(ds.element_spec)
    # Fine-tuning batches are cut to a bucketed length (a bounded set of shapes): the
    # sequence axis is dynamic in the spec; pre-training and span training stay fixed.
    cut = name in ("classifier", "ner")
    assert specs and all(s.shape.is_fully_defined() or cut and s.shape[1] is None
                         for s in specs), ds.element_spec
    assert all(s.shape[0] == 4 for s in specs)
    model_inputs = set(trainer.task.model_inputs)
    assert model_inputs <= set(ds.element_spec)


@pytest.mark.parametrize("name", [pytest.param("pretraining", marks=pytest.mark.slow), "ner"])
def test_bfloat16_xla_step_runs(name, tokenizer, pattern, tmp_path, restore_policy):
    want = _plain_losses(name, tokenizer, pattern, tmp_path)
    bf, data = _make(name, tokenizer, pattern, tmp_path, jit=True, precision="bfloat16")
    assert bf.model.dtype_policy.compute_dtype == "bfloat16"
    got = _two_steps(bf, data)
    assert all(np.isfinite(got))
    np.testing.assert_allclose(got, want, atol=0.05)
