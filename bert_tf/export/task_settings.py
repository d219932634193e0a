"""What an end-to-end export serves for each task: the task names, which model each takes,
its label strings and the `embedding` output's pooling (checked before anything is traced)."""
from bert_tf import BertError
from bert_tf.export import common
from bert_tf.modeling import models

TASKS = ("embeddings", "fill_mask", "classification", "regression", "span", "tagging")


def check_task_model(model, task):
    """One-line BertError unless `model` can be exported for `task`.

    Args:
        model: the model to export.
        task: one of `TASKS`.
    """
    expected = common.TASK_MODEL_CLASSES
    if task not in TASKS:
        raise BertError(f"--task: unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if task == "embeddings":
        common.bert_config_of(model, "export_end_to_end")
        return
    if not isinstance(model, expected[task]):
        raise BertError(f"--task={task}: needs a {expected[task].__name__}, "
                        f"got {type(model).__name__}")
    if task == "classification" and model.num_classes < 2:
        raise BertError("--task=classification: the classifier has 1 output; use "
                        "--task=regression")
    if task == "regression" and model.num_classes != 1:
        raise BertError(f"--task=regression: needs a BertClassifier with num_classes=1, got "
                        f"{model.num_classes}")


def labels_for(model, task, labels):
    """The label strings a classification/tagging export serves; None for other tasks.

    Args:
        model: a BertClassifier / BertTokenClassifier (its `labels`, if set, are the default).
        task: one of `TASKS`.
        labels: names given to the export (win over the model's), or None ("0".."n-1" when
            the model has none either).
    """
    if task not in ("classification", "tagging"):
        return None
    n = model.num_classes if task == "classification" else model.num_labels
    if labels is None:  # the model's own (from_pretrained(labels=...), its .keras config)
        labels = getattr(model, "labels", None)
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(x) for x in labels]
    if len(labels) != n:
        raise BertError(f"--labels: {len(labels)} labels given, the model has {n} outputs")
    return labels


def pooling_for(model, task, pooling, normalize):
    """`(pooling, normalize)` of the `embedding` output.

    Args:
        model: the exported model (a BertEmbedder's own pooling is the default).
        task: one of `TASKS`; only "embeddings" takes pooling/normalize.
        pooling: the argument, else the model's, else "cls" (the pooler's pooled_output).
        normalize: the argument, else the model's, else False.
    """
    if task != "embeddings":
        if pooling is not None or normalize:
            raise BertError(f"--pooling/--normalize: only for --task=embeddings, not {task}")
        return None, False
    if pooling is not None and pooling not in models.POOLINGS:
        raise BertError(f"--pooling: {pooling!r} is not one of {', '.join(models.POOLINGS)}")
    own = model if isinstance(model, models.BertEmbedder) else None
    pooling = pooling or (own.pooling if own else "cls")
    normalize = (own.normalize if own else False) if normalize is None else bool(normalize)
    return pooling, normalize
