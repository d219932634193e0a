"""Sentence(-pair) classification examples from any TFDS text-classification dataset."""
import numpy as np

from bert_tf import BertError
from bert_tf.tasks.classifier_data import DataProcessor, InputExample

# GLUE configs' text fields; other datasets: their string features in declaration order.
_TFDS_TEXT_KEYS = (("sentence1", "sentence2"), ("question1", "question2"),
                   ("premise", "hypothesis"), ("question", "sentence"), ("sentence",), ("text",))


class TfdsProcessor(DataProcessor):
    """Any TFDS text-classification dataset (glue/* included) with a `label` feature.

    Args:
        tfds_name: e.g. "glue/mrpc" or "imdb_reviews".
        data_dir: TFDS data directory (default: TFDS's).
        text_keys: feature names of text_a (and text_b); default: GLUE's fields, else the
            first two string features.
    """

    def __init__(self, tfds_name, data_dir=None, text_keys=None):
        import tensorflow_datasets as tfds
        self.tfds_name = self.name = tfds_name
        self.data_dir = data_dir or None
        try:
            self.builder = tfds.builder(tfds_name, data_dir=self.data_dir)
        except Exception as e:  # tfds raises several types for unknown names
            raise BertError(f"--tfds_name: cannot load {tfds_name!r} "
                            f"({str(e).splitlines()[0]})") from None
        info = self.builder.info
        features = info.features
        if "label" not in features:
            raise BertError(f"--tfds_name: {tfds_name} has no 'label' feature")
        label = features["label"]
        names = getattr(label, "names", None)
        self.is_regression = names is None
        self.labels = tuple(names) if names else ()
        self.metrics = self._metrics_for(tfds_name)
        strings = [k for k, v in features.items()
                   if getattr(v, "dtype", None) == np.dtype("O") or type(v).__name__ == "Text"]
        if text_keys:
            self.text_keys = tuple(text_keys)
        else:
            self.text_keys = next((keys for keys in _TFDS_TEXT_KEYS
                                   if all(k in features for k in keys)), tuple(strings[:2]))
        if not self.text_keys:
            raise BertError(f"--tfds_name: {tfds_name} has no text features")
        splits = list(info.splits.keys())
        mnli = "mnli" in tfds_name.split("/")[-1]
        if not splits:  # metadata not prepared yet (or mocked): GLUE's split names
            splits = (["train", "validation_matched", "test_matched"] if mnli
                      else ["train", "validation", "test"])
        self.splits = {"train": _first(splits, ("train",)),
                       "dev": _first(splits, ("validation_matched", "validation", "dev",
                                              "test")),
                       "test": _first(splits, ("test_matched", "test"))}

    @staticmethod
    def _metrics_for(name):
        task = name.split("/")[-1].split(":")[0]
        if task == "cola":
            return ("accuracy", "mcc")
        if task in ("mrpc", "qqp"):
            return ("accuracy", "f1")
        if task == "stsb":
            return ("pearson", "spearman")
        return ("accuracy",)

    def get_train_examples(self, data_dir=None):
        """InputExamples of the train split (data_dir is unused: TFDS has its own)."""
        return self._tfds_examples("train")

    def get_dev_examples(self, data_dir=None):
        """InputExamples of the validation split (MNLI: validation_matched)."""
        return self._tfds_examples("dev")

    def get_test_examples(self, data_dir=None):
        """InputExamples of the test split; unlabelled (-1) rows get the first label."""
        return self._tfds_examples("test")

    def _tfds_examples(self, which):
        import tensorflow_datasets as tfds
        split = self.splits[which]
        if split is None:
            raise BertError(f"--tfds_name: {self.tfds_name} has no {which} split "
                            f"(splits: {', '.join(self.builder.info.splits.keys())})")
        try:
            ds = tfds.load(self.tfds_name, split=split, data_dir=self.data_dir)
        except Exception as e:
            raise BertError(f"--tfds_name: cannot read {self.tfds_name} split {split} "
                            f"({str(e).splitlines()[0]})") from None
        examples = []
        for i, ex in enumerate(tfds.as_numpy(ds)):
            texts = [_text(ex[k]) for k in self.text_keys]
            raw = ex["label"]
            if self.is_regression:
                label = float(raw)
            elif int(raw) < 0:  # GLUE test splits: label -1 (unlabelled)
                label = self.labels[0]
            elif int(raw) >= len(self.labels):
                raise BertError(f"--tfds_name: {self.tfds_name} {split} example {i}: label "
                                f"{int(raw)} outside 0..{len(self.labels) - 1}")
            else:
                label = self.labels[int(raw)]
            guid = f"{which}-{int(ex['idx']) if 'idx' in ex else i}"
            examples.append(InputExample(guid, texts[0], texts[1] if len(texts) > 1 else None,
                                         label))
        return examples


def _first(available, candidates):
    return next((c for c in candidates if c in available), None)


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
