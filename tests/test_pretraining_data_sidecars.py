"""create_pretraining_data's sidecar files (stats journal, learned vocab, lock) stay out of the
data's way: run_pretraining's `--input_file='<output_file>*'` and `'<dir>/*'` read the shards
and nothing else; a run started by an older version (journal beside the data) still resumes."""
import json
import os
import shutil

import bert_tf  # noqa: F401
from bert_tf.pretraining_data.runner import Options, run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "tests", "data", "pretraining", "corpus.txt")


def test_usual_globs_over_the_output_read_the_shards_only(tmp_path):
    from bert_tf.pretraining.input_pipeline import list_files, pretraining_dataset
    out = tmp_path / "data" / "d.tfrecord"
    data = run(Options(input_file=CORPUS, output_file=str(out), mode="streaming",
                       output_shards=3, learn_vocab_size=120, max_seq_length=24,
                       max_predictions_per_seq=4, dupe_factor=2, progress=False))
    shards = [f"{out}-0000{i}-of-00003" for i in range(3)]
    side = tmp_path / "data" / ".bert_tf"
    assert sorted(os.listdir(out.parent)) == [".bert_tf"] + [os.path.basename(s) for s in shards]
    assert sorted(os.listdir(side)) == ["d.tfrecord.stats.json", "d.tfrecord.vocab.txt"]
    assert data["vocab_file"] == str(side / "d.tfrecord.vocab.txt")
    for pattern in (f"{out}*", f"{out.parent}/*"):
        assert list_files(pattern) == shards
        ds = pretraining_dataset(pattern, 1, 24, 4, is_training=False, vocab_size=120)
        assert sum(1 for _ in ds) == data["totals"]["instances"] > 10  # preflight passed too


def test_resume_takes_an_older_versions_journal_beside_the_data(tmp_path):
    vocab = os.path.join(REPO, "tests", "data", "pretraining", "vocab.txt")
    flags = dict(input_file=CORPUS, vocab_file=vocab, mode="streaming", output_shards=3,
                 max_seq_length=24, max_predictions_per_seq=4, dupe_factor=2, progress=False)
    ref, d = tmp_path / "ref", tmp_path / "old"
    run(Options(output_file=str(ref / "d"), **flags))
    expected = {n: (ref / n).read_bytes() for n in os.listdir(ref) if "-of-" in n}
    # The layout an interrupted run of an older version left: journal beside the shards.
    shutil.copytree(ref, d)
    legacy = d / "d.stats.json"
    os.replace(d / ".bert_tf" / "d.stats.json", legacy)
    os.rmdir(d / ".bert_tf")
    journal = json.loads(legacy.read_text())
    journal["complete"] = False
    del journal["shards"]["1"]
    legacy.write_text(json.dumps(journal))
    os.remove(d / "d-00001-of-00003")
    data = run(Options(output_file=str(d / "d"), resume=True, **flags))
    assert data["resumed_shards"] == 2
    assert {n: (d / n).read_bytes() for n in os.listdir(d) if "-of-" in n} == expected
    assert sorted(os.listdir(d)) == [".bert_tf"] + sorted(expected)  # the old journal moved
    assert json.loads((d / ".bert_tf" / "d.stats.json").read_text())["complete"]
