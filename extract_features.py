"""`bert-extract-features` of an installed bert_tf, run from the checkout (same flags; see --help).

The command lives in bert_tf/commands/extract_features.py.
"""
from bert_tf.commands.extract_features import main

if __name__ == "__main__":
    main()
