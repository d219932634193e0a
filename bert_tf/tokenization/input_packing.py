"""`pack_inputs`: the original's [CLS] a [SEP] (b [SEP]) packing of in-graph token ids.

Built from dense gathers/selects on core TF ops (serving-safe); `text_graph` re-exports it.
"""
import bert_tf  # noqa: F401  (sets KERAS_BACKEND before keras is imported)
import tensorflow as tf

from bert_tf import BertError

# Python control flow here is static (config, not tensors): skip autograph's slow conversion.
_no_autograph = tf.autograph.experimental.do_not_convert


def _truncated_lengths(len_a, len_b, budget):
    """Final lengths of the original's _truncate_seq_pair (pop from the longer, ties pop b)."""
    half_up = (budget + 1) // 2
    half_down = budget // 2
    new_a = tf.minimum(len_a, tf.maximum(budget - len_b, half_up))
    new_b = tf.minimum(len_b, tf.maximum(budget - len_a, half_down))
    return new_a, new_b


def _flatten_segment(seg):
    if not isinstance(seg, tf.RaggedTensor):
        seg = tf.RaggedTensor.from_tensor(seg)
    while seg.ragged_rank > 1:
        seg = seg.merge_dims(1, 2)
    return tf.cast(seg.with_row_splits_dtype(tf.int64), tf.int32)


def _gather_cols(dense, cols):
    """dense[b, cols[b, j]], with cols clipped (out-of-range columns are masked later)."""
    cols = tf.clip_by_value(cols, 0, tf.shape(dense)[1] - 1)
    return tf.gather(dense, cols, batch_dims=1)


@_no_autograph
def pack_inputs(segments, seq_length, cls_id, sep_id, pad_id=0):
    """[CLS] a [SEP] (b [SEP]) packed to int32 [batch, seq_length] exactly like the original.

    Single segment: cut to seq_length - 2. Pair: cut to seq_length - 3 in total with the
    original's _truncate_seq_pair (pop from the end of the longer, ties pop from b).
    Empty b: the original's convert_single_example tests `if tokens_b:` (a list), so a b that
    tokenizes to nothing ("", " ", "\x00") gives [CLS] a [SEP] with the single-segment budget
    seq_length - 2 and no second [SEP]; so does this, per row. (TF Hub's bert_pack_inputs would
    add an empty b's [SEP] instead.)

    Built from dense gathers/selects (no ragged masking): cheap to trace and serving-safe.

    Args:
        segments: list of 1 or 2 RaggedTensors [batch, (words), (pieces)] or [batch, (pieces)].
        seq_length: a Python int (static output shape) or a scalar int32 tensor.
        cls_id: int, id of [CLS].
        sep_id: int, id of [SEP].
        pad_id: int, id written after the packed tokens.

    Returns:
        Dict of input_word_ids, input_mask, input_type_ids.
    """
    if not 1 <= len(segments) <= 2:
        raise BertError(f"pack_inputs: expected 1 or 2 segments, got {len(segments)}")
    static = isinstance(seq_length, int)
    checks = []
    if static and seq_length < len(segments) + 1:
        raise BertError(f"pack_inputs: seq_length {seq_length} leaves no room for [CLS]/[SEP]")
    if not static:  # a scalar int32 tensor (TF Hub's bert_pack_inputs(..., seq_length=N))
        seq_length = tf.cast(seq_length, tf.int32)
        checks.append(tf.debugging.assert_greater_equal(
            seq_length, len(segments) + 1, message="seq_length leaves no room for [CLS]/[SEP]"))
    with tf.control_dependencies(checks):
        segs = [_flatten_segment(s) for s in segments]
    lens = [tf.cast(s.row_lengths(), tf.int32) for s in segs]
    batch = segs[0].nrows(out_type=tf.int32)
    single_len = tf.minimum(lens[0], seq_length - 2)
    if len(segs) == 1:
        len_a, len_b, has_b = single_len, tf.zeros_like(single_len), tf.zeros_like(single_len)
    else:
        has_b_row = lens[1] > 0
        pair_a, len_b = _truncated_lengths(lens[0], lens[1], seq_length - 3)
        len_a = tf.where(has_b_row, pair_a, single_len)
        has_b = tf.cast(has_b_row, tf.int32)
    # Segments as dense [batch, seq_length + 1]: never longer than what can be packed, plus
    # one column so that gathers from empty rows/batches stay in range.
    width = [None, seq_length] if static else tf.stack([tf.constant(-1), seq_length])
    dense = [tf.pad(s.to_tensor(default_value=0, shape=width), [[0, 0], [0, 1]]) for s in segs]
    pos = tf.broadcast_to(tf.range(seq_length, dtype=tf.int32)[tf.newaxis], [batch, seq_length])
    la, lb, hb = (tf.expand_dims(t, 1) for t in (len_a, len_b, has_b))
    b_start = la + 2  # position of b's first piece
    total = b_start + hb * (lb + 1)  # [CLS] a [SEP] (b [SEP])
    ids = tf.fill([batch, seq_length], tf.constant(pad_id, tf.int32))
    if len(segs) == 2:
        ids = tf.where(pos < total, sep_id, ids)  # b's [SEP] (b itself overwritten next)
        ids = tf.where((pos >= b_start) & (pos < b_start + lb),
                       _gather_cols(dense[1], pos - b_start), ids)
    ids = tf.where(pos == la + 1, sep_id, ids)
    ids = tf.where((pos >= 1) & (pos <= la), _gather_cols(dense[0], pos - 1), ids)
    ids = tf.where(pos == 0, cls_id, ids)
    mask = tf.cast(pos < total, tf.int32)
    type_ids = tf.cast((pos >= b_start) & (pos < total), tf.int32)
    out = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": type_ids}
    if static:
        for t in out.values():
            t.set_shape([None, seq_length])
    return out
