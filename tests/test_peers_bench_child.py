"""bench/peers_train.py's Model Garden child, which bench/time_to_quality.py starts each
replicate from: its seed fixes its initial weights (the replicates' claim), another seed
draws others. Marked `peers`: run with `make test-peers`."""
import os
import sys

import numpy as np
import pytest

import tensorflow as tf
try:
    import official  # noqa: F401
    import tf_keras  # noqa: F401
    PEER_ERROR = None
except ImportError as e:  # conftest fails every test of this module (never skips)
    PEER_ERROR = e

from conftest import tiny_bert_config, write_pretraining_records

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
from peers_train import ModelGarden  # noqa: E402

pytestmark = pytest.mark.peers


def _initial_weights(tmp_path, records, cfg_file, seed, name):
    prefix = str(tmp_path / name / "ckpt")
    child = ModelGarden(cfg_file, records, 4, 1, seed=seed,
                        extra=["--seq", "32", "--preds", "5", "--init_out", prefix])
    child.close()
    reader = tf.train.load_checkpoint(prefix)
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
            if "VARIABLE_VALUE" in n}


def test_model_garden_child_seed_fixes_its_initial_weights(tmp_path):
    records = tmp_path / "train.tfrecord"
    write_pretraining_records(records, 16)
    cfg_file = str(tmp_path / "bert_config.json")
    tiny_bert_config().to_json_file(cfg_file)
    first, again, other = (_initial_weights(tmp_path, str(records), cfg_file, seed, name)
                           for seed, name in ((3, "a"), (3, "b"), (4, "c")))
    assert sorted(first) == sorted(again) == sorted(other)
    random = [n for n in first if np.std(first[n]) > 0]  # not the zero/one initialised ones
    assert len(random) >= 10
    for n in first:
        np.testing.assert_array_equal(first[n], again[n], err_msg=n)
    assert all(not np.array_equal(first[n], other[n]) for n in random)
