"""run_classifier: GLUE/XNLI (TSV) or TFDS sentence(-pair) classification and regression.

Outputs in `output_dir`: checkpoints `ckpt-<step>`, `eval_results.txt` (`key = value`:
eval_accuracy, eval_loss, global_step, loss, plus eval_f1 for MRPC/QQP, eval_mcc for CoLA,
eval_pearson/eval_spearman for STS-B), `test_results.tsv` (one line per test example: the
class probabilities tab-separated, or the predicted score for regression), and after training
an end-to-end text-in SavedModel in `export_dir` (default `<output_dir>/export`).
"""
import dataclasses
import logging
import os

import numpy as np

from bert_tf import BertError
from bert_tf.script_flags import flag
from bert_tf.tasks import classifier_data, finetune, metrics, prediction, tfds_data

log = logging.getLogger("bert_tf.tasks")


@dataclasses.dataclass
class ClassifierConfig(finetune.RunConfig):
    """run_classifier's flags: the original's plus --tfds_name and the TF2 additions."""
    data_dir: str = flag(None, "The input data dir: the task's .tsv files.")
    bert_config_file: str = flag(None, "The config json file of the pre-trained BERT model.")
    task_name: str = flag(None, "The name of the task to train (cola, mnli, mnli_mismatched, "
                          "mrpc, xnli, sst-2, qnli, qqp, rte, sts-b, wnli).")
    vocab_file: str = flag(None, "The vocabulary file that the BERT model was trained on.")
    do_lower_case: bool = flag(True, "Whether to lower case the input text. Should be True for "
                               "uncased models and False for cased models.")
    do_train: bool = flag(False, "Whether to run training.")
    do_eval: bool = flag(False, "Whether to run eval on the dev set.")
    do_predict: bool = flag(False, "Whether to run the model in inference mode on the test "
                            "set.")
    tfds_name: str = flag(None, "Read a TFDS dataset instead of --data_dir TSVs, e.g. glue/mrpc "
                          "or imdb_reviews (needs a 'label' feature).")
    tfds_data_dir: str = flag(None, "TFDS data directory (default: TFDS's).")
    xnli_language: str = flag("zh", "XNLI: language to train/evaluate on.")


class ClassifierTask(finetune.FinetuneTask):
    """Sentence (pair) classification, or regression with one output.

    Args:
        cfg: ClassifierConfig.
        bert_config: BertConfig of the encoder.
        labels: label strings (classification) or None (regression).
    """

    def __init__(self, cfg, bert_config, labels=None):
        super().__init__(cfg, "regression" if labels is None else "classification", labels)
        self.bert_config = bert_config

    def build_model(self):
        """A built BertClassifier: one output for regression, else one per label."""
        from bert_tf.modeling.encoder import BertEncoder
        from bert_tf.modeling.models import BertClassifier
        num_classes = 1 if self.labels is None else len(self.labels)
        return finetune.built(BertClassifier(
            BertEncoder.from_bert_config(self.bert_config, name="encoder"), num_classes), self.cfg)


def check_common(cfg, phases=("do_train", "do_eval", "do_predict"), init_source=None):
    """Flag checks shared by the fine-tuning tasks; returns (BertConfig, FullTokenizer).

    Run before examples are read or a model is built, so a bad flag fails at once.

    Args:
        cfg: the task's RunConfig (needs bert_config_file, vocab_file, output_dir).
        phases: the task's do_* flags; at least one must be set.
        init_source: the `Source` read for --init_checkpoint (its config, not read again).
    """
    from bert_tf.convert.handoff import bert_config as config_of
    from bert_tf.tokenization import FullTokenizer, check_vocab_size
    if not any(getattr(cfg, p) for p in phases):
        raise BertError("at least one of " + ", ".join(f"--{p}" for p in phases)
                        + " must be True")
    for name in ("bert_config_file", "vocab_file", "output_dir"):
        if not getattr(cfg, name):
            raise BertError(f"--{name}: required")
    finetune.check_flags(cfg)
    bert_config = config_of(cfg, init_source)  # any dialect the format table reads
    if cfg.max_seq_length > bert_config.max_position_embeddings:
        raise BertError(f"--max_seq_length: {cfg.max_seq_length} exceeds the model's "
                        f"max_position_embeddings {bert_config.max_position_embeddings}")
    check_vocab_size(cfg.vocab_file, bert_config.vocab_size, cfg.bert_config_file)
    tokenizer = FullTokenizer(cfg.vocab_file, do_lower_case=cfg.do_lower_case)
    return bert_config, tokenizer


def get_processor(cfg):
    """The DataProcessor the flags ask for: --tfds_name, else --task_name over --data_dir."""
    if cfg.tfds_name:
        return tfds_data.TfdsProcessor(cfg.tfds_name, data_dir=cfg.tfds_data_dir)
    if not cfg.task_name:
        raise BertError("--task_name: required (or set --tfds_name)")
    processor = classifier_data.get_processor(cfg.task_name, language=cfg.xnli_language)
    if not cfg.data_dir:
        raise BertError("--data_dir: required for TSV tasks")
    return processor


def eval_metrics(processor, labels, outputs):
    """The task's metrics from logits (`eval_` keys, as in eval_results.txt).

    Args:
        processor: the DataProcessor (regression or not, which metrics).
        labels: label_ids [N] (class ids, or float targets for regression).
        outputs: dict with the model's `logits` [N, C].
    """
    logits = outputs["logits"]
    if processor.is_regression:
        preds = logits[:, 0].astype(np.float64)
        labels = np.asarray(labels, np.float64)
        return {"eval_loss": float(np.mean((preds - labels) ** 2)),
                "eval_pearson": metrics.pearson(preds, labels),
                "eval_spearman": metrics.spearman(preds, labels)}
    probs = finetune.softmax(logits)
    labels = np.asarray(labels, np.int64)
    preds = np.argmax(logits, axis=-1)
    nll = -np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-30))
    out = {"eval_loss": float(np.mean(nll)), "eval_accuracy": metrics.accuracy(labels, preds)}
    if "f1" in processor.metrics:
        out["eval_f1"] = metrics.f1_score(labels, preds)
    if "mcc" in processor.metrics:
        out["eval_mcc"] = metrics.matthews_corrcoef(labels, preds)
    return out


def run(cfg, init_source=None):
    """Train / evaluate / predict as the flags ask; returns a dict of what it produced.

    Args:
        cfg: ClassifierConfig.
        init_source: the `Source` read for --init_checkpoint (`bert_tf.tasks.cli`), or None.
    """
    processor = get_processor(cfg)
    bert_config, tokenizer = check_common(cfg, init_source=init_source)
    label_list = processor.get_labels()
    regression = processor.is_regression
    data_dir = cfg.data_dir
    # Read every requested split first: data errors surface before any model is built.
    train = processor.get_train_examples(data_dir) if cfg.do_train else None
    dev = processor.get_dev_examples(data_dir) if cfg.do_eval else None
    test = processor.get_test_examples(data_dir) if cfg.do_predict else None

    def features(examples, desc):
        return classifier_data.convert_examples_to_features(
            examples, label_list, cfg.max_seq_length, tokenizer, is_regression=regression,
            progress=desc if cfg.progress else None)

    trainer = finetune.make_trainer(
        ClassifierTask(cfg, bert_config, None if regression else label_list), cfg, init_source)
    result = {"output_dir": cfg.output_dir}
    if cfg.do_train:
        if not train:
            raise BertError(f"{processor.name}: the training set is empty")
        steps, warmup = cfg.train_steps(len(train))
        log.info("training %s: %d examples, batch %d, %d steps (%d warm-up)",
                 processor.name, len(train), cfg.train_batch_size, steps, warmup)
        result["train_loss"] = finetune.train(trainer, features(train, "train features"),
                                              steps, warmup)
    else:
        trainer.restore(inference=True)
    if cfg.do_eval:
        feats = features(dev, "eval features")
        outputs = prediction.predict(trainer, feats, cfg.eval_batch_size, ["logits"], desc="eval")
        res = eval_metrics(processor, feats["label_ids"], outputs)
        res["global_step"] = trainer.step
        res["loss"] = res["eval_loss"]
        trainer.write_results(res)
        log.info("eval: %s", res)
        result["eval"] = res
    if cfg.do_predict:
        feats = features(test, "test features")
        outputs = prediction.predict(trainer, feats, cfg.predict_batch_size, ["logits"],
                                     desc="predict")
        logits = outputs["logits"]
        if regression:
            rows = [f"{float(v)}\n" for v in logits[:, 0]]
        else:
            rows = ["\t".join(str(float(p)) for p in row) + "\n"
                    for row in finetune.softmax(logits)]
        finetune.write_text(os.path.join(cfg.output_dir, "test_results.tsv"), "".join(rows))
        result["test_outputs"] = logits
    if cfg.do_train and cfg.do_export:
        result["export_dir"] = trainer.export()
    return result
