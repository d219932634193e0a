"""Masked-LM position selection on token strings (the original mode's algorithm, exactly).

`whole_word_mask_per_word` is this project's fix for google-research/bert#910: with the
original `do_whole_word_mask`, the pieces of a chosen word are all masked, but the 80/10/10
([MASK] / keep / random) choice is drawn per *piece*; with `per_word` it is drawn once per word.
"""
import collections

from bert_tf.tokenization import CLS, MASK, SEP

MaskedLm = collections.namedtuple("MaskedLm", ["index", "label"])


def num_to_predict(num_tokens, masked_lm_prob, max_predictions_per_seq):
    """min(max_predictions, max(1, round(n * prob))), n counting [CLS]/[SEP] (Python 3 round)."""
    return min(max_predictions_per_seq, max(1, int(round(num_tokens * masked_lm_prob))))


def candidate_indexes(tokens, do_whole_word_mask=False):
    """Lists of indexes that are masked together; [CLS]/[SEP] never appear.

    With whole-word masking a `##` piece joins the previous list (even across [SEP], as in the
    original, though a `##` piece never follows [SEP] in practice).
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
