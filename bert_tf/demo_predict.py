"""Step 5 of the demo: use the exports from plain Keras, as any user would.

    python bert_tf/demo_predict.py --fill_mask_dir export/bert_demo/1 \
        --preprocessor_dir export/bert_demo_preprocessor/1 --encoder_dir export/bert_demo_encoder/1

Deliberately imports nothing from bert_tf (run it as a file, not with -m): loading needs only
keras, tensorflow and tensorflow_text (which registers the tokenizer ops). `--json_file` also
writes the results as JSON (the demo reads them).
"""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the in-graph tokenizer ops)
from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("fill_mask_dir", None, "End-to-end fill-mask export (text with [MASK] in).")
flags.DEFINE_string("preprocessor_dir", None, "Preprocessor export (text -> input ids).")
flags.DEFINE_string("encoder_dir", None, "Encoder export (input ids -> pooled/sequence output).")
flags.DEFINE_string("fill_mask_text", "the [MASK] shone at dusk .", "'|'-separated texts.")
flags.DEFINE_string("embed_text", "a lamp.|a lens.", "'|'-separated texts to embed.")
flags.DEFINE_string("json_file", None, "Also write the results to this JSON file.")


def _strings(x):
    return [s.decode("utf-8") for s in np.asarray(x).ravel()]


def fill_mask(export_dir, texts):
    """Prints and returns the top-5 tokens and scores for each [MASK] of each text.

    Args:
        export_dir: the text-in fill-mask SavedModel version folder.
        texts: list of str, each with one or more [MASK].
    """
    layer = keras.layers.TFSMLayer(export_dir, call_endpoint="serving_default")
    out = layer(tf.constant(texts))
    results = []
    for i, text in enumerate(texts):
        masks = []
        for m in range(int(out["mask_count"][i])):
            tokens = _strings(out["top_k_tokens"][i, m])
            scores = [float(s) for s in out["top_k_scores"][i, m]]
            masks.append({"tokens": tokens, "scores": scores})
            shown = ", ".join(f"{t} ({s:.2f})" for t, s in zip(tokens, scores))
            print(f"  {text!r} [MASK] #{m + 1}: {shown}")
        results.append({"text": text, "masks": masks})
    return results


def embed(preprocessor_dir, encoder_dir, texts):
    """Prints and returns the cosine similarities of the texts' mean-pooled sequence outputs.

    Args:
        preprocessor_dir: the TF Hub-style preprocessor SavedModel.
        encoder_dir: the TF Hub-style encoder SavedModel.
        texts: list of str.
    """
    # The TF Hub pattern: preprocessor and encoder as two layers of one Keras model. The
    # sentence vector is the mean of the real tokens' sequence_output (after a few hundred steps
    # the NSP-trained pooled_output barely tells sentences apart).
    text_in = keras.Input(shape=(), dtype="string")
    inputs = keras.layers.TFSMLayer(preprocessor_dir, call_endpoint="__call__")(text_in)
    outputs = keras.layers.TFSMLayer(encoder_dir, call_endpoint="__call__")(inputs)
    model = keras.Model(text_in, {"sequence_output": outputs["sequence_output"],
                                  "input_mask": inputs["input_mask"]})
    out = model(tf.constant(texts))
    mask = np.asarray(out["input_mask"], dtype=np.float32)[:, :, None]
    vectors = (np.asarray(out["sequence_output"]) * mask).sum(1) / mask.sum(1)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosine = unit @ unit.T
    print(f"  mean-pooled sequence_output: shape {vectors.shape}; cosine similarity:")
    for i, text in enumerate(texts):
        print("   " + " ".join(f"{c:5.2f}" for c in cosine[i]) + f"  {text}")
    print("  (rows and columns in the order of the texts)")
    return {"shape": list(vectors.shape), "cosine": cosine.round(4).tolist()}


def main(argv):
    """Runs fill-mask and/or embedding on the exported models named by the flags."""
    del argv
    results = {}
    for flag in ("fill_mask_dir", "preprocessor_dir", "encoder_dir"):
        path = getattr(FLAGS, flag)
        if path and not os.path.exists(os.path.join(path, "saved_model.pb")):
            sys.exit(f"error: --{flag}: {path} is not a SavedModel folder")
    if FLAGS.fill_mask_dir:
        print("fill-mask (top 5 per [MASK]):")
        results["fill_mask"] = fill_mask(FLAGS.fill_mask_dir, FLAGS.fill_mask_text.split("|"))
    if FLAGS.preprocessor_dir and FLAGS.encoder_dir:
        print("sentence embeddings (preprocessor + encoder in one Keras model):")
        results["embeddings"] = embed(FLAGS.preprocessor_dir, FLAGS.encoder_dir,
                                      FLAGS.embed_text.split("|"))
    if FLAGS.json_file:
        with open(FLAGS.json_file, "w", encoding="utf-8") as f:
            json.dump(results, f)


if __name__ == "__main__":
    app.run(main)
