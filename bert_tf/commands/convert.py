"""`bert-convert`: converts BERT weights between formats (`python -m bert_tf.convert`).

  bert-convert --from=tf1 --source=bert_model.ckpt --bert_config_file=bert_config.json
      --vocab_file=vocab.txt --to=hf --output=bert-hf

Flags and behaviour are bert_tf.convert.__main__'s (see its docstring).
"""
import runpy

from bert_tf.commands import exit_zero_on_help


def main():
    """The `bert-convert` command: runs bert_tf.convert as `python -m bert_tf.convert` would."""
    # Run as __main__, so the converter's own command-line block defines its flags and runs.
    exit_zero_on_help(lambda: runpy.run_module("bert_tf.convert", run_name="__main__",
                                               alter_sys=True))


if __name__ == "__main__":
    main()
