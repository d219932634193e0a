"""The one vocab-vs-model check (`bert_tf.tokenization.check_vocab_size`): both directions, TPU
padding, and where it meets from_pretrained and a script."""
import pytest

from bert_tf import BertError
from bert_tf.tokenization import check_vocab_size
from bert_tf.tokenization.vocab_check import vocab_size_fits


def _vocab(path, n):
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                              + [f"w{i}" for i in range(n - 5)]) + "\n")
    return str(path)


def test_both_directions_and_tpu_padding(tmp_path):
    assert [vocab_size_fits(30522, n) for n in (30522, 30592, 30593, 30521)] == \
        [True, True, False, False]
    assert not vocab_size_fits(30522, 30592, exact=True)
    small = _vocab(tmp_path / "v.txt", 1128)
    assert len(check_vocab_size(small, 1128)) == 1128
    assert len(check_vocab_size(small, 1152)) == 1128  # 1128 rounded up to 128s
    for size in (30522, 1153, 1000):
        with pytest.raises(BertError) as e:
            check_vocab_size(small, size, "cfg.json")
        msg = str(e.value)
        assert msg.startswith(f"{small}: 1128 lines but cfg.json has vocab_size {size} ")
        assert "\n" not in msg


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    from test_convert_encoder_only import write_bert_model_dir
    return write_bert_model_dir(tmp_path_factory.mktemp("vc"))


def test_from_pretrained_refuses_a_wrong_vocab(hf_dir, tmp_path):
    import bert_tf
    big = _vocab(tmp_path / "big.txt", 200)
    with pytest.raises(BertError, match=r"big.txt: 200 lines but .* has vocab_size 27 "):
        bert_tf.from_pretrained(hf_dir, vocab_file=big)


def test_extract_features_refuses_a_wrong_vocab_in_one_line(hf_dir, tmp_path):
    # In this process: bert-extract-features' run() (TensorFlow is started already). Its
    # BertError is the command's one `error:` line, exit 1, no traceback: the scripts' shared
    # runner, which tests/test_tasks_e2e.py::test_script_errors_are_one_line runs as processes
    # (run_classifier.py's BertError; extract_features.py's flag error).
    from bert_tf.tasks import features
    (tmp_path / "in.txt").write_text("the movie was good\n")
    for n in (200,):  # more lines than vocab_size 27 (fewer: 27 is TPU padding of any n < 27)
        vocab = _vocab(tmp_path / f"v{n}.txt", n)
        with pytest.raises(BertError) as e:
            features.run(features.FeatureConfig(
                input_file=str(tmp_path / "in.txt"), output_file=str(tmp_path / "o.jsonl"),
                bert_config_file=f"{hf_dir}/config.json", vocab_file=vocab, max_seq_length=16,
                progress=False))
        assert str(e.value) == (
            f"{vocab}: {n} lines but {hf_dir}/config.json has vocab_size 27 (wrong vocab "
            f"for this model? it needs as many, or fewer with vocab_size their count rounded up "
            f"to a multiple of 128)")
        assert not (tmp_path / "o.jsonl").exists()
