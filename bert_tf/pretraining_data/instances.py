"""Per-document work shared by the streaming and Beam modes: pairs, masking, records.

  InstanceMaker   the original's chunking / next-sentence / truncation logic on token ids, one
                  document pass at a time, random-next segments drawn from given partner
                  documents (never the document itself when there is any other)
  RecordMaker     a batch of pairs -> masked (masking.BatchMasker) -> serialized records
                  (schema.BatchEncoder)
"""
import itertools
from bisect import bisect_left

from bert_tf import BertError
from bert_tf.pretraining_data.masking import BatchMasker
from bert_tf.pretraining_data.schema import MAX_BATCH_ID, BatchEncoder


class InstanceMaker:
    """The original's per-document algorithm on ids, with partner documents for random-next.

    Args:
        max_seq_length, short_seq_prob: the flags of that name.
        rng: a `random.Random` (the caller seeds it; it may be replaced between documents).
        stats: a `Stats`, counting forced random-next, same-document partners and truncation.
    """

    def __init__(self, max_seq_length, short_seq_prob, rng, stats):
        self.max_seq_length, self.short_seq_prob = max_seq_length, short_seq_prob
        self.rng, self.stats = rng, stats

    def pairs(self, doc, partners):
        """(tokens_a, tokens_b, is_random_next) of one pass over `doc`, truncated to fit.

        Args:
            doc: a `pack_document` pair (ids, sentence offsets), so a chunk's end and a random
                segment's end are found by bisection, not sentence by sentence.
            partners: a sequence of other documents (the same pairs) to draw random-next
                segments from; when it is empty (a single-document corpus) the document
                itself is used, and counted.
        """
        rand = self.rng.random
        max_num_tokens = self.max_seq_length - 3
        target = max_num_tokens
        if rand() < self.short_seq_prob:
            target = 2 + int(rand() * (max_num_tokens - 1))  # uniform in [2, max_num_tokens]
        flat, off = doc
        n_doc = len(off) - 1
        out = []
        i0 = 0
        while i0 < n_doc:
            # The chunk: sentences i0..i, until `target` tokens or the document's end.
            i = min(bisect_left(off, off[i0] + target, i0 + 1), n_doc) - 1
            n_chunk = i - i0 + 1
            a_end = i0 + (1 + int(rand() * (n_chunk - 1)) if n_chunk >= 2 else 1)
            a = flat[off[i0]:off[a_end]]
            if n_chunk == 1 or rand() < 0.5:
                is_random_next = True
                if n_chunk == 1:
                    self.stats.nsp_forced_random_next += 1
                if partners:
                    o_flat, o_off = partners[int(rand() * len(partners))]
                else:
                    o_flat, o_off = doc
                    self.stats.nsp_same_document += 1
                # Sentences from a random start until target - len(a) tokens (or the end).
                n_other = len(o_off) - 1
                j = int(rand() * n_other)
                end = min(bisect_left(o_off, o_off[j] + target - len(a), j + 1), n_other)
                b = o_flat[o_off[j]:o_off[end]]
                i0 = a_end  # the chunk's unused sentences go back to the document
            else:
                is_random_next = False
                b = flat[off[a_end]:off[i + 1]]
                i0 = i + 1
            if len(a) + len(b) > max_num_tokens:
                a, b = self._truncate(a, b, max_num_tokens)
            out.append((a, b, is_random_next))
        return out

    def _truncate(self, a, b, max_num_tokens):
        """The original's truncation in distribution, with two draws instead of one per token.

        Which side loses each token depends only on the lengths (the longer one; b on ties),
        so the counts per side are arithmetic; front-vs-back is a fair coin per token, so the
        number cut from the front is Binomial(count, 1/2) = popcount of `count` random bits.
        """
        la, lb = len(a), len(b)
        excess = la + lb - max_num_tokens
        if la > lb:
            first_a, first_b = min(excess, la - lb), 0
        else:
            first_a, first_b = 0, min(excess, lb - la)
        rest = excess - first_a - first_b  # then alternating, starting with b (tie -> b)
        cut_a = first_a + rest // 2
        cut_b = first_b + rest - rest // 2
        getrandbits = self.rng.getrandbits
        front_a = getrandbits(cut_a).bit_count() if cut_a else 0
        front_b = getrandbits(cut_b).bit_count() if cut_b else 0
        stats = self.stats
        stats.truncated_instances += 1
        stats.truncated_tokens += excess
        return a[front_a:la - (cut_a - front_a)], b[front_b:lb - (cut_b - front_b)]


def pack_document(sentences):
    """Token-id sentences (non-empty lists) -> (all ids, sentence start offsets + [total])."""
    flat = list(itertools.chain.from_iterable(sentences))
    off = [0]
    total = 0
    for s in sentences:
        total += len(s)
        off.append(total)
    return flat, off


def num_sentences(doc):
    """Sentences of a `pack_document` pair."""
    return len(doc[1]) - 1


class RecordMaker:
    """Pairs -> serialized records: one vectorised masking and encoding per batch.

    Args:
        cfg: a `streaming.StreamConfig` (vocab and masking flags).
    """

    def __init__(self, cfg):
        if max(cfg.vocab.values()) >= MAX_BATCH_ID:
            raise BertError(f"--vocab_file: {max(cfg.vocab.values()) + 1} tokens; the streaming "
                            f"and Beam modes handle at most {MAX_BATCH_ID} (use --mode=original)")
        self.masker = BatchMasker(cfg.vocab, cfg.max_seq_length, cfg.max_predictions_per_seq,
                                  cfg.masked_lm_prob, whole_word=cfg.do_whole_word_mask,
                                  per_word=cfg.whole_word_mask_per_word)
        self.encoder = BatchEncoder(cfg.max_seq_length, cfg.max_predictions_per_seq)

    def records(self, pairs, gen, stats):
        """Serialized tf.train.Example records of `pairs`, masked with numpy Generator `gen`.

        Args:
            pairs: [(tokens_a ids, tokens_b ids, is_random_next)] (`InstanceMaker.pairs`).
            gen: the numpy Generator the masking draws from.
            stats: a `Stats`, counted into.
        """
        if not pairs:
            return []
        return self.encoder.encode(*self.masker.mask(pairs, gen, stats))


def numpy_generator(seed):
    """The numpy Generator the masking of a shard (or Beam group) draws from."""
    import numpy as np
    return np.random.Generator(np.random.PCG64(seed))

