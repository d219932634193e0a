"""`bert-pack-pretraining-data` of an installed bert_tf, run from the checkout (same flags; see --help).

The command lives in bert_tf/commands/pack_pretraining_data.py.
"""
from bert_tf.commands.pack_pretraining_data import main

if __name__ == "__main__":
    main()
