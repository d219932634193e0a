"""The one check of a vocab file against a model's vocab_size (every script, from_pretrained,
bert-convert and the exports call it before any work). Pure Python: no TensorFlow import."""
from bert_tf import BertError

TPU_PADDING = 128  # embedding tables are often padded to a multiple of this


def vocab_size_fits(num_lines, vocab_size, exact=False):
    """Whether a vocab of `num_lines` tokens fits an embedding table of `vocab_size` rows:
    equal, or (unless `exact`) fewer with vocab_size at most num_lines rounded up to a
    multiple of 128 (TPU padding).

    Args:
        num_lines: the vocab's token count.
        vocab_size: the model's word-embedding rows.
        exact: no TPU padding allowed.
    """
    if num_lines == vocab_size:
        return True
    padded = -(-num_lines // TPU_PADDING) * TPU_PADDING
    return not exact and num_lines < vocab_size <= padded


def check_vocab_size(vocab_file, vocab_size, what="the model", exact=False):
    """One-line BertError unless `vocab_file` fits a model of `vocab_size` rows.

    Args:
        vocab_file: the vocab.txt (one token a line).
        vocab_size: int, the model's vocab_size (word-embedding rows).
        what: the model's source for the message (a config file, checkpoint or directory).
        exact: no TPU padding allowed (formats that need as many lines as rows).

    Returns:
        The vocab's tokens (list, index = id).
    """
    from bert_tf.tokenization.wordpiece import vocab_tokens
    tokens = vocab_tokens(vocab_file)
    check_vocab_count(len(tokens), vocab_size, vocab_file, what, exact)
    return tokens


def check_vocab_count(num_lines, vocab_size, vocab_file, what="the model", exact=False):
    """`check_vocab_size` for a vocab already read.

    Args:
        num_lines: the vocab's token count.
        vocab_size: the model's vocab_size.
        vocab_file: the vocab's name for the message.
        what: the model's source for the message.
        exact: no TPU padding allowed.
    """
    if not vocab_size_fits(int(num_lines), int(vocab_size), exact):
        allowed = ("exactly as many" if exact else
                   "as many, or fewer with vocab_size their count rounded up to a multiple "
                   f"of {TPU_PADDING}")
        raise BertError(f"{vocab_file}: {num_lines} lines but {what} has vocab_size "
                        f"{vocab_size} (wrong vocab for this model? it needs {allowed})")
