"""extract_features: per-token activations of chosen encoder layers as JSON lines.

Input: one example per line, `text` or `text_a ||| text_b`. Output: one JSON object per input
line, like the original's:
  {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [{"index": -1,
   "values": [0.123456, ...]}, ...]}, ...]}
values rounded to 6 decimals; tokens include [CLS]/[SEP], not padding.
"""
import dataclasses
import json
import re

import numpy as np

from bert_tf import BertError, fileio
from bert_tf.script_flags import flag
from bert_tf.tasks.finetune import built
from bert_tf.training.options import TrainerOptions
from bert_tf.training.task import Task

_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")


@dataclasses.dataclass
class FeatureConfig(TrainerOptions):
    """extract_features' flags (the original's; the training ones of TrainerOptions unused)."""
    input_file: str = flag(None, "Text file: one example per line.")
    output_file: str = flag(None, "JSON lines output file.")
    layers: str = flag("-1,-2,-3,-4", "Comma-separated encoder layer indexes.")
    bert_config_file: str = flag(None, "The config json file of the pre-trained BERT model.")
    max_seq_length: int = flag(128, "The maximum total input sequence length after WordPiece "
                               "tokenization; longer inputs are truncated.")
    vocab_file: str = flag(None, "The vocabulary file that the BERT model was trained on.")
    do_lower_case: bool = flag(True, "Whether to lower case the input text. Should be True for "
                               "uncased models and False for cased models.")
    batch_size: int = flag(32, "Batch size for predictions.")
    pad_to_max_seq_length: bool = flag(False, (
        "Compute every batch at --max_seq_length (the original's single fixed shape; always "
        "so on TPUs). Default: each batch is cut to its longest real length, rounded up to a "
        "multiple of 8; the features of real tokens equal the fixed shape's within 1e-5."))
    use_one_hot_embeddings: bool = flag(False, "Accepted for compatibility; has no effect (the "
                                        "embedding lookup is chosen by the backend).")


class FeatureTask(Task):
    """The encoder's per-layer outputs (inference only).

    Args:
        cfg: FeatureConfig.
        bert_config: BertConfig of the encoder.
        layers: encoder layer indexes to output.
    """

    def __init__(self, cfg, bert_config, layers):
        self.cfg, self.bert_config, self.layers = cfg, bert_config, layers

    def build_model(self):
        """A built encoder wrapper returning float32 `layer_<k>` [B, S, H] for each layer."""
        return built(_layer_model(self.bert_config, self.layers), self.cfg)


def read_examples(input_file):
    """[(unique_id, text_a, text_b)] — every line, blank ones included, as the original."""
    import tensorflow as tf
    if not tf.io.gfile.exists(input_file):
        raise BertError(f"{input_file}: input file not found")
    with tf.io.gfile.GFile(input_file, "rb") as f:
        text = f.read().decode("utf-8", "ignore")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    examples = []
    for i, line in enumerate(lines):
        line = line.strip()
        m = _PAIR.match(line)
        examples.append((i, m.group(1), m.group(2)) if m else (i, line, None))
    return examples


def parse_layers(spec, num_layers):
    """--layers as ints; negative indexes count from the last layer, as the original.

    Args:
        spec: str, e.g. "-1,-2,-3,-4".
        num_layers: int, the encoder's layer count (bounds the indexes).
    """
    try:
        layers = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise BertError(f"--layers: expected comma-separated integers, got {spec!r}") from None
    if not layers:
        raise BertError("--layers: empty")
    for k in layers:
        if not -num_layers <= k < num_layers:
            raise BertError(f"--layers: {k} is outside the model's {num_layers} layers "
                            f"({-num_layers}..{num_layers - 1})")
    return layers


def _layer_model(bert_config, layers):
    import keras
    from keras import ops
    from bert_tf.modeling.encoder import BertEncoder

    class LayerOutputs(keras.Model):
        def __init__(self):
            super().__init__(name="extract_features")
            self.encoder = BertEncoder.from_bert_config(bert_config, name="encoder")

        def call(self, inputs, training=None):
            outs = self.encoder(inputs, training=training)["encoder_outputs"]
            return {f"layer_{k}": ops.cast(outs[k], "float32") for k in layers}

    return LayerOutputs()


def format_line(unique_id, tokens, layer_values, layers):
    """One output JSON line (the original's layout and `linex_index` key).

    Args:
        unique_id: the input line's index.
        tokens: the example's tokens, [CLS]/[SEP] included, no padding.
        layer_values: {layer index: [S, H] array}; rows past len(tokens) are ignored.
        layers: layer indexes in output order.
    """
    feats = []
    for i, token in enumerate(tokens):
        feats.append({"token": token, "layers": [
            {"index": k, "values": [round(float(x), 6) for x in layer_values[k][i]]}
            for k in layers]})
    return json.dumps({"linex_index": unique_id, "features": feats}) + "\n"


def run(cfg, init_source=None):
    """Writes the features of every input line to --output_file; returns a summary dict.

    Args:
        cfg: FeatureConfig.
        init_source: the `Source` read for --init_checkpoint (`bert_tf.tasks.cli`): the
            weights and config come from it, not read again; None: read from the flags.
    """
    import tensorflow as tf
    from bert_tf.convert.handoff import bert_config as config_of
    from bert_tf.tasks import classifier_data, finetune, prediction
    from bert_tf.training.trainer import Trainer
    from bert_tf.tokenization import FullTokenizer, check_vocab_size
    for name in ("input_file", "output_file", "bert_config_file", "vocab_file"):
        if not getattr(cfg, name):
            raise BertError(f"--{name}: required")
    finetune.check_flags(cfg)
    bert_config = config_of(cfg, init_source)  # any dialect the format table reads
    check_vocab_size(cfg.vocab_file, bert_config.vocab_size, cfg.bert_config_file)
    if cfg.max_seq_length > bert_config.max_position_embeddings:
        raise BertError(f"--max_seq_length: {cfg.max_seq_length} exceeds the model's "
                        f"max_position_embeddings {bert_config.max_position_embeddings}")
    layers = parse_layers(cfg.layers, bert_config.num_hidden_layers)
    tokenizer = FullTokenizer(cfg.vocab_file, do_lower_case=cfg.do_lower_case)
    examples = read_examples(cfg.input_file)
    n, s = len(examples), cfg.max_seq_length
    arrays = {k: np.zeros((n, s), np.int32)
              for k in ("input_word_ids", "input_mask", "input_type_ids")}
    all_tokens = []
    for i, (_, a, b) in enumerate(examples):
        ids, mask, types, tokens = classifier_data.encode_pair(tokenizer, a, b, s)
        arrays["input_word_ids"][i], arrays["input_mask"][i] = ids, mask
        arrays["input_type_ids"][i] = types
        all_tokens.append(tokens)
    trainer = Trainer(FeatureTask(cfg, bert_config, layers),
                      dataclasses.replace(cfg, output_dir=None), init_source=init_source)
    if cfg.init_checkpoint:
        trainer.restore()
    else:
        finetune.log.warning("no --init_checkpoint: features of random weights")
    keys = [f"layer_{k}" for k in layers]
    tmp = fileio.tmp_name(cfg.output_file)
    row = 0
    with tf.io.gfile.GFile(tmp, "w") as f:
        for out in prediction.predict_batches(trainer, arrays, cfg.batch_size, keys,
                                             desc="features"):
            for j in range(len(out[keys[0]])):
                uid, tokens = examples[row][0], all_tokens[row]
                f.write(format_line(uid, tokens, {k: out[f"layer_{k}"][j] for k in layers},
                                    layers))
                row += 1
    tf.io.gfile.rename(tmp, cfg.output_file, overwrite=True)
    return {"output_file": cfg.output_file, "num_examples": row}
