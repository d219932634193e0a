"""End-to-end SavedModel for serving: raw text in, task outputs out, tokenized in-graph.

Signatures (all outputs batch-major, so TF Serving's REST "instances" format works):
  serving_default(text: string [B])           single sentences
  serving_pairs(text: string [B], text_b: [B]) sentence pairs / (question, context) for `span`
  predict_ids(input_word_ids, input_mask, input_type_ids: int32 [B, S])  pre-tokenized input
  preprocess(text) -> the three int32 inputs (what serving_default feeds the model)
`__call__(text)` (alias `serve`, keras.layers.TFSMLayer's default endpoint) is serving_default
as a plain function.

Every signature computes only the batch's real tokens (cut to the last real position + 1,
rounded up to a multiple of 8; `bert_tf.modeling.real_length`); [B, S] outputs are padded back
to S, and every padding position (input_mask 0) holds 0.0 in sequence_output and tagging
logits, what the model declares in start_logits / end_logits (-1e9, `SPAN_PAD_LOGIT`: never a
best span), and this export's TAG_PAD (-1) / "" in tag_ids / tags / tokens.

Outputs per task (B batch, S sequence, M max_masks, K top_k):
  embeddings     embedding [B, H] (pooled as asked: the pooler by default, or the masked
                 mean / [CLS] vector, optionally L2-normalised), pooled_output [B, H],
                 sequence_output [B, S, H]
  classification logits, probabilities [B, C], label_id int32 [B], label string [B]
  regression     score [B]
  span           start_logits, end_logits [B, S], start_index, end_index int32 [B] (-1: no
                 candidate), span_score [B], answer string [B] (the span's wordpieces joined,
                 `##` merged), tokens string [B, S]. Candidates: real non-special tokens of the
                 second segment if there is one (the context), else of the first.
  tagging        logits [B, S, L], tag_ids int32 [B, S] (-1 on padding), tags string [B, S]
                 ("" on padding), tokens string [B, S]
  fill_mask      mask_count int32 [B] (masks answered, at most M), mask_positions int32 [B, M],
                 top_k_ids int32 [B, M, K], top_k_tokens string [B, M, K], top_k_scores
                 float32 [B, M, K] (softmax probabilities); unused slots hold -1 / "" / 0.
                 The literal "[MASK]" in the text becomes the mask id: the text is split on it
                 before tokenization (it would otherwise be split into "[", "mask", "]").
"""
import bert_tf  # noqa: F401
import tensorflow as tf

from bert_tf import BertError
from bert_tf import tokenization
from bert_tf.export import common
from bert_tf.export.task_settings import TASKS, check_task_model, labels_for, pooling_for  # noqa: F401
from bert_tf.modeling import models
from bert_tf.modeling import real_length as rl
from bert_tf.export.preprocessor import (TEXT_B_SPEC, TEXT_SPEC, shared_preprocessor,
                                         check_seq_length)

MASK_LITERAL = tokenization.MASK
TAG_PAD = -1  # what tag_ids hold at padding positions (tags and tokens hold "")


class EndToEndModule(tf.Module):
    """Tokenizer + packer + model + task post-processing, all in-graph.

    Args:
        model: the task's model (see `export_end_to_end`).
        vocab_file: WordPiece vocab; must not have more lines than the model's vocab_size.
        do_lower_case: as the original's --do_lower_case.
        task: one of `TASKS`.
        seq_length: packed length, 3..max_position_embeddings.
        labels: classification/tagging label strings (default "0".."n-1").
        top_k: fill_mask: predictions per mask.
        max_masks: fill_mask: masks answered per text.
        max_answer_length: span: longest answer, in tokens.
        name: tf.Module name.
        strip_accents: None (= do_lower_case, the original) or a bool (see
            `export_end_to_end`).
        pooling, normalize: embeddings: the `embedding` output (see `export_end_to_end`).
        preprocessing: a `TextPreprocessor` of these settings shared with other exports.
    """

    def __init__(self, model, vocab_file, do_lower_case, task="embeddings", seq_length=128,
                 labels=None, top_k=5, max_masks=8, max_answer_length=30, name="bert_end_to_end",
                 strip_accents=None, pooling=None, normalize=None, preprocessing=None):
        super().__init__(name=name)
        check_task_model(model, task)
        check_seq_length(seq_length)
        cfg = common.bert_config_of(model, "export_end_to_end")
        if seq_length > cfg.max_position_embeddings:
            raise BertError(f"--seq_length: {seq_length} exceeds max_position_embeddings "
                            f"{cfg.max_position_embeddings}")
        self._pooling, self._normalize = pooling_for(model, task, pooling, normalize)
        if vocab_file is None:  # ids in only (IdsModule): a model exported without its vocab
            if task == "fill_mask":
                raise BertError("--task=fill_mask: needs a vocab (to find [MASK] and name "
                                "the predicted tokens)")
            self.preprocessing = None
            self._init_rest(model, task, cfg, seq_length, labels, top_k, max_masks,
                            max_answer_length, None)
            return
        # The one in-graph preprocessor every export uses (tracked: vocab table and asset).
        self.preprocessing = shared_preprocessor(preprocessing, vocab_file, do_lower_case,
                                                 seq_length, strip_accents)
        from bert_tf.tokenization import check_vocab_size
        tokens = check_vocab_size(vocab_file, cfg.vocab_size)
        self._init_rest(model, task, cfg, seq_length, labels, top_k, max_masks,
                        max_answer_length, tokens)

    def _init_rest(self, model, task, cfg, seq_length, labels, top_k, max_masks,
                   max_answer_length, tokens):
        if task == "fill_mask" and not 1 <= top_k <= cfg.vocab_size:
            raise BertError(f"--top_k: must be in [1, {cfg.vocab_size}], got {top_k}")
        if task == "fill_mask" and max_masks < 1:
            raise BertError(f"--max_masks: must be >= 1, got {max_masks}")
        core = common.find_encoder(model) if task == "embeddings" and hasattr(
            model, "encoder") else model
        common.ensure_built(core)
        self._core = common.Ref(core)
        self._padding_values = common.Ref(rl.padding_values(core))  # next to its outputs
        self.model_variables = common.tf_variables(core)
        self._cfg = cfg
        self.task = task
        self._seq_length = int(seq_length)
        self._top_k = int(top_k)
        self._max_masks = int(max_masks)
        self._max_answer_length = int(max_answer_length)
        # Plain Python data goes in Refs: tf.Module would wrap lists into tracked ListWrappers.
        self._labels = common.Ref(labels_for(model, task, labels))
        # id -> token string for fill_mask/span/tagging outputs; ids of a padded embedding
        # table beyond the vocab file map to "".
        self._vocab_tokens = common.Ref(
            None if tokens is None else tokens + [""] * (cfg.vocab_size - len(tokens)))
        # Tokenizer and model are traced once each (the model once per save context) and
        # called from every signature (a trace of either costs ~0.5 s even for a tiny model).
        self._tokenize_fn = common.TraceOnce(self._tokenize, reads_variables=False)
        self._ids_fn = common.TraceOnce(self._text_to_ids, reads_variables=False)
        self._outputs_fn = common.TraceOnce(self._outputs)
        # keras.layers.TFSMLayer's default endpoint name.
        self.serve = self.__call__

    @property
    def seq_length(self):
        """The packed length of the text signatures."""
        return self._seq_length

    @property
    def tokenizer(self):
        """The in-graph BertTextTokenizer (special ids, vocab size); None without a vocab."""
        return None if self.preprocessing is None else self.preprocessing.tokenizer

    @property
    def labels(self):
        """Label strings of classification/tagging, else None."""
        return self._labels.obj

    # -- text -> ids -------------------------------------------------------------------------
    def _tokenize(self, text):
        """string [B] -> int32 ragged [B, tokens]."""
        pre = self.preprocessing
        if self.task != "fill_mask":
            return pre.tokenize_flat(text)
        # Split on the literal first, so "[MASK]" is not cleaned/lower-cased/split into pieces.
        parts = tf.strings.split(text, sep=MASK_LITERAL)            # [B, (masks + 1)]
        pieces = pre.tokenize_flat(parts.flat_values)               # [parts, (tokens)]
        lengths = parts.row_lengths()
        index_in_row = tf.ragged.range(lengths).flat_values
        not_last = index_in_row < tf.repeat(lengths, lengths) - 1
        masks = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(not_last, tf.int64))],
                    tf.constant(pre.mask_id, tf.int32)),
            tf.cast(not_last, tf.int64))
        joined = tf.concat([pieces, masks], axis=1)
        return tf.RaggedTensor.from_row_splits(joined, parts.row_splits).merge_dims(1, 2)

    def _text_to_ids(self, text, text_b=None):
        return self.preprocessing.text_to_ids(text, text_b, tokenize=self._tokenize_fn)

    # -- ids -> task outputs -----------------------------------------------------------------
    def _token_strings(self, ids, mask):
        vocab = tf.constant(self._vocab_tokens.obj)
        return tf.where(mask > 0, tf.gather(vocab, ids), "")

    def _outputs(self, inputs):
        cfg = self._cfg
        full = common.checked_ids(inputs["input_word_ids"], inputs["input_mask"],
                                  inputs["input_type_ids"], cfg.vocab_size,
                                  cfg.type_vocab_size, cfg.max_position_embeddings)
        # Only the real tokens are computed; [B, S] outputs are padded back (real_length).
        inputs, _ = common.cut_inputs(full)
        mask = full["input_mask"]
        model = self._core.obj
        task = self.task
        if task == "fill_mask":  # mask positions are real tokens, so inside the cut
            return self._fill_mask(model, inputs)
        out = model(inputs, training=False)
        if task == "embeddings":
            return {"embedding": models.pool(out, inputs["input_mask"], self._pooling,
                                             self._normalize),
                    **rl.restore_outputs({k: tf.cast(out[k], tf.float32) for k in (
                        "pooled_output", "sequence_output")}, mask)}
        if task == "regression":
            return {"score": tf.cast(out["logits"], tf.float32)[:, 0]}
        if task == "classification":
            logits = tf.cast(out["logits"], tf.float32)
            label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
            return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                    "label_id": label_id,
                    "label": tf.gather(tf.constant(self._labels.obj), label_id)}
        if task == "tagging":
            logits = tf.cast(out["logits"], tf.float32)
            out = rl.restore_outputs({"logits": logits, "tag_ids": tf.argmax(
                logits, axis=-1, output_type=tf.int32)}, mask, {"tag_ids": TAG_PAD})
            tags = tf.gather(tf.constant(self._labels.obj), tf.maximum(out["tag_ids"], 0))
            out["tags"] = tf.where(mask > 0, tags, "")
            if self.preprocessing is not None:
                out["tokens"] = self._token_strings(full["input_word_ids"], mask)
            return out
        return self._span(inputs, full, tf.cast(out["start_logits"], tf.float32),
                          tf.cast(out["end_logits"], tf.float32))

    def _span(self, inputs, full, start, end):
        """Span decoding on the cut batch (`inputs`, [B, L] logits); the [B, S] outputs are
        padded back to `full`'s length, padding logits at SPAN_PAD_LOGIT."""
        ids, mask, types = inputs["input_word_ids"], inputs["input_mask"], inputs["input_type_ids"]
        if self.preprocessing is not None:
            tok = self.tokenizer
            real = (mask > 0) & (ids != tok.cls_id) & (ids != tok.sep_id)
        else:  # no vocab: [CLS] is first, a [SEP] ends each segment (the packing's layout)
            next_mask = tf.pad(mask[:, 1:], [[0, 0], [0, 1]])
            next_type = tf.pad(types[:, 1:], [[0, 0], [0, 1]], constant_values=-1)
            ends = (next_mask == 0) | (next_type != types)
            real = (mask > 0) & ~ends & (tf.range(tf.shape(ids)[1]) > 0)[None, :]
        has_b = tf.reduce_any(real & (types == 1), axis=1, keepdims=True)
        cand = real & tf.where(has_b, types == 1, True)
        n = tf.shape(ids)[1]
        pos = tf.range(n)
        length = pos[None, :] - pos[:, None]          # [L(start), L(end)]: end - start
        ok_len = (length >= 0) & (length < self._max_answer_length)
        valid = ok_len[None] & cand[:, :, None] & cand[:, None, :]
        scores = tf.where(valid, start[:, :, None] + end[:, None, :], float("-inf"))
        flat = tf.reshape(scores, [tf.shape(ids)[0], -1])
        best = tf.argmax(flat, axis=1, output_type=tf.int32)
        found = tf.reduce_any(valid, axis=[1, 2])
        start_index = tf.where(found, best // n, -1)
        end_index = tf.where(found, best % n, -1)
        full_mask = full["input_mask"]
        out = rl.restore_outputs({"start_logits": start, "end_logits": end}, full_mask,
                                 self._padding_values.obj)
        out.update(start_index=start_index, end_index=end_index,
                   span_score=tf.where(found, tf.reduce_max(flat, axis=1), 0.0))
        if self.preprocessing is None:
            return out
        tokens = self._token_strings(full["input_word_ids"], full_mask)
        pos = tf.range(tf.shape(full_mask)[1])
        in_span = (pos[None, :] >= start_index[:, None]) & (pos[None, :] <= end_index[:, None])
        answer = tf.strings.reduce_join(tf.where(in_span, tokens, ""), axis=1, separator=" ")
        answer = tf.strings.strip(tf.strings.regex_replace(answer, " +", " "))
        answer = tf.strings.regex_replace(answer, " ##", "")
        return dict(out, answer=answer, tokens=tokens)

    def _fill_mask(self, model, inputs):
        ids, mask = inputs["input_word_ids"], inputs["input_mask"]
        is_mask = (ids == self.tokenizer.mask_id) & (mask > 0)
        where = tf.where(is_mask)                                   # [N, 2] (row, position)
        positions = tf.RaggedTensor.from_value_rowids(
            tf.cast(where[:, 1], tf.int32), where[:, 0], nrows=tf.shape(ids, out_type=tf.int64)[0])
        m = self._max_masks
        used = tf.minimum(tf.cast(positions.row_lengths(), tf.int32), m)
        slot_ok = tf.range(m)[None, :] < used[:, None]               # [B, M]
        gathered = positions.to_tensor(default_value=0, shape=[None, m])
        out = model(dict(inputs, masked_lm_positions=gathered), training=False)
        probs = tf.nn.softmax(tf.cast(out["mlm_logits"], tf.float32), axis=-1)
        top = tf.math.top_k(probs, k=self._top_k)
        ok = slot_ok[:, :, None]
        top_ids = tf.where(ok, top.indices, -1)
        vocab = tf.constant(self._vocab_tokens.obj)
        return {"mask_count": used,
                "mask_positions": tf.where(slot_ok, gathered, -1),
                "top_k_ids": top_ids,
                "top_k_tokens": tf.where(ok, tf.gather(vocab, top.indices), ""),
                "top_k_scores": tf.where(ok, top.values, 0.0)}

    # -- exported functions ------------------------------------------------------------------
    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def __call__(self, text):
        return self._outputs_fn(self._ids_fn(text))

    @tf.function(input_signature=[TEXT_SPEC, TEXT_B_SPEC], autograph=False)
    def serve_pairs(self, text, text_b):
        """The `serving_pairs` signature: task outputs for sentence pairs.

        Args:
            text: string [B], first segments (the question for `span`).
            text_b: string [B], second segments (the context for `span`).
        """
        return self._outputs_fn(self._ids_fn(text, text_b))

    @tf.function(input_signature=list(common.ids_spec().values()), autograph=False)
    def predict_ids(self, input_word_ids, input_mask, input_type_ids):
        """The `predict_ids` signature: task outputs for pre-tokenized input (ids checked).

        Args:
            input_word_ids: int32 [B, S].
            input_mask: int32 [B, S].
            input_type_ids: int32 [B, S].
        """
        return self._outputs_fn({"input_word_ids": input_word_ids, "input_mask": input_mask,
                                 "input_type_ids": input_type_ids})

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def preprocess(self, text):
        """The `preprocess` signature: the int32 encoder inputs serving_default feeds the model."""
        return self._ids_fn(text)

    def signatures(self):
        """Signature name -> tf.function, for `tf.saved_model.save`."""
        # tf.functions, not concrete functions: saving traces in its own context (the cache
        # key includes the save options), so tracing here first would trace everything twice.
        return {"serving_default": self.__call__, "serving_pairs": self.serve_pairs,
                "predict_ids": self.predict_ids, "preprocess": self.preprocess}

    def metadata(self):
        """bert_tf_export.json contents: task settings plus how to rebuild the model."""
        tok = self.tokenizer
        meta = {"format": common.FORMAT, "kind": "end_to_end", "task": self.task,
                "seq_length": self._seq_length,
                "do_lower_case": None if tok is None else tok.do_lower_case,
                "strip_accents": None if tok is None else tok.strip_accents,
                "labels": self._labels.obj, "signatures": sorted(self.signatures())}
        if self.task == "embeddings":
            meta.update(pooling=self._pooling, normalize=self._normalize)
        if self.task == "fill_mask":
            meta.update(top_k=self._top_k, max_masks=self._max_masks)
        if self.task == "span":
            meta.update(max_answer_length=self._max_answer_length)
        meta.update(common.model_metadata(self._core.obj))
        return meta


class IdsModule(EndToEndModule):
    """`EndToEndModule` without a vocab: ids in only, `serving_default` is `predict_ids`
    (no text signatures; span and tagging have no `tokens` / `answer` strings)."""

    serve_pairs = preprocess = None  # no text signatures

    def __init__(self, model, task="embeddings", seq_length=128, **kwargs):
        super().__init__(model, None, None, task, seq_length, **kwargs)

    @tf.function(input_signature=list(common.ids_spec().values()), autograph=False)
    def __call__(self, input_word_ids, input_mask, input_type_ids):
        return self._outputs_fn({"input_word_ids": input_word_ids, "input_mask": input_mask,
                                 "input_type_ids": input_type_ids})

    def signatures(self):
        """Signature name -> tf.function, for `tf.saved_model.save`."""
        return {"serving_default": self.__call__, "predict_ids": self.predict_ids}


def export_end_to_end(model, vocab_file, do_lower_case, export_dir, task="embeddings",
                      seq_length=128, labels=None, top_k=5, max_masks=8, max_answer_length=30,
                      strip_accents=None, pooling=None, normalize=None, preprocessing=None):
    """Writes the end-to-end SavedModel to export_dir (atomically); returns export_dir.

    Args:
        model: task "embeddings" takes any BertEncoder / encoder model /
            bert_tf.modeling.models model; "fill_mask" a BertPretrainer; "classification" a
            BertClassifier; "regression" a BertClassifier with num_classes=1; "span" a
            BertSpanLabeler; "tagging" a BertTokenClassifier.
        vocab_file: WordPiece vocab (copied into the export's assets).
        do_lower_case: as the original's --do_lower_case.
        export_dir: output directory (replaced atomically).
        task: one of `TASKS`.
        seq_length: packed length of the text signatures.
        labels: classification: one string per class; tagging: one per tag (default
            "0".."n-1").
        top_k: fill_mask: predictions per mask.
        max_masks: fill_mask: masks answered per text.
        max_answer_length: span: longest answer, in tokens.
        strip_accents: None (strip exactly when lower-casing, as the original) or a bool
            (False with do_lower_case: keras-hub's `BertTokenizer(lowercase=True)`).
        pooling: embeddings: how the `embedding` output pools, "cls" (the pooler, =
            pooled_output), "cls_token" ([CLS] of sequence_output) or "mean" (masked mean);
            default a BertEmbedder's own, else "cls".
        normalize: embeddings: L2-normalise `embedding` (default a BertEmbedder's own, else
            False).
        preprocessing: a `TextPreprocessor` of these settings shared with other exports (its
            tokenizer is traced once for all of them).
    """
    module = EndToEndModule(model, vocab_file, do_lower_case, task, seq_length, labels, top_k,
                            max_masks, max_answer_length, strip_accents=strip_accents,
                            pooling=pooling, normalize=normalize, preprocessing=preprocessing)
    return common.write_saved_model(module, export_dir, module.signatures(), module.metadata())
