"""Sentence(-pair) classification data: GLUE/XNLI TSV processors and features (TFDS datasets:
`tfds_data.TfdsProcessor`).

Processors read the GLUE distribution's TSV layout (tab-separated, no quoting) from
`--data_dir` and yield `InputExample`s; `convert_examples_to_features` turns them into the
model's int32 arrays the way the original did ([CLS] a [SEP] b [SEP], longest-first pair
truncation, zero padding).
"""
import collections
import dataclasses
import os

import numpy as np

from bert_tf import BertError, fileio


@dataclasses.dataclass
class InputExample:
    """One example: text_a, optional text_b, label (str, float for regression)."""
    guid: str
    text_a: str
    text_b: str = None
    label: object = None  # str for classification, float for regression


# One layout per file: (header line to skip, text_a column, text_b column or None,
# label column or None (test files: no label), guid column or None: the 0-based row index,
# header included, as the original's guids count rows).
Layout = collections.namedtuple("Layout", "header a b label guid")


class DataProcessor:
    """A TSV task. Subclasses set names, files, layouts and labels."""

    name = None
    labels = ()
    is_regression = False
    metrics = ("accuracy",)
    train_file, dev_file, test_file = "train.tsv", "dev.tsv", "test.tsv"
    train_layout = dev_layout = test_layout = None
    skip_bad_lines = False  # QQP's train file has a few short lines (others: an error)

    def get_labels(self):
        """The label strings, index = class id (empty for regression)."""
        return list(self.labels)

    def get_train_examples(self, data_dir):
        """InputExamples of the training file under data_dir."""
        return self._examples(data_dir, self.train_file, self.train_layout, "train")

    def get_dev_examples(self, data_dir):
        """InputExamples of the dev file under data_dir."""
        return self._examples(data_dir, self.dev_file, self.dev_layout or self.train_layout, "dev")

    def get_test_examples(self, data_dir):
        """InputExamples of the unlabelled test file (placeholder labels, as the original)."""
        return self._examples(data_dir, self.test_file, self.test_layout, "test")

    def _examples(self, data_dir, filename, layout, set_type):
        path = os.path.join(data_dir, filename)
        examples = []
        for line_no, row in read_tsv(path, skip_header=layout.header):
            example = self._row_to_example(row, layout, set_type, path, line_no)
            if example is not None:
                examples.append(example)
        return examples

    def _row_to_example(self, row, layout, set_type, path, line_no):
        needed = 1 + max(c for c in (layout.a, layout.b, layout.label, layout.guid)
                         if c is not None and c >= 0)
        if len(row) < needed:
            if self.skip_bad_lines:
                return None
            raise BertError(f"{path}: line {line_no} has {len(row)} tab-separated columns, "
                            f"expected at least {needed} ({self.name} layout)")
        guid = f"{set_type}-{row[layout.guid] if layout.guid is not None else line_no - 1}"
        text_b = row[layout.b] if layout.b is not None else None
        if layout.label is None:  # test set: a placeholder label, as the original used
            label = 0.0 if self.is_regression else self.labels[0]
        else:
            label = self.check_label(row[layout.label], path, line_no)
        return InputExample(guid, row[layout.a], text_b, label)

    def check_label(self, label, path, line_no):
        """A TSV label as float (regression) or a known label; BertError naming file and line.

        Args:
            label: the label column's text.
            path: the TSV file, for the error.
            line_no: 1-based line, for the error.
        """
        if self.is_regression:
            try:
                return float(label)
            except ValueError:
                raise BertError(f"{path}: line {line_no}: label {label!r} is not a number "
                                f"({self.name} is a regression task)") from None
        label = self.map_label(label)
        if label not in self.labels:
            raise BertError(f"{path}: line {line_no}: label {label!r} is not one of "
                            f"{', '.join(self.labels)} ({self.name})")
        return label

    def map_label(self, label):
        """Hook for tasks whose files spell a label differently from `labels`."""
        return label


class ColaProcessor(DataProcessor):
    """CoLA: single-sentence acceptability; MCC is its GLUE metric."""
    name, labels, metrics = "cola", ("0", "1"), ("accuracy", "mcc")
    train_layout = Layout(header=False, a=3, b=None, label=1, guid=None)
    test_layout = Layout(header=True, a=1, b=None, label=None, guid=0)


class MnliProcessor(DataProcessor):
    """MultiNLI, matched dev/test sets."""
    name, labels = "mnli", ("contradiction", "entailment", "neutral")
    dev_file, test_file = "dev_matched.tsv", "test_matched.tsv"
    train_layout = Layout(header=True, a=8, b=9, label=-1, guid=0)
    test_layout = Layout(header=True, a=8, b=9, label=None, guid=0)


class MnliMismatchedProcessor(MnliProcessor):
    """MultiNLI, mismatched dev/test sets."""
    name = "mnli_mismatched"
    dev_file, test_file = "dev_mismatched.tsv", "test_mismatched.tsv"


class MrpcProcessor(DataProcessor):
    """MRPC: paraphrase pairs; F1 is reported besides accuracy."""
    name, labels, metrics = "mrpc", ("0", "1"), ("accuracy", "f1")
    train_layout = Layout(header=True, a=3, b=4, label=0, guid=None)
    test_layout = Layout(header=True, a=3, b=4, label=None, guid=None)


class Sst2Processor(DataProcessor):
    """SST-2: single-sentence sentiment."""
    name, labels = "sst-2", ("0", "1")
    train_layout = Layout(header=True, a=0, b=None, label=1, guid=None)
    test_layout = Layout(header=True, a=1, b=None, label=None, guid=0)


class QnliProcessor(DataProcessor):
    """QNLI: does the sentence answer the question."""
    name, labels = "qnli", ("entailment", "not_entailment")
    train_layout = Layout(header=True, a=1, b=2, label=3, guid=0)
    test_layout = Layout(header=True, a=1, b=2, label=None, guid=0)


class QqpProcessor(DataProcessor):
    """QQP: duplicate question pairs; F1 reported; short (malformed) lines skipped."""
    name, labels, metrics = "qqp", ("0", "1"), ("accuracy", "f1")
    skip_bad_lines = True
    train_layout = Layout(header=True, a=3, b=4, label=5, guid=0)
    test_layout = Layout(header=True, a=1, b=2, label=None, guid=0)


class RteProcessor(DataProcessor):
    """RTE: textual entailment pairs."""
    name, labels = "rte", ("entailment", "not_entailment")
    train_layout = Layout(header=True, a=1, b=2, label=3, guid=0)
    test_layout = Layout(header=True, a=1, b=2, label=None, guid=0)


class StsbProcessor(DataProcessor):
    """STS-B: pair similarity score, a regression (Pearson/Spearman)."""
    name, is_regression, metrics = "sts-b", True, ("pearson", "spearman")
    train_layout = Layout(header=True, a=7, b=8, label=-1, guid=0)
    test_layout = Layout(header=True, a=7, b=8, label=None, guid=0)


class WnliProcessor(DataProcessor):
    """WNLI: Winograd NLI pairs."""
    name, labels = "wnli", ("0", "1")
    train_layout = Layout(header=True, a=1, b=2, label=3, guid=0)
    test_layout = Layout(header=True, a=1, b=2, label=None, guid=0)


class XnliProcessor(DataProcessor):
    """XNLI as the original: train on machine-translated MultiNLI, dev from xnli.dev.tsv.

    Files: `multinli/multinli.train.<lang>.tsv` (premise, hypo, label; "contradictory" is
    renamed) and `xnli.dev.tsv` / `xnli.test.tsv` (rows filtered on the language column).
    """

    name, labels = "xnli", ("contradiction", "entailment", "neutral")

    def __init__(self, language="zh"):
        self.language = language
        self.train_file = f"multinli/multinli.train.{language}.tsv"
        self.dev_file, self.test_file = "xnli.dev.tsv", "xnli.test.tsv"
        self.train_layout = Layout(header=True, a=0, b=1, label=2, guid=None)
        self.dev_layout = Layout(header=True, a=6, b=7, label=1, guid=None)
        self.test_layout = self.dev_layout

    def map_label(self, label):
        """The machine-translated train files say "contradictory"."""
        return "contradiction" if label == "contradictory" else label

    def _row_to_example(self, row, layout, set_type, path, line_no):
        if set_type != "train" and row and row[0] != self.language:
            return None
        return super()._row_to_example(row, layout, set_type, path, line_no)


PROCESSORS = {
    "cola": ColaProcessor, "mnli": MnliProcessor, "mnli_mismatched": MnliMismatchedProcessor,
    "mrpc": MrpcProcessor, "xnli": XnliProcessor, "sst-2": Sst2Processor, "sst2": Sst2Processor,
    "qnli": QnliProcessor, "qqp": QqpProcessor, "rte": RteProcessor, "sts-b": StsbProcessor,
    "stsb": StsbProcessor, "wnli": WnliProcessor,
}


def get_processor(task_name, **kwargs):
    """The processor for `--task_name` (case-insensitive)."""
    key = (task_name or "").lower()
    if key not in PROCESSORS:
        raise BertError(f"--task_name: unknown task {task_name!r}; expected one of "
                        f"{', '.join(sorted(PROCESSORS))} (or set --tfds_name)")
    cls = PROCESSORS[key]
    return cls(**kwargs) if cls is XnliProcessor else cls()


def read_tsv(path, skip_header=False):
    """[(line number, columns)] of a TSV file (no quote handling, as the original).

    Args:
        path: the .tsv file (local or gs://...).
        skip_header: drop line 1. Blank lines are always dropped.
    """
    text = fileio.read_text(path, "data file not found (check --data_dir)")
    rows = []
    for n, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if (n == 1 and skip_header) or not line:
            continue
        rows.append((n, line.split("\t")))
    return rows


# --- features --------------------------------------------------------------------------

def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """Pop from the end of the longer list until the pair fits (original's heuristic).

    Args:
        tokens_a: list, truncated in place.
        tokens_b: list, truncated in place; loses the token on ties.
        max_length: int, most tokens of both together.
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def encode_pair(tokenizer, text_a, text_b, max_seq_length):
    """(input_ids, input_mask, segment_ids, tokens) for one example, zero-padded.

    Args:
        tokenizer: a FullTokenizer.
        text_a: str, first segment.
        text_b: str or None; one that tokenizes to nothing counts as none, as the original.
        max_seq_length: int, padded length (>= 3).
    """
    tokens_a = tokenizer.tokenize(text_a)
    # As the original (and the exported preprocessor): a b that tokenizes to nothing is no b.
    tokens_b = tokenizer.tokenize(text_b) if text_b else None
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        del tokens_a[max_seq_length - 2:]
    tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += tokens_b + ["[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)
    ids = tokenizer.convert_tokens_to_ids(tokens)
    pad = max_seq_length - len(ids)
    return ids + [0] * pad, [1] * len(ids) + [0] * pad, segment_ids + [0] * pad, tokens


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                 is_regression=False, progress=None):
    """Arrays: input_word_ids/input_mask/input_type_ids [N, S] int32, label_ids [N].

    Args:
        examples: InputExamples.
        label_list: label strings, index = class id (ignored for regression).
        max_seq_length: int, S.
        tokenizer: a FullTokenizer.
        is_regression: float32 labels taken as is, instead of class ids.
        progress: tqdm description; None shows no progress bar.
    """
    if max_seq_length < 3:
        raise BertError(f"--max_seq_length: must be >= 3, got {max_seq_length}")
    label_map = {label: i for i, label in enumerate(label_list)}
    n = len(examples)
    ids = np.zeros((n, max_seq_length), np.int32)
    mask, types = np.zeros_like(ids), np.zeros_like(ids)
    labels = np.zeros((n,), np.float32 if is_regression else np.int32)
    from bert_tf.progress import bar as tqdm
    for i, ex in enumerate(tqdm(examples, desc=progress or "features", disable=progress is None,
                                unit="ex", mininterval=2.0)):
        ids[i], mask[i], types[i], _ = encode_pair(tokenizer, ex.text_a, ex.text_b,
                                                   max_seq_length)
        if is_regression:
            labels[i] = float(ex.label)
        else:
            if ex.label not in label_map:
                raise BertError(f"example {ex.guid}: label {ex.label!r} is not one of "
                                f"{', '.join(map(str, label_list))}")
            labels[i] = label_map[ex.label]
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types,
            "label_ids": labels}
