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
from bert_tf.tasks import classifier_data, finetune, metrics

log = logging.getLogger("bert_tf.tasks")


@dataclasses.dataclass
class ClassifierConfig(finetune.RunConfig):
    task_name: str = None
    data_dir: str = None
    bert_config_file: str = None
    vocab_file: str = None
    do_lower_case: bool = True
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    predict_batch_size: int = 8
    tfds_name: str = None
    tfds_data_dir: str = None
    xnli_language: str = "zh"
    export_dir: str = None
    do_export: bool = True


def check_common(cfg, phases=("do_train", "do_eval", "do_predict")):
    """Flag checks shared by the fine-tuning tasks; returns (BertConfig, FullTokenizer)."""
    from bert_tf.modeling.config import BertConfig
    from bert_tf.tokenization import FullTokenizer
    if not any(getattr(cfg, p) for p in phases):
        raise BertError("at least one of " + ", ".join(f"--{p}" for p in phases)
                        + " must be True")
    for name in ("bert_config_file", "vocab_file", "output_dir"):
        if not getattr(cfg, name):
            raise BertError(f"--{name}: required")
    finetune.check_flags(cfg)
    bert_config = BertConfig.from_json_file(cfg.bert_config_file)
    if cfg.max_seq_length > bert_config.max_position_embeddings:
        raise BertError(f"--max_seq_length: {cfg.max_seq_length} exceeds the model's "
                        f"max_position_embeddings {bert_config.max_position_embeddings}")
    tokenizer = FullTokenizer(cfg.vocab_file, do_lower_case=cfg.do_lower_case)
    if len(tokenizer.vocab) > bert_config.vocab_size:
        raise BertError(f"{cfg.vocab_file}: {len(tokenizer.vocab)} tokens but "
                        f"{cfg.bert_config_file} has vocab_size {bert_config.vocab_size}")
    return bert_config, tokenizer


def get_processor(cfg):
    if cfg.tfds_name:
        return classifier_data.TfdsProcessor(cfg.tfds_name, data_dir=cfg.tfds_data_dir)
    if not cfg.task_name:
        raise BertError("--task_name: required (or set --tfds_name)")
    processor = classifier_data.get_processor(cfg.task_name, language=cfg.xnli_language)
    if not cfg.data_dir:
        raise BertError("--data_dir: required for TSV tasks")
    return processor


def eval_metrics(processor, labels, outputs):
    """The task's metrics from logits (`eval_` keys, as in eval_results.txt)."""
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


def run(cfg):
    """Train / evaluate / predict as the flags ask; returns a dict of what it produced."""
    processor = get_processor(cfg)
    bert_config, tokenizer = check_common(cfg)
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

    num_classes = 1 if regression else len(label_list)
    from bert_tf.modeling.models import BertClassifier
    tuner = finetune.Finetuner(lambda: BertClassifier(bert_config, num_classes),
                               finetune.regression_loss if regression
                               else finetune.classification_loss, cfg)
    result = {"output_dir": cfg.output_dir}
    loss = None
    if cfg.do_train:
        if not train:
            raise BertError(f"{processor.name}: the training set is empty")
        steps, warmup = cfg.train_steps(len(train))
        log.info("training %s: %d examples, batch %d, %d steps (%d warm-up)",
                 processor.name, len(train), cfg.train_batch_size, steps, warmup)
        loss = tuner.train(features(train, "train features"), steps, warmup)
        result["train_loss"] = loss
    else:
        tuner.restore(inference=True)
    if cfg.do_eval:
        feats = features(dev, "eval features")
        outputs = tuner.predict(feats, cfg.eval_batch_size, ["logits"], desc="eval")
        res = eval_metrics(processor, feats["label_ids"], outputs)
        res["global_step"] = tuner.global_step
        res["loss"] = res["eval_loss"]
        finetune.write_results(os.path.join(cfg.output_dir, "eval_results.txt"), res)
        log.info("eval: %s", res)
        result["eval"] = res
    if cfg.do_predict:
        feats = features(test, "test features")
        outputs = tuner.predict(feats, cfg.predict_batch_size, ["logits"], desc="predict")
        logits = outputs["logits"]
        if regression:
            rows = [f"{float(v)}\n" for v in logits[:, 0]]
        else:
            rows = ["\t".join(str(float(p)) for p in row) + "\n"
                    for row in finetune.softmax(logits)]
        finetune.write_text(os.path.join(cfg.output_dir, "test_results.tsv"), "".join(rows))
        result["test_outputs"] = logits
    if cfg.do_train and cfg.do_export:
        export_dir = cfg.export_dir or os.path.join(cfg.output_dir, "export")
        tuner.export(cfg.vocab_file, cfg.do_lower_case, export_dir,
                     task="regression" if regression else "classification",
                     labels=None if regression else label_list)
        result["export_dir"] = export_dir
    return result
