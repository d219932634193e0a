"""Mode `original`: the original release's algorithm and random stream, draw for draw.

One `random.Random(random_seed)` drives everything, in this order: shuffle of the documents;
then per pass and document the short-target draw, split points, random-next choices, truncation
sides and masking; finally one shuffle of all instances. Same input, vocab, flags and seed ->
the same records in the same order as the original `create_pretraining_data.py`.
Records are serialised deterministically (sorted proto map keys, `schema.encode_example`: the
bytes of `SerializeToString(deterministic=True)` without TensorFlow), so files are byte-stable.
"""
import dataclasses
import sys
import time

from bert_tf.pretraining_data import documents as docs_lib
from bert_tf.pretraining_data import masking
from bert_tf.pretraining_data.schema import encode_example, pad_features
from bert_tf.tokenization import CLS, MASK, SEP


@dataclasses.dataclass
class TrainingInstance:
    """One instance as the original keeps it: masked token strings, before ids and padding."""
    tokens: list
    segment_ids: list
    masked_lm_positions: list
    masked_lm_labels: list
    is_random_next: bool


def read_documents(input_files, tokenizer, stats=None, extra_documents=()):
    """The original's reading: list of documents, each a list of token lists.

    As in the original, only a blank line ends a document: a file that does not end with a
    blank line continues into the next file. Empty documents are dropped (before the shuffle).

    Args:
        input_files: text files, one sentence per line, blank lines between documents.
        tokenizer: a `FullTokenizer`.
        stats: a `Stats` to count documents and sentences into, or None.
        extra_documents: lists of sentence strings (e.g. from tfds), appended as documents.
    """
    all_documents = [[]]
    for path in input_files:
        for line in docs_lib.read_lines(path):
            if not line:
                all_documents.append([])
            tokens = tokenizer.tokenize(line)
            if tokens:
                all_documents[-1].append(tokens)
    for sentences in extra_documents:
        all_documents.append([t for t in map(tokenizer.tokenize, sentences) if t])
    all_documents = [d for d in all_documents if d]
    if stats is not None:
        stats.documents += len(all_documents)
        stats.sentences += sum(len(d) for d in all_documents)
    return all_documents


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Trim the longer side (b on ties), front or back at random, until the pair fits.

    Args:
        tokens_a, tokens_b: the segments, trimmed in place.
        max_num_tokens: max_seq_length - 3.
        rng: the `random.Random` to draw the sides from.

    Returns:
        The number of tokens removed.
    """
    removed = 0
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()
        removed += 1
    return removed


def create_instances_from_document(all_documents, document_index, max_seq_length, short_seq_prob,
                                   masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
                                   do_whole_word_mask=False, whole_word_mask_per_word=False,
                                   stats=None):
    """All instances of one document for one pass (the original's draw order).

    Args:
        all_documents: every document (lists of token lists); random-next segments come from
            them.
        document_index: the document to cut.
        max_seq_length, short_seq_prob, masked_lm_prob, max_predictions_per_seq: the flags.
        vocab_words: the vocab's tokens in file order (random replacements).
        rng: the `random.Random` everything draws from.
        do_whole_word_mask, whole_word_mask_per_word: the flags of that name.
        stats: a `Stats` to count into, or None.

    Returns:
        A list of `TrainingInstance`.
    """
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    instances = []
    chunk, chunk_length = [], 0
    i = 0
    while i < len(document):
        segment = document[i]
        chunk.append(segment)
        chunk_length += len(segment)
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            if chunk:
                a_end = 1
                if len(chunk) >= 2:
                    a_end = rng.randint(1, len(chunk) - 1)
                tokens_a = [t for seg in chunk[:a_end] for t in seg]
                tokens_b = []
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_index = rng.randint(0, len(all_documents) - 1)
                        if random_index != document_index:
                            break
                    if random_index == document_index and stats is not None:
                        stats.nsp_same_document += 1  # 10 misses (or a single document)
                    random_document = all_documents[random_index]
                    start = rng.randint(0, len(random_document) - 1)
                    for j in range(start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    # The sentences after a_end were not used: give them back to the document.
                    i -= len(chunk) - a_end
                else:
                    is_random_next = False
                    tokens_b = [t for seg in chunk[a_end:] for t in seg]
                removed = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if not tokens_a or not tokens_b:  # the original asserts; unreachable for n >= 5
                    raise AssertionError("empty segment after truncation")

                tokens = [CLS] + tokens_a + [SEP] + tokens_b + [SEP]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                output_tokens, positions, labels = masking.create_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
                    do_whole_word_mask=do_whole_word_mask,
                    whole_word_mask_per_word=whole_word_mask_per_word)
                instances.append(TrainingInstance(output_tokens, segment_ids, positions, labels,
                                                  is_random_next))
                if stats is not None:
                    stats.add_instance(len(tokens), positions, tokens, output_tokens,
                                       is_random_next, MASK)
                    if len(chunk) == 1:
                        stats.nsp_forced_random_next += 1
                    if removed:
                        stats.truncated_instances += 1
                        stats.truncated_tokens += removed
            chunk, chunk_length = [], 0
        i += 1
    return instances


def create_training_instances(all_documents, tokenizer, max_seq_length, dupe_factor,
                              short_seq_prob, masked_lm_prob, max_predictions_per_seq, rng,
                              do_whole_word_mask=False, whole_word_mask_per_word=False,
                              stats=None, progress=None):
    """Shuffle documents, run `dupe_factor` passes, shuffle instances (mutates all_documents).

    Args:
        all_documents: `read_documents`'s output (shuffled in place).
        tokenizer: a `FullTokenizer` (its vocab gives the random replacements).
        max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob, max_predictions_per_seq:
            the flags of that name.
        rng: the `random.Random(random_seed)` everything draws from.
        do_whole_word_mask, whole_word_mask_per_word: the flags of that name.
        stats: a `Stats` to count into, or None.
        progress: called with (documents done, instances so far) per document, or None.

    Returns:
        The shuffled list of `TrainingInstance`.
    """
    rng.shuffle(all_documents)
    vocab_words = list(tokenizer.vocab.keys())
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(create_instances_from_document(
                all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab_words, rng, do_whole_word_mask,
                whole_word_mask_per_word, stats))
            if progress is not None:
                progress(1, len(instances))
    rng.shuffle(instances)
    return instances


def instance_features(instance, tokenizer, max_seq_length, max_predictions_per_seq):
    """TrainingInstance -> padded feature dict (the original's write_instance_to_example_files).

    Args:
        instance: a `TrainingInstance`.
        tokenizer: a `FullTokenizer` (tokens -> ids).
        max_seq_length, max_predictions_per_seq: the padded lengths.
    """
    return pad_features(
        tokenizer.convert_tokens_to_ids(instance.tokens), instance.segment_ids,
        instance.masked_lm_positions, tokenizer.convert_tokens_to_ids(instance.masked_lm_labels),
        instance.is_random_next, max_seq_length, max_predictions_per_seq)


def write_instances(instances, tokenizer, max_seq_length, max_predictions_per_seq, writers):
    """Round-robin over `writers` (objects with .write(bytes)), as the original.

    Args:
        instances: `TrainingInstance`s, in output order.
        tokenizer: a `FullTokenizer` (tokens -> ids).
        max_seq_length, max_predictions_per_seq: the padded lengths.
        writers: instance k goes to writers[k % len(writers)].
    """
    for k, instance in enumerate(instances):
        features = instance_features(instance, tokenizer, max_seq_length, max_predictions_per_seq)
        writers[k % len(writers)].write(encode_example(features))


class DocProgress:
    """tqdm over documents x passes with instances/s; silent when stderr is not a terminal."""

    def __init__(self, total, enabled):
        self.start = time.time()
        self.bar = None
        if enabled is False or (enabled is None and not sys.stderr.isatty()):
            return
        from bert_tf.progress import bar as tqdm
        self.bar = tqdm(total=total, unit="doc", desc="original", file=sys.stderr, mininterval=1.0)

    def update(self, docs, instances):
        """Advances the bar.

        Args:
            docs: documents done since the last call.
            instances: instances made so far (for the rate).
        """
        if self.bar is None:
            return
        self.bar.update(docs)
        elapsed = max(time.time() - self.start, 1e-9)
        self.bar.set_postfix_str(f"{instances / elapsed:.0f} inst/s", refresh=False)

    def close(self):
        """Closes the bar (if any)."""
        if self.bar is not None:
            self.bar.close()
