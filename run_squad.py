"""`bert-run-squad` of an installed bert_tf, run from the checkout (same flags; see --help).

The command lives in bert_tf/commands/run_squad.py.
"""
from bert_tf.commands.run_squad import main

if __name__ == "__main__":
    main()
