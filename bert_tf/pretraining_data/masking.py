"""Masked-LM selection: the original mode's algorithm on token strings, and `BatchMasker`.

`create_masked_lm_predictions` is the original's algorithm exactly (its random stream too).
`BatchMasker` is the vectorised one (numpy, many packed rows at once): the streaming and Beam
modes of create_pretraining_data.py mask with it, and so does run_pretraining.py's
`--dynamic_masking` (input_pipeline), every time it reads a batch.

`whole_word_mask_per_word` is this project's fix for google-research/bert#910: with the
original `do_whole_word_mask`, the pieces of a chosen word are all masked, but the 80/10/10
([MASK] / keep / random) choice is drawn per *piece*; with `per_word` it is drawn once per word.
"""
import collections

from bert_tf import BertError
from bert_tf.tokenization import CLS, MASK, SEP

MaskedLm = collections.namedtuple("MaskedLm", ["index", "label"])


def num_to_predict(num_tokens, masked_lm_prob, max_predictions_per_seq):
    """min(max_predictions, max(1, round(n * prob))), n counting [CLS]/[SEP] (Python 3 round).

    Args:
        num_tokens: tokens of the instance, [CLS]/[SEP] included.
        masked_lm_prob, max_predictions_per_seq: the flags of that name.
    """
    return min(max_predictions_per_seq, max(1, int(round(num_tokens * masked_lm_prob))))


def candidate_indexes(tokens, do_whole_word_mask=False):
    """Lists of indexes that are masked together; [CLS]/[SEP] never appear.

    With whole-word masking a `##` piece joins the previous list (even across [SEP], as in the
    original, though a `##` piece never follows [SEP] in practice).

    Args:
        tokens: the instance's token strings, [CLS] a [SEP] b [SEP].
        do_whole_word_mask: group `##` pieces with their word.
    """
    cand = []
    for i, token in enumerate(tokens):
        if token == CLS or token == SEP:
            continue
        if do_whole_word_mask and cand and token.startswith("##"):
            cand[-1].append(i)
        else:
            cand.append([i])
    return cand


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_words,
                                 rng, do_whole_word_mask=False, whole_word_mask_per_word=False):
    """Returns (output_tokens, masked_lm_positions, masked_lm_labels), positions sorted.

    Draw order (original): shuffle the candidate lists; for each chosen index one `random()`
    (< 0.8 -> [MASK]), else one more `random()` (< 0.5 -> keep, else a random vocab word drawn
    with `randint(0, len(vocab_words) - 1)`). With `whole_word_mask_per_word` those draws happen
    once per word and a random replacement draws one word per piece.

    Args:
        tokens: the instance's token strings, [CLS] a [SEP] b [SEP].
        masked_lm_prob, max_predictions_per_seq: the flags of that name.
        vocab_words: the vocab's tokens in file order (random replacements).
        rng: the `random.Random` everything in mode `original` draws from.
        do_whole_word_mask, whole_word_mask_per_word: the flags of that name.
    """
    per_word = whole_word_mask_per_word
    cand = candidate_indexes(tokens, do_whole_word_mask or per_word)
    rng.shuffle(cand)
    output_tokens = list(tokens)
    n_predict = num_to_predict(len(tokens), masked_lm_prob, max_predictions_per_seq)
    masked, covered = [], set()
    for index_set in cand:
        if len(masked) >= n_predict:
            break
        if len(masked) + len(index_set) > n_predict:
            continue
        if any(index in covered for index in index_set):
            continue
        if per_word:
            if rng.random() < 0.8:
                choice = "mask"
            else:
                choice = "keep" if rng.random() < 0.5 else "random"
        for index in index_set:
            covered.add(index)
            if not per_word:
                if rng.random() < 0.8:
                    choice = "mask"
                else:
                    choice = "keep" if rng.random() < 0.5 else "random"
            if choice == "mask":
                new = MASK
            elif choice == "keep":
                new = tokens[index]
            else:
                new = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = new
            masked.append(MaskedLm(index, tokens[index]))
    masked.sort(key=lambda m: m.index)
    return output_tokens, [m.index for m in masked], [m.label for m in masked]


Masked = collections.namedtuple("Masked", ["ids", "positions", "labels", "weights", "kinds"])
KEPT, AS_MASK, AS_RANDOM = 1, 2, 3  # `kinds`; 0 = padding (a random draw of the label is KEPT)


class BatchMasker:
    """Masked-LM selection for many packed rows at once (numpy): the streaming and Beam modes
    of create_pretraining_data.py and run_pretraining.py's `--dynamic_masking`.

    The original's algorithm in distribution, for all three variants: candidates (real tokens,
    grouped into words with `##` pieces when `whole_word`) are visited in a uniformly random
    order; a group is taken if it still fits into k = num_to_predict(n) (else skipped) until
    k are taken. Each taken token becomes [MASK] (80 %), stays (10 %) or becomes a uniformly
    drawn vocab entry (10 %), decided per token or, with `per_word`, once per word. Draws come
    from a numpy Generator seeded by the caller, so the output is deterministic.

    Without `vocab` (dynamic masking) the ids come from the keyword arguments, a random
    replacement is uniform over [0, vocab_size) and whole-word masking is unavailable (it needs
    the vocab to find `##` pieces).

    Args:
        vocab: token -> id, or None (then `vocab_size` and `mask_id` are required).
        max_seq_length: row length of the packed ids.
        max_predictions_per_seq: width of the positions / labels / weights.
        masked_lm_prob: fraction of the tokens to predict (before the caps).
        whole_word: group `##` pieces with their word (`--do_whole_word_mask`).
        per_word: one 80/10/10 decision per word (`--whole_word_mask_per_word`, implies
            whole_word).
        vocab_size: random replacements are drawn from [0, vocab_size) (without `vocab`).
        mask_id: id of [MASK] (without `vocab`; `mask_packed` finds [CLS] and [SEP] from the
            packing).
    """

    def __init__(self, vocab, max_seq_length, max_predictions_per_seq, masked_lm_prob,
                 whole_word=False, per_word=False, *, vocab_size=None, mask_id=None):
        import numpy as np
        self.np = np
        self.seq, self.preds, self.prob = max_seq_length, max_predictions_per_seq, masked_lm_prob
        self.whole_word, self.per_word = whole_word or per_word, per_word
        self.is_continuation = None
        if vocab is not None:
            self.cls, self.sep, self.mask_id = vocab[CLS], vocab[SEP], vocab[MASK]
            self.random_ids = np.array(list(vocab.values()), dtype=np.int64)  # uniform over lines
            self.is_continuation = np.zeros(max(vocab.values()) + 1, bool)
            for token, i in vocab.items():
                if token.startswith("##"):
                    self.is_continuation[i] = True
            return
        if vocab_size is None or mask_id is None:
            raise BertError("BatchMasker: needs a vocab, or vocab_size and mask_id")
        if self.whole_word:
            raise BertError("BatchMasker: whole-word masking needs the vocab (to find ## pieces)")
        self.cls = self.sep = None  # (RecordMaker packs rows with them: it has a vocab)
        self.mask_id = mask_id
        self.random_ids = np.arange(vocab_size, dtype=np.int64)

    def num_to_predict(self, n):
        """Predictions per row, k (before the whole-word greedy fit): the original's
        min(max_predictions, max(1, round(n * masked_lm_prob))), n counting [CLS]/[SEP].
        Dynamic masking uses the same rule: re-masked records keep their written statistics.

        Args:
            n: int [rows], tokens per row ([CLS]/[SEP] included).
        """
        np = self.np
        return np.minimum(self.preds, np.maximum(1, np.round(n * self.prob).astype(np.int64)))

    def _num_candidates(self, n, len_a):
        """n - 3 ([CLS] a [SEP] b [SEP]), or n - 2 for one segment ([CLS] a [SEP])."""
        np = self.np
        return np.maximum(0, np.where(len_a >= n - 2, n - 2, n - 3))

    def mask_packed(self, ids, n, len_a, gen):
        """Masks packed rows in place; returns `Masked(ids, positions, labels, weights, kinds)`.

        Positions are sorted, 0-padded like the labels; weights are 1.0 per prediction;
        kinds say what became of each (`AS_MASK`, `KEPT`, `AS_RANDOM`; 0 = padding).

        Args:
            ids: int [rows, max_seq_length], each row [CLS] a [SEP] b [SEP] (or [CLS] a [SEP])
                then padding; masked in place.
            n: int [rows], tokens per row.
            len_a: int [rows], len(a) (n - 2 for rows without b).
            gen: the numpy Generator to draw from.
        """
        np, seq, preds = self.np, self.seq, self.preds
        rows = len(ids)
        n, la = np.asarray(n, np.int64), np.asarray(len_a, np.int64)
        k = self.num_to_predict(n)
        rows_c = np.arange(rows)[:, None]
        if self.whole_word:
            pos, word = self._whole_words(ids, la[:, None], n[:, None], k, gen)
        else:
            pos, word = self._tokens(la, n, k, gen), None
        valid = pos < seq
        pos = np.where(valid, pos, 0)
        labels = np.where(valid, ids[rows_c, pos], 0)
        if self.per_word:  # one draw per word slot
            u = gen.random((rows, seq))[rows_c, np.minimum(word, seq - 1)]
            u = np.take_along_axis(u, pos, axis=1)
        else:
            u = gen.random((rows, preds))
        replacement = self.random_ids[gen.integers(0, len(self.random_ids), (rows, preds))]
        as_mask = valid & (u < 0.8)
        as_random = valid & (u >= 0.9)
        new = np.where(as_mask, self.mask_id, np.where(as_random, replacement, labels))
        ids[rows_c, pos] = np.where(valid, new, ids[:, :1])  # padding slots rewrite [CLS]
        kinds = np.where(as_mask, AS_MASK, np.where(
            as_random & (replacement != labels), AS_RANDOM, np.where(valid, KEPT, 0)))
        return Masked(ids, pos, labels, valid.astype(np.float32), kinds.astype(np.int8))

    def mask_rows(self, ids, n, len_a, is_random_next, gen, stats):
        """`mask_packed` plus the stats: the padded arrays `batch_encoder.BatchEncoder.encode` takes.

        Args:
            ids: int [rows, max_seq_length] packed rows (masked in place).
            n, len_a: int [rows], tokens per row and len(a).
            is_random_next: bool [rows].
            gen: the numpy Generator to draw from.
            stats: a `stats.Stats`, counted into.

        Returns:
            (ids, n, num_segment_a, positions, labels, m, is_random_next): [rows, seq] ids,
            [rows, preds] positions and labels, the rest [rows].
        """
        np = self.np
        rows, nsp = len(ids), np.asarray(is_random_next, bool)
        out = self.mask_packed(ids, n, len_a, gen)
        m = (out.kinds > 0).sum(axis=1)
        total_m, total_n = int(m.sum()), int(n.sum())
        n_mask = int((out.kinds == AS_MASK).sum())
        n_random = int((out.kinds == AS_RANDOM).sum())
        n_next = int(nsp.sum())
        stats.instances += rows
        stats.tokens += total_n
        stats.candidates += total_n - 3 * rows
        stats.masked += total_m
        stats.masked_as_mask += n_mask
        stats.masked_random += n_random
        stats.masked_kept += total_m - n_mask - n_random
        stats.nsp_random_next += n_next
        stats.nsp_actual_next += rows - n_next
        return out.ids, n, len_a + 2, out.positions, out.labels, m, nsp

    def _tokens(self, la, n, k, gen):
        """Sorted positions (padded with seq) of k tokens drawn uniformly without replacement
        from the candidates: Floyd's algorithm, one step for all rows at a time (k <= preds
        steps of [rows] vectors, instead of sorting [rows, seq] random keys)."""
        np, seq = self.np, self.seq
        rows = len(n)
        cand = self._num_candidates(n, la)  # slots: a, then b
        k = np.minimum(k, cand)
        steps = int(k.max()) if rows else 0
        # All steps' draws at once, as flat indexes into chosen [rows, seq + 1]. Rows past
        # their k keep stepping (their picks are dropped below) inside their own row: column
        # seq is a scratch slot.
        base = np.arange(rows) * (seq + 1)
        j = (cand - k)[None, :] + np.arange(steps)[:, None]  # [steps, rows]
        t = (gen.random((steps, rows)) * (j + 1)).astype(np.int64)
        np.minimum(t, seq, out=t)
        t += base
        np.minimum(j, seq, out=j)
        j += base
        chosen = np.zeros(rows * (seq + 1), bool)
        for s in range(steps):  # for j in cand-k .. cand-1: t ~ U[0, j]; take t, or j if taken
            ts = np.where(chosen[t[s]], j[s], t[s])
            chosen[ts] = True
            t[s] = ts
        t -= base
        picks = np.where(np.arange(steps)[:, None] < k[None, :], t, seq).T  # [rows, steps]
        picks.sort(axis=1)
        pos = np.where(picks < seq, picks + 1 + (picks >= la[:, None]), seq)  # skip [CLS], mid [SEP]
        out = np.full((rows, self.preds), seq, np.int64)
        take = min(self.preds, pos.shape[1])
        out[:, :take] = pos[:, :take]
        return out

    def _whole_words(self, ids, la_c, n_c, k, gen):
        """Sorted positions (padded with seq) of whole words, taken greedily in random order
        while they fit into k; and each token's word slot."""
        np, seq = self.np, self.seq
        rows = len(ids)
        col = np.arange(seq)[None, :]
        rows_c = np.arange(rows)[:, None]
        candidate = ((col >= 1) & (col <= la_c)) | ((col >= la_c + 2) & (col <= n_c - 2))
        # A ## piece joins the previous candidate's word (across [SEP] too, as the original).
        start = candidate & ((col == 1) | ~self.is_continuation[ids])
        word = np.where(candidate, np.cumsum(start, axis=1) - 1, seq)
        length = np.bincount((word + rows_c * (seq + 1)).ravel(), minlength=rows * (seq + 1))
        length = length.reshape(rows, seq + 1)[:, :seq]
        keys = np.where(length > 0, gen.random((rows, seq)), 2.0)
        order = np.argsort(keys, axis=1)
        visit_len = np.take_along_axis(length, order, axis=1)
        taken_sorted = np.zeros((rows, seq), bool)
        count = np.zeros(rows, np.int64)
        for j in range(seq):  # greedy in random order: take a word if it still fits
            if (count >= k).all():
                break
            lj = visit_len[:, j]
            take = (lj > 0) & (count + lj <= k)
            taken_sorted[:, j] = take
            count += np.where(take, lj, 0)
        taken = np.zeros((rows, seq + 1), bool)
        np.put_along_axis(taken, order, taken_sorted, axis=1)
        chosen = taken[rows_c, word] & candidate
        pos = np.sort(np.where(chosen, col, seq), axis=1)[:, :self.preds]
        if pos.shape[1] < self.preds:
            pos = np.concatenate([pos, np.full((rows, self.preds - seq), seq)], axis=1)
        return pos, word
