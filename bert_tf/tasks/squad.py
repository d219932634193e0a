"""SQuAD v1.1/v2.0: reading, doc-span windows, features, run_squad (decoding: squad_decoding).

Contexts are split into words on whitespace; words into WordPieces. A question's pieces
(at most `max_query_length`) and a window of the context's pieces make one feature:
`[CLS] question [SEP] context-window [SEP]`. Windows advance by `doc_stride` pieces; a piece
seen by several windows is scored only in the window where it has the most context on both
sides (`token_is_max_context`).
"""
import dataclasses
import json
import logging
import os

import numpy as np

from bert_tf import BertError
from bert_tf.script_flags import flag
from bert_tf.tasks.finetune import FinetuneTask, RunConfig, built
from bert_tf.tasks.squad_decoding import final_text_span, get_final_text, postprocess  # noqa: F401

log = logging.getLogger("bert_tf.tasks")

FIRST_UNIQUE_ID = 1_000_000_000


@dataclasses.dataclass
class SquadExample:
    """One question over its context; answer positions are word indexes (training only)."""
    qas_id: str
    question_text: str
    doc_tokens: list            # context split on whitespace
    word_offsets: list          # start character of each doc token in `context`
    context: str
    orig_answer_text: str = None
    start_position: int = None  # word index of the answer start (training only)
    end_position: int = None
    is_impossible: bool = False


@dataclasses.dataclass
class SquadFeature:
    """One doc window of an example as model input; positions are feature token indexes."""
    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list
    token_to_orig_map: dict     # feature token index -> doc word index
    token_is_max_context: dict  # feature token index -> bool
    input_ids: list
    input_mask: list
    segment_ids: list
    start_position: int = 0
    end_position: int = 0
    is_impossible: bool = False


def _is_whitespace(c):
    return c in " \t\r\n" or ord(c) == 0x202F


def split_context(context):
    """(words, start offset of each word, word index of each character) on whitespace, as
    the original splits contexts (a whitespace character maps to the word before it)."""
    words, offsets, char_to_word = [], [], []
    prev_ws = True
    for i, c in enumerate(context):
        if _is_whitespace(c):
            prev_ws = True
        else:
            if prev_ws:
                words.append(c)
                offsets.append(i)
            else:
                words[-1] += c
            prev_ws = False
        char_to_word.append(len(words) - 1)
    return words, offsets, char_to_word


def read_squad_examples(input_file, is_training, version_2_with_negative=False):
    """SquadExamples from a SQuAD JSON file (training: answer word positions too).

    Training uses each question's first answer; an answer whose text is not found at its
    `answer_start` is skipped with a warning, as the original did.

    Args:
        input_file: SQuAD JSON (local or gs://...).
        is_training: read answers and locate them in the context.
        version_2_with_negative: honour `is_impossible` (SQuAD 2.0).
    """
    import tensorflow as tf
    if not tf.io.gfile.exists(input_file):
        raise BertError(f"{input_file}: SQuAD file not found")
    with tf.io.gfile.GFile(input_file, "r") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise BertError(f"{input_file}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise BertError(f"{input_file}: expected a SQuAD JSON object with a 'data' list")
    examples, skipped = [], 0
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{input_file}: data[{a}].paragraphs[{p}]"
            if "context" not in paragraph:
                raise BertError(f"{where}: missing 'context'")
            context = paragraph["context"]
            words, offsets, char_to_word = split_context(context)
            for q, qa in enumerate(paragraph.get("qas", [])):
                if "id" not in qa or "question" not in qa:
                    raise BertError(f"{where}.qas[{q}]: missing 'id' or 'question'")
                ex = SquadExample(qa["id"], qa["question"], words, offsets, context)
                if is_training:
                    ex.is_impossible = bool(version_2_with_negative and qa.get("is_impossible"))
                    if ex.is_impossible:
                        ex.start_position = ex.end_position = -1
                        ex.orig_answer_text = ""
                    else:
                        answers = qa.get("answers") or []
                        if not answers:
                            raise BertError(f"{where}.qas[{q}] ({qa['id']}): no answer to train "
                                            "on (is_impossible without "
                                            "--version_2_with_negative?)")
                        answer = answers[0]
                        text, start = answer["text"], int(answer["answer_start"])
                        if not text or not 0 <= start < len(context) or \
                                start + len(text) > len(context):
                            raise BertError(f"{where}.qas[{q}] ({qa['id']}): answer_start "
                                            f"{start} / text {text!r} outside the context")
                        ex.orig_answer_text = text
                        ex.start_position = char_to_word[start]
                        ex.end_position = char_to_word[start + len(text) - 1]
                        actual = " ".join(words[ex.start_position:ex.end_position + 1])
                        if actual.find(" ".join(text.split())) == -1:
                            log.warning("skipping %s: answer %r not found at its offset (%r)",
                                        qa["id"], text, actual)
                            skipped += 1
                            continue
                examples.append(ex)
    if skipped:
        log.warning("%s: skipped %d training question(s) with misaligned answers",
                    input_file, skipped)
    return examples


def _improve_answer_span(doc_pieces, start, end, tokenizer, answer_text):
    """Tightest piece span equal to the tokenized answer (e.g. "1895" inside "(1895-1943).")."""
    answer = " ".join(tokenizer.tokenize(answer_text))
    for s in range(start, end + 1):
        for e in range(end, s - 1, -1):
            if " ".join(doc_pieces[s:e + 1]) == answer:
                return s, e
    return start, end


def _max_context(spans, span_index, position):
    """Is `position` best scored in span `span_index` (most context: min(left, right))?"""
    best, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best is None or score > best:
            best, best_index = score, i
    return best_index == span_index


def doc_spans(num_pieces, max_tokens_for_doc, doc_stride):
    """[(start, length)] windows over the context pieces; the last one ends at the end.

    Args:
        num_pieces: int, WordPieces in the context.
        max_tokens_for_doc: int, most pieces a window holds.
        doc_stride: int, how far the next window starts (at most a window's length).
    """
    spans, start = [], 0
    while start < num_pieces:
        length = min(num_pieces - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training, progress=None):
    """SquadFeatures (one per doc window) for the examples, in order.

    Args:
        examples: SquadExamples.
        tokenizer: a FullTokenizer.
        max_seq_length: int, padded feature length.
        doc_stride: int, pieces between window starts.
        max_query_length: int, question pieces kept.
        is_training: set answer positions; a window without the answer points at [CLS].
        progress: tqdm description; None shows no progress bar.
    """
    if doc_stride <= 0:
        raise BertError(f"--doc_stride: must be > 0, got {doc_stride}")
    if max_seq_length - min(max_query_length, max_seq_length) - 3 <= 0:
        raise BertError(f"--max_seq_length {max_seq_length} leaves no room for the context "
                        f"after --max_query_length {max_query_length} and 3 special tokens")
    from bert_tf.progress import bar as tqdm
    features, unique_id = [], FIRST_UNIQUE_ID
    for example_index, ex in enumerate(tqdm(examples, desc=progress or "features",
                                            disable=progress is None, unit="ex",
                                            mininterval=2.0)):
        query = tokenizer.tokenize(ex.question_text)[:max_query_length]
        piece_to_word, word_to_piece, pieces = [], [], []
        for i, word in enumerate(ex.doc_tokens):
            word_to_piece.append(len(pieces))
            for piece in tokenizer.tokenize(word):
                piece_to_word.append(i)
                pieces.append(piece)
        tok_start = tok_end = None
        if is_training and ex.is_impossible:
            tok_start = tok_end = -1
        elif is_training:
            tok_start = word_to_piece[ex.start_position]
            if ex.end_position < len(ex.doc_tokens) - 1:
                tok_end = word_to_piece[ex.end_position + 1] - 1
            else:
                tok_end = len(pieces) - 1
            tok_start, tok_end = _improve_answer_span(pieces, tok_start, tok_end, tokenizer,
                                                      ex.orig_answer_text)
        spans = doc_spans(len(pieces), max_seq_length - len(query) - 3, doc_stride)
        for span_index, (start, length) in enumerate(spans):
            tokens = ["[CLS]"] + query + ["[SEP]"]
            segment_ids = [0] * len(tokens)
            to_orig, max_ctx = {}, {}
            for i in range(length):
                pos = start + i
                to_orig[len(tokens)] = piece_to_word[pos]
                max_ctx[len(tokens)] = _max_context(spans, span_index, pos)
                tokens.append(pieces[pos])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)
            ids = tokenizer.convert_tokens_to_ids(tokens)
            pad = max_seq_length - len(ids)
            feature = SquadFeature(unique_id, example_index, span_index, tokens, to_orig,
                                   max_ctx, ids + [0] * pad, [1] * len(ids) + [0] * pad,
                                   segment_ids + [0] * pad)
            if is_training:
                feature.is_impossible = ex.is_impossible
                offset = len(query) + 2
                if not ex.is_impossible and start <= tok_start and tok_end <= start + length - 1:
                    feature.start_position = tok_start - start + offset
                    feature.end_position = tok_end - start + offset
                # else: impossible, or the answer is not inside this window -> [CLS] (0, 0)
            features.append(feature)
            unique_id += 1
    return features


def features_to_arrays(features, is_training):
    """SquadFeatures -> int32 encoder input arrays [N, S] (and answer positions if training).

    Args:
        features: SquadFeatures.
        is_training: add start_positions/end_positions [N].
    """
    arrays = {
        "input_word_ids": np.array([f.input_ids for f in features], np.int32),
        "input_mask": np.array([f.input_mask for f in features], np.int32),
        "input_type_ids": np.array([f.segment_ids for f in features], np.int32),
    }
    if is_training:
        arrays["start_positions"] = np.array([f.start_position for f in features], np.int32)
        arrays["end_positions"] = np.array([f.end_position for f in features], np.int32)
    return arrays


@dataclasses.dataclass
class SquadConfig(RunConfig):
    """run_squad's flags (original names and defaults) on top of the shared RunConfig."""
    bert_config_file: str = flag(None, "The config json file of the pre-trained BERT model.")
    vocab_file: str = flag(None, "The vocabulary file that the BERT model was trained on.")
    train_file: str = flag(None, "SQuAD json for training, e.g. train-v1.1.json")
    predict_file: str = flag(None, "SQuAD json for predictions, e.g. dev-v1.1.json")
    do_lower_case: bool = flag(True, "Whether to lower case the input text. Should be True for "
                               "uncased models and False for cased models.")
    max_seq_length: int = flag(384, "The maximum total input sequence length after WordPiece "
                               "tokenization.")
    doc_stride: int = flag(128, "When splitting up a long document into chunks, how much "
                           "stride to take between chunks.")
    max_query_length: int = flag(64, "The maximum number of tokens for the question; longer "
                                 "questions are truncated.")
    do_train: bool = flag(False, "Whether to run training.")
    do_predict: bool = flag(False, "Whether to run eval on the dev set.")
    n_best_size: int = flag(20, "The total number of n-best predictions to generate in the "
                            "nbest_predictions.json output file.")
    max_answer_length: int = flag(30, "The maximum length of an answer that can be generated "
                                  "(in WordPieces).")
    verbose_logging: bool = flag(False, "Log the text alignment warnings of post-processing.")
    version_2_with_negative: bool = flag(False, "If true, the SQuAD examples contain some that "
                                         "do not have an answer.")
    null_score_diff_threshold: float = flag(0.0, "If null_score - best_non_null is greater "
                                            "than the threshold predict null.")


class SquadTask(FinetuneTask):
    """Answer spans: start/end logits over the window, the loss averaged over both ends.

    Args:
        cfg: SquadConfig.
        bert_config: BertConfig of the encoder.
    """

    def __init__(self, cfg, bert_config):
        super().__init__(cfg, "span")
        self.bert_config = bert_config

    def build_model(self):
        """A built BertSpanLabeler (start/end logits per token)."""
        from bert_tf.modeling.encoder import BertEncoder
        from bert_tf.modeling.models import BertSpanLabeler
        return built(BertSpanLabeler(BertEncoder.from_bert_config(self.bert_config, name="encoder")), self.cfg)


# --- run_squad ---------------------------------------------------------------------------

def _json_dump(path, obj):
    from bert_tf.tasks.finetune import write_text
    write_text(path, json.dumps(obj, indent=4, ensure_ascii=False) + "\n")


def _has_answers(input_file):
    import tensorflow as tf
    with tf.io.gfile.GFile(input_file, "r") as f:
        data = json.load(f)
    return data, any(qa.get("answers") or "is_impossible" in qa
                     for article in data["data"] for p in article["paragraphs"]
                     for qa in p["qas"])


def run(cfg, init_source=None):
    """Train on --train_file and/or predict --predict_file (predictions.json, nbest, null odds).

    When the predict file carries answers, EM/F1 (official script rules) go to
    eval_results.txt too.

    Args:
        cfg: SquadConfig.
        init_source: the `Source` read for --init_checkpoint (`bert_tf.tasks.cli`), or None.
    """
    from bert_tf.tasks import finetune, prediction, squad_metrics
    from bert_tf.tasks.classifier import check_common
    bert_config, tokenizer = check_common(cfg, ("do_train", "do_predict"), init_source)
    if cfg.do_train and not cfg.train_file:
        raise BertError("--train_file: required with --do_train")
    if cfg.do_predict and not cfg.predict_file:
        raise BertError("--predict_file: required with --do_predict")
    v2 = cfg.version_2_with_negative
    train = read_squad_examples(cfg.train_file, True, v2) if cfg.do_train else None
    evals = read_squad_examples(cfg.predict_file, False, v2) if cfg.do_predict else None
    progress = cfg.progress
    trainer = finetune.make_trainer(SquadTask(cfg, bert_config), cfg, init_source)
    result = {"output_dir": cfg.output_dir}
    if cfg.do_train:
        if not train:
            raise BertError(f"{cfg.train_file}: no training questions")
        feats = convert_examples_to_features(train, tokenizer, cfg.max_seq_length,
                                             cfg.doc_stride, cfg.max_query_length, True,
                                             progress="train features" if progress else None)
        steps, warmup = cfg.train_steps(len(train))
        log.info("training: %d questions, %d features, %d steps", len(train), len(feats), steps)
        result["train_loss"] = finetune.train(trainer, features_to_arrays(feats, True), steps,
                                              warmup)
    else:
        trainer.restore(inference=True)
    if cfg.do_predict:
        feats = convert_examples_to_features(evals, tokenizer, cfg.max_seq_length,
                                             cfg.doc_stride, cfg.max_query_length, False,
                                             progress="eval features" if progress else None)
        out = prediction.predict(trainer, features_to_arrays(feats, False),
                                 cfg.predict_batch_size, ["start_logits", "end_logits"])
        preds, nbest, odds = postprocess(
            evals, feats, out["start_logits"], out["end_logits"], cfg.n_best_size,
            cfg.max_answer_length, cfg.do_lower_case, v2, cfg.null_score_diff_threshold,
            cfg.verbose_logging)
        _json_dump(os.path.join(cfg.output_dir, "predictions.json"), preds)
        _json_dump(os.path.join(cfg.output_dir, "nbest_predictions.json"), nbest)
        if v2:
            _json_dump(os.path.join(cfg.output_dir, "null_odds.json"), odds)
        result.update(predictions=preds, nbest=nbest, null_odds=odds)
        data, labelled = _has_answers(cfg.predict_file)
        if labelled:
            scores = (squad_metrics.evaluate_v2(data, preds, odds) if v2
                      else squad_metrics.evaluate_v1(data, preds))
            scores["global_step"] = trainer.step
            trainer.write_results(scores)
            result["eval"] = scores
            log.info("eval: %s", scores)
    if cfg.do_train and cfg.do_export:
        result["export_dir"] = trainer.export()
    return result

