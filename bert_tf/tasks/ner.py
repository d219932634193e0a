"""CoNLL-2003 style token tagging (NER): reading, first-piece labelling, run_ner.

Input: one token per line, columns separated by whitespace, the word first and the tag last
(`EU NNP B-NP B-ORG`); blank lines end sentences; `-DOCSTART-` lines are skipped. Tags may be
IOB1 (CoNLL-2003 as released: `I-` opens an entity unless it follows one of the same type) or
IOB2; with `label_scheme="iob2"` (default) they are converted to IOB2 for training and output.
Each word's first WordPiece carries its label (weight 1); later pieces, [CLS] and [SEP] have
weight 0. Sentences longer than the window are split into several features at word
boundaries, so every word gets a prediction. Scores are entity-level (conlleval/seqeval).
"""
import dataclasses
import logging
import os

import numpy as np

from bert_tf import BertError, fileio
from bert_tf.script_flags import flag
from bert_tf.tasks.finetune import FinetuneTask, RunConfig, built

log = logging.getLogger("bert_tf.tasks")

CONLL2003_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                    "I-MISC")


@dataclasses.dataclass
class Sentence:
    """One CoNLL sentence: its words and tags, and each word's line (for error messages)."""
    words: list
    tags: list
    lines: list  # source line number of each word (error messages)


def read_conll(path):
    """Sentences of a CoNLL file (words and their last-column tags)."""
    text = fileio.read_text(path, "data file not found (check --data_dir)")
    sentences, words, tags, lines = [], [], [], []

    def flush():
        if words:
            sentences.append(Sentence(list(words), list(tags), list(lines)))
            words.clear(), tags.clear(), lines.clear()

    for n, line in enumerate(text.split("\n"), start=1):
        cols = line.split()
        if not cols:
            flush()
            continue
        if cols[0] == "-DOCSTART-":
            flush()
            continue
        if len(cols) < 2:
            raise BertError(f"{path}: line {n}: expected 'word ... tag', got {line.strip()!r}")
        words.append(cols[0])
        tags.append(cols[-1])
        lines.append(n)
    flush()
    return sentences


def iob1_to_iob2(tags):
    """IOB1 -> IOB2: an I-X that starts an entity becomes B-X (IOB2 input is unchanged)."""
    out, prev = [], "O"
    for tag in tags:
        if tag.startswith("I-"):
            kind = tag[2:]
            if prev == "O" or prev[2:] != kind:
                tag = "B-" + kind
        out.append(tag)
        prev = tag
    return out


def iob2_to_iob1(tags):
    """IOB2 -> IOB1: B-X only directly after an entity of the same type."""
    out, prev = [], "O"
    for tag in tags:
        if tag.startswith("B-") and not (prev != "O" and prev[2:] == tag[2:]):
            tag = "I-" + tag[2:]
        out.append(tag)
        prev = tag
    return out


def prepare(sentences, label_list, label_scheme, path):
    """Convert tags to the scheme and check every tag is a known label (in place).

    Args:
        sentences: Sentences from `read_conll`; their tags are replaced.
        label_list: the allowed tags.
        label_scheme: "iob2" (convert IOB1 input) or "none" (tags as given).
        path: the source file, for errors.

    Returns:
        `sentences`.
    """
    known = set(label_list)
    for s in sentences:
        if label_scheme == "iob2":
            s.tags = iob1_to_iob2(s.tags)
        for tag, line in zip(s.tags, s.lines):
            if tag not in known:
                raise BertError(f"{path}: line {line}: label {tag!r} is not one of "
                                f"{', '.join(label_list)} (set --labels)")
    return sentences


@dataclasses.dataclass
class TagFeature:
    """Where one window's words sit, to map its logits back to words (`decode`)."""
    sentence_index: int
    first_word: int
    first_piece: list  # feature position of each word's first piece (words of this chunk)


def convert_sentences_to_features(sentences, label_list, max_seq_length, tokenizer):
    """(arrays, TagFeatures). Long sentences become several windows split between words.

    Args:
        sentences: Sentences with tags in `label_list`.
        label_list: tags in logit order.
        max_seq_length: int, window length including [CLS]/[SEP] (>= 3).
        tokenizer: a FullTokenizer.

    Returns:
        (dict of int32 [N, S] encoder inputs and label_ids, float32 label_weights [N, S];
        one TagFeature per window).
    """
    if max_seq_length < 3:
        raise BertError(f"--max_seq_length: must be >= 3, got {max_seq_length}")
    label_map = {label: i for i, label in enumerate(label_list)}
    room = max_seq_length - 2
    rows, feats = [], []
    for si, s in enumerate(sentences):
        pieces = []
        for w in s.words:
            p = tokenizer.tokenize(w) or ["[UNK]"]  # e.g. a lone control char
            pieces.append(p[:room])
        start = 0
        while start < len(s.words):
            end, used = start, 0
            while end < len(s.words) and used + len(pieces[end]) <= room:
                used += len(pieces[end])
                end += 1
            tokens, labels, weights, first = ["[CLS]"], [0], [0.0], []
            for wi in range(start, end):
                first.append(len(tokens))
                for k, piece in enumerate(pieces[wi]):
                    tokens.append(piece)
                    labels.append(label_map.get(s.tags[wi], 0) if k == 0 else 0)
                    weights.append(1.0 if k == 0 else 0.0)
            tokens.append("[SEP]")
            labels.append(0)
            weights.append(0.0)
            rows.append((tokenizer.convert_tokens_to_ids(tokens), labels, weights))
            feats.append(TagFeature(si, start, first))
            start = end
    n = len(rows)
    arrays = {k: np.zeros((n, max_seq_length), np.int32)
              for k in ("input_word_ids", "input_mask", "input_type_ids", "label_ids")}
    arrays["label_weights"] = np.zeros((n, max_seq_length), np.float32)
    for i, (ids, labels, weights) in enumerate(rows):
        arrays["input_word_ids"][i, :len(ids)] = ids
        arrays["input_mask"][i, :len(ids)] = 1
        arrays["label_ids"][i, :len(ids)] = labels
        arrays["label_weights"][i, :len(ids)] = weights
    return arrays, feats


def decode(sentences, feats, logits, label_list):
    """Word-level predicted tags per sentence from [N, S, L] logits.

    Args:
        sentences: the Sentences the features were made from.
        feats: TagFeatures from `convert_sentences_to_features`, one per logits row.
        logits: [N, S, L] array.
        label_list: tags in logit order.
    """
    preds = [["O"] * len(s.words) for s in sentences]
    best = np.argmax(logits, axis=-1)
    for f, row in zip(feats, best):
        for k, pos in enumerate(f.first_piece):
            preds[f.sentence_index][f.first_word + k] = label_list[int(row[pos])]
    return preds


@dataclasses.dataclass
class NerConfig(RunConfig):
    """run_ner's flags (run_classifier's style) on top of the shared RunConfig."""
    data_dir: str = flag(None, "Directory with the CoNLL files.")
    train_file: str = flag("train.txt", "Training file (relative to --data_dir).")
    dev_file: str = flag("dev.txt", "Dev file (valid.txt is used if dev.txt is missing).")
    test_file: str = flag("test.txt", "Test file.")
    labels: str = flag(None, "Comma-separated tag set (default: the CoNLL-2003 IOB2 tags "
                       "O,B-PER,I-PER,B-ORG,I-ORG,B-LOC,I-LOC,B-MISC,I-MISC).")
    label_scheme: str = flag("iob2", "iob2: convert IOB1 input (as CoNLL-2003 is released) to "
                             "IOB2; none: use the tags as given.", enum=("iob2", "none"))
    bert_config_file: str = flag(None, "The config json file of the pre-trained BERT model.")
    vocab_file: str = flag(None, "The vocabulary file that the BERT model was trained on.")
    do_lower_case: bool = flag(True, "Whether to lower case the input text (use False with "
                               "cased models, usual for NER).")
    max_seq_length: int = flag(128, "Maximum WordPieces per window; longer sentences are split "
                               "at word boundaries.")
    do_train: bool = flag(False, "Whether to run training.")
    do_eval: bool = flag(False, "Whether to run eval on the dev set.")
    do_predict: bool = flag(False, "Whether to tag the test set.")


class NerTask(FinetuneTask):
    """Token tagging: the loss over the first piece of every word.

    Args:
        cfg: NerConfig.
        bert_config: BertConfig of the encoder.
        labels: the tag strings in logit order.
    """

    def __init__(self, cfg, bert_config, labels):
        super().__init__(cfg, "tagging", labels)
        self.bert_config = bert_config

    def build_model(self):
        """A built BertTokenClassifier with one logit per tag."""
        from bert_tf.modeling.encoder import BertEncoder
        from bert_tf.modeling.models import BertTokenClassifier
        return built(BertTokenClassifier(BertEncoder.from_bert_config(self.bert_config, name="encoder"),
                                         len(self.labels)), self.cfg)


def _data_path(cfg, name):
    path = os.path.join(cfg.data_dir, name)
    if name == "dev.txt":  # CoNLL-2003 copies often call it valid.txt
        import tensorflow as tf
        alt = os.path.join(cfg.data_dir, "valid.txt")
        if not tf.io.gfile.exists(path) and tf.io.gfile.exists(alt):
            return alt
    return path


def _write_conll(path, sentences, preds):
    """word gold predicted per line, blank line between sentences (conlleval's input)."""
    from bert_tf.tasks.finetune import write_text
    out = []
    for s, p in zip(sentences, preds):
        out.extend(f"{w} {g} {t}\n" for w, g, t in zip(s.words, s.tags, p))
        out.append("\n")
    write_text(path, "".join(out))


def run(cfg, init_source=None):
    """Train / evaluate / tag as the flags ask; returns a dict of what it produced.

    Args:
        cfg: NerConfig.
        init_source: the `Source` read for --init_checkpoint (`bert_tf.tasks.cli`), or None.
    """
    from bert_tf.tasks import finetune, metrics, prediction
    from bert_tf.tasks.classifier import check_common
    if cfg.label_scheme not in ("iob2", "none"):
        raise BertError(f"--label_scheme: expected iob2 or none, got {cfg.label_scheme!r}")
    bert_config, tokenizer = check_common(cfg, init_source=init_source)
    if not cfg.data_dir:
        raise BertError("--data_dir: required")
    label_list = ([x.strip() for x in cfg.labels.split(",") if x.strip()] if cfg.labels
                  else list(CONLL2003_LABELS))
    if len(set(label_list)) != len(label_list) or not label_list:
        raise BertError(f"--labels: must be distinct and non-empty, got {cfg.labels!r}")

    def load(name):
        path = _data_path(cfg, name)
        return prepare(read_conll(path), label_list, cfg.label_scheme, path)

    train = load(cfg.train_file) if cfg.do_train else None
    dev = load(cfg.dev_file) if cfg.do_eval else None
    test = load(cfg.test_file) if cfg.do_predict else None
    trainer = finetune.make_trainer(NerTask(cfg, bert_config, label_list), cfg, init_source)
    result = {"output_dir": cfg.output_dir, "labels": label_list}
    if cfg.do_train:
        if not train:
            raise BertError(f"{cfg.train_file}: no training sentences")
        arrays, _ = convert_sentences_to_features(train, label_list, cfg.max_seq_length,
                                                  tokenizer)
        steps, warmup = cfg.train_steps(len(arrays["input_word_ids"]))
        result["train_loss"] = finetune.train(trainer, arrays, steps, warmup)
    else:
        trainer.restore(inference=True)
    for name, sentences, flag in (("eval", dev, cfg.do_eval), ("test", test, cfg.do_predict)):
        if not flag:
            continue
        arrays, feats = convert_sentences_to_features(sentences, label_list,
                                                      cfg.max_seq_length, tokenizer)
        batch = cfg.eval_batch_size if name == "eval" else cfg.predict_batch_size
        logits = prediction.predict(trainer, arrays, batch, ["logits"], desc=name)["logits"]
        preds = decode(sentences, feats, logits, label_list)
        out_name = "eval_predictions.txt" if name == "eval" else "test_predictions.txt"
        _write_conll(os.path.join(cfg.output_dir, out_name), sentences, preds)
        result[f"{name}_predictions"] = preds
        if name == "eval":
            gold = [s.tags for s in sentences]
            scores = metrics.entity_scores(gold, preds)
            flat_g = [t for s in gold for t in s]
            flat_p = [t for s in preds for t in s]
            res = {"eval_precision": scores["precision"], "eval_recall": scores["recall"],
                   "eval_f1": scores["f1"], "eval_accuracy": metrics.accuracy(flat_g, flat_p),
                   "global_step": trainer.step}
            for kind, sc in scores["per_type"].items():
                res[f"eval_f1_{kind}"] = sc["f1"]
            trainer.write_results(res)
            result["eval"] = res
    if cfg.do_train and cfg.do_export:
        result["export_dir"] = trainer.export()
    return result
