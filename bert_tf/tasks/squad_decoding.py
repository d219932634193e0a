"""SQuAD answer decoding: n-best spans per question, mapped back to the context's exact text.

Decoding takes the n best starts x ends per feature, keeps valid spans (inside the context,
start <= end, at most `max_answer_length` pieces), and maps the best span back to the original
text the way the original's get_final_text does (undoing lower-casing/accent stripping through
the BasicTokenizer's character alignment). v2.0: the null answer scores `start_logit[CLS] +
end_logit[CLS]` (minimum over windows); predict "" when `null - best_span >
null_score_diff_threshold`.
"""
import collections
import logging

import numpy as np

log = logging.getLogger("bert_tf.tasks")

def _strip_spaces(text):
    """(text without " ", map non-space index -> original index)."""
    chars, index = [], {}
    for i, c in enumerate(text):
        if c == " ":
            continue
        index[len(chars)] = i
        chars.append(c)
    return "".join(chars), index


def final_text_span(pred_text, orig_text, do_lower_case, verbose=False):
    """(start, end) in `orig_text` of the detokenized prediction `pred_text`.

    `orig_text` is the original words (the whole words the span touches) and `pred_text` the
    prediction rebuilt from WordPieces (lower-cased, accents stripped, punctuation split).
    Both are BasicTokenizer-aligned character by character ignoring spaces; when that fails
    (a character changed length under lower-casing, say) the whole words are returned, as in
    the original's get_final_text.

    Args:
        pred_text: the prediction's pieces joined with spaces, `##` merged.
        orig_text: the context words the span touches, joined with single spaces.
        do_lower_case: as the tokenizer's (how pred_text was normalised).
        verbose: log why a prediction fell back to the whole words.
    """
    from bert_tf.tokenization import BasicTokenizer
    def whole(why):
        if verbose:
            log.info("answer %r: %s in %r; using the whole words", pred_text, why, orig_text)
        return 0, len(orig_text)

    tok_text = " ".join(BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        return whole("not found")
    end = start + len(pred_text) - 1
    orig_ns, orig_map = _strip_spaces(orig_text)
    tok_ns, tok_map = _strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return whole("length changed by tokenization")
    tok_to_ns = {s: ns for ns, s in tok_map.items()}
    if start not in tok_to_ns or end not in tok_to_ns:
        return whole("no character alignment")
    return orig_map[tok_to_ns[start]], orig_map[tok_to_ns[end]] + 1


def get_final_text(pred_text, orig_text, do_lower_case):
    """The original's get_final_text: `orig_text[final_text_span(...)]`.

    Args:
        pred_text: the detokenized prediction.
        orig_text: the whole words the span touches.
        do_lower_case: as the tokenizer's.
    """
    s, e = final_text_span(pred_text, orig_text, do_lower_case)
    return orig_text[s:e]


def _context_text(example, first_word, last_word, pred_text, do_lower_case, verbose=False):
    """The exact context characters of the prediction (spacing inside kept as written)."""
    words = example.doc_tokens[first_word:last_word + 1]
    orig_text = " ".join(words)
    s, e = final_text_span(pred_text, orig_text, do_lower_case, verbose)
    # Map positions in the single-space-joined words back to context offsets.
    starts, pos = [], 0
    for w in words:
        starts.append(pos)
        pos += len(w) + 1

    def to_context(p):
        i = max(j for j, st in enumerate(starts) if st <= p)
        return example.word_offsets[first_word + i] + (p - starts[i])

    return example.context[to_context(s):to_context(e - 1) + 1]


def _top_indexes(logits, n):
    return np.argsort(-np.asarray(logits), kind="stable")[:n].tolist()


Prelim = collections.namedtuple("Prelim", "feature_index start end start_logit end_logit")


def postprocess(examples, features, start_logits, end_logits, n_best_size=20,
                max_answer_length=30, do_lower_case=True, version_2_with_negative=False,
                null_score_diff_threshold=0.0, verbose=False):
    """(predictions, nbest, null_odds): qid -> text, qid -> [entries], qid -> score diff.

    Args:
        examples: SquadExamples, in the order features' example_index refers to.
        features: SquadFeatures from `squad.convert_examples_to_features`.
        start_logits: [num_features, max_seq_length], aligned with `features`.
        end_logits: the same for the span ends.
        n_best_size: candidates kept per question (and starts/ends tried per feature).
        max_answer_length: longest span, in pieces.
        do_lower_case: as the tokenizer's (to map spans back to the context's text).
        version_2_with_negative: score the null answer; null_odds is empty otherwise.
        null_score_diff_threshold: predict "" when null - best span exceeds this.
        verbose: log answers that fell back to whole words.
    """
    by_example = collections.defaultdict(list)
    for i, f in enumerate(features):
        by_example[f.example_index].append(i)
    predictions, all_nbest, null_odds = collections.OrderedDict(), collections.OrderedDict(), \
        collections.OrderedDict()
    for example_index, ex in enumerate(examples):
        prelim = []
        score_null, null_entry = None, None
        for fi in by_example.get(example_index, []):
            f = features[fi]
            # Rank only the feature's tokens: padding positions (whatever they hold, padded
            # or cut run) never take an n-best slot.
            n = len(f.tokens)
            s_logits, e_logits = start_logits[fi][:n], end_logits[fi][:n]
            if version_2_with_negative:
                null = float(s_logits[0] + e_logits[0])
                if score_null is None or null < score_null:
                    score_null = null
                    null_entry = Prelim(fi, 0, 0, float(s_logits[0]), float(e_logits[0]))
            for s in _top_indexes(s_logits, n_best_size):
                for e in _top_indexes(e_logits, n_best_size):
                    if s >= len(f.tokens) or e >= len(f.tokens):
                        continue
                    if s not in f.token_to_orig_map or e not in f.token_to_orig_map:
                        continue
                    if not f.token_is_max_context.get(s, False):
                        continue
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    prelim.append(Prelim(fi, s, e, float(s_logits[s]), float(e_logits[e])))
        if null_entry is not None:
            prelim.append(null_entry)
        prelim.sort(key=lambda p: p.start_logit + p.end_logit, reverse=True)

        nbest, seen = [], set()
        for p in prelim:
            if len(nbest) >= n_best_size:
                break
            if p.start > 0:
                f = features[p.feature_index]
                pieces = " ".join(f.tokens[p.start:p.end + 1])
                pred = " ".join(pieces.replace(" ##", "").replace("##", "").strip().split())
                text = _context_text(ex, f.token_to_orig_map[p.start],
                                     f.token_to_orig_map[p.end], pred, do_lower_case,
                                     verbose)
                if text in seen:
                    continue
            else:
                text = ""
            seen.add(text)
            nbest.append((text, p.start_logit, p.end_logit))
        if null_entry is not None and "" not in seen:
            nbest.append(("", null_entry.start_logit, null_entry.end_logit))
        if not any(t for t, _, _ in nbest):  # no valid span at all (rare): a placeholder
            nbest.append(("empty", 0.0, 0.0))
        probs = _softmax_list([s + e for _, s, e in nbest])
        all_nbest[ex.qas_id] = [
            collections.OrderedDict(text=t, probability=float(pr), start_logit=s, end_logit=e)
            for (t, s, e), pr in zip(nbest, probs)]
        best_non_null = next((t, s, e) for t, s, e in nbest if t)
        if not version_2_with_negative:
            predictions[ex.qas_id] = nbest[0][0]
        else:
            diff = score_null - best_non_null[1] - best_non_null[2]
            null_odds[ex.qas_id] = diff
            predictions[ex.qas_id] = "" if diff > null_score_diff_threshold else best_non_null[0]
    return predictions, all_nbest, null_odds


def _softmax_list(scores):
    if not scores:
        return []
    m = max(scores)
    exps = [np.exp(s - m) for s in scores]
    total = sum(exps)
    return [x / total for x in exps]
