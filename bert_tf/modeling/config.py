"""BertConfig: the original `bert_config.json`, validated."""
import copy
import json

from bert_tf import BertError

# Original field order, kept when writing so files diff cleanly against released ones.
FIELDS = (
    "attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
    "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
    "num_hidden_layers", "type_vocab_size", "vocab_size",
)
# "gelu" is the original release's tanh approximation; "gelu_exact" is the erf form (HF's "gelu").
ACTIVATIONS = ("gelu", "gelu_exact", "gelu_new", "relu", "tanh", "swish", "silu", "linear")


class BertConfig:
    """Hyper-parameters of a BERT encoder, with the original field names and defaults.

    Invalid values raise a one-line `BertError` naming `source` and the field.

    Args:
        vocab_size: int, rows of the word embedding table.
        hidden_size: int, H.
        num_hidden_layers: int, number of transformer blocks.
        num_attention_heads: int, must divide `hidden_size`.
        intermediate_size: int, feed-forward width.
        hidden_act: str, one of `ACTIVATIONS` ("gelu" is the original's tanh form).
        hidden_dropout_prob: float in [0, 1).
        attention_probs_dropout_prob: float in [0, 1).
        max_position_embeddings: int, longest sequence.
        type_vocab_size: int, number of segment ids (16 is the original's default; released
            checkpoints use 2).
        initializer_range: float > 0, stddev of the truncated-normal initializer.
        source: str, names the config in error messages (e.g. its file).
    """

    def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512,
                 type_vocab_size=16, initializer_range=0.02, source="BertConfig"):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.validate(source)

    def validate(self, source="BertConfig"):
        """Raises a one-line BertError for the first invalid field (run by `__init__`).

        Args:
            source: str, names the config in the error (e.g. its file).
        """
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BertError(f"{source}: {name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise BertError(f"{source}: hidden_size {self.hidden_size} is not divisible by "
                            f"num_attention_heads {self.num_attention_heads}")
        if self.hidden_act not in ACTIVATIONS:
            raise BertError(f"{source}: unknown hidden_act {self.hidden_act!r}; "
                            f"expected one of {', '.join(ACTIVATIONS)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise BertError(f"{source}: {name} must be in [0, 1), got {value!r}")
        if not isinstance(self.initializer_range, (int, float)) or self.initializer_range <= 0:
            raise BertError(f"{source}: initializer_range must be > 0, got {self.initializer_range!r}")

    @property
    def head_size(self):
        """Width of one attention head, hidden_size // num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, data, source="BertConfig"):
        """A config from a `bert_config.json` dict (unknown keys are ignored).

        Args:
            data: dict parsed from the JSON; must have `vocab_size`.
            source: str, names the config in error messages.
        """
        if not isinstance(data, dict):
            raise BertError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if "vocab_size" not in data:
            raise BertError(f"{source}: missing required field 'vocab_size'")
        # Unknown keys (e.g. HF's model_type) are ignored, as the original did.
        return cls(**{k: data[k] for k in FIELDS if k in data}, source=source)

    @classmethod
    def from_json_file(cls, path):
        """A config from a `bert_config.json` file (gs:// paths work)."""
        from bert_tf import fileio
        return cls.from_dict(fileio.read_json(path, "bert_config file not found"), source=path)

    def to_dict(self):
        """The 11 original fields as a dict."""
        return {k: copy.deepcopy(getattr(self, k)) for k in FIELDS}

    def to_json_string(self):
        """The config as `bert_config.json` text (2-space indent, sorted keys, final newline)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path):
        """Writes `bert_config.json` atomically."""
        from bert_tf import fileio
        fileio.write_text_atomic(path, self.to_json_string())

    def __eq__(self, other):
        return isinstance(other, BertConfig) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return f"BertConfig({self.to_dict()})"
