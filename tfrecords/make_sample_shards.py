"""Regenerate the sample pre-training shards from the sample corpus (bert_tf.resources).

  .venv/bin/python tfrecords/make_sample_shards.py [--vocab_file=VOCAB] [--out_dir=DIR]

Without --vocab_file a small WordPiece vocab is learned from the corpus (DIR/vocab.txt).
Writes, under DIR (default tfrecords/shards/, git-ignored):
  sample_original.tfrecord (+ .bert_tf/*.stats.json)       --mode=original, 1 file
  sample_streaming-0000{0,1}-of-00002 (+ .bert_tf/*.stats.json)  --mode=streaming, 2 shards
with max_seq_length 128, max_predictions_per_seq 20, dupe_factor 5, seed 12345.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import bert_tf  # noqa: E402,F401
from bert_tf import BertError, resources  # noqa: E402
from bert_tf.pretraining_data.runner import Options, run  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab_file", default=None)
    parser.add_argument("--out_dir", default=os.path.join(HERE, "shards"))
    parser.add_argument("--learn_vocab_size", type=int, default=1000)
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    corpus = resources.sample_corpus()
    vocab = args.vocab_file or os.path.join(args.out_dir, "vocab.txt")
    common = dict(input_file=corpus, vocab_file=vocab, learn_vocab_size=args.learn_vocab_size,
                  max_seq_length=128, max_predictions_per_seq=20, dupe_factor=5, random_seed=12345)
    try:
        run(Options(**common, mode="original",
                    output_file=os.path.join(args.out_dir, "sample_original.tfrecord")))
        run(Options(**common, mode="streaming", num_workers=2, output_shards=2,
                    output_file=os.path.join(args.out_dir, "sample_streaming")))
    except BertError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
