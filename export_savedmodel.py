"""`bert-export-savedmodel` of an installed bert_tf, run from the checkout (same flags; see --help).

The command lives in bert_tf/commands/export_savedmodel.py.
"""
from bert_tf.commands.export_savedmodel import main

if __name__ == "__main__":
    main()
