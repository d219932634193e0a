"""Without the peers (the default suite): bert_tf never imports one, and a converter that needs
one says how to install it in one line. Runs in `make test`; needs no peer."""
import os
import subprocess
import sys

import pytest

import bert_tf  # noqa: F401
from bert_tf import BertError
from bert_tf.convert import interop
from bert_tf.modeling.config import BertConfig

PEERS = ("tf_keras", "official", "keras_hub", "tensorflow_hub", "tokenizers")


def test_library_imports_no_peer():
    code = ("import sys, bert_tf.convert.model_garden, bert_tf.convert.keras_hub, "
            "bert_tf.convert.tfhub, bert_tf.export\n"
            f"print(sorted(m for m in {PEERS!r} if m in sys.modules))")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def no_peers(monkeypatch):
    for name in PEERS:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


def test_converters_needing_a_peer_say_how_to_install_it(no_peers, tmp_path):
    from bert_tf.convert import keras_hub as khc
    from bert_tf.convert import model_garden as mgc
    cfg = BertConfig(vocab_size=6, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=8, max_position_embeddings=8)
    model = interop.build_bert_model(cfg)
    with pytest.raises(BertError, match=r"^tf_keras is not installed .*bert_tf\[model-garden\].*--no-deps tf-models-official==2\.20\.0") as e:
        mgc.save_model_garden_checkpoint(model, str(tmp_path / "ckpt"))
    assert "\n" not in str(e.value) and not os.listdir(tmp_path)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n")
    with pytest.raises(BertError, match=r"^keras_hub is not installed .*pip install \"bert_tf\[keras-hub\]\"$"):
        khc.save_keras_hub_preset(model, str(vocab), True, str(tmp_path / "preset"))
    assert not (tmp_path / "preset").exists()
