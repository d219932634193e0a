"""create_pretraining_data on Apache Beam (DirectRunner): same instances with 1 and 2 workers,
schema/statistics, the training input pipeline reads the shards, CLI pass-through, errors."""
import json
import os
import subprocess
import sys

import pytest

import bert_tf  # noqa: F401
from bert_tf import BertError
from bert_tf.pretraining_data import schema
from bert_tf.pretraining_data.runner import Options, run
from bert_tf.tokenization import load_vocab

from test_pretraining_data_streaming import REPO, _check_records, _write_synthetic

beam_lib = pytest.importorskip("bert_tf.pretraining_data.beam", exc_type=ImportError)

MP_ARGS = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")


@pytest.fixture(scope="module", autouse=True)
def small_pieces():
    """~150 KB corpora: pieces of 32 KB so that several workers get work."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(beam_lib, "MIN_PIECE_BYTES", 32 << 10)
        yield


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("beam_corpus")
    return _write_synthetic(d, num_docs=100, sentences=(10, 30))


_NETWORK = {"on": False, "seen": []}


def _network_probe(event, args, state=_NETWORK):  # bound now: module globals go at exit
    """Audit hook: name lookups, URL opens and TCP connects while state["on"]."""
    if state["on"] and (event in ("socket.getaddrinfo", "urllib.Request") or (
            event == "socket.connect" and isinstance(args[1], tuple))):
        state["seen"].append((event, args[1] if event == "socket.connect" else args[0]))


sys.addaudithook(_network_probe)  # hooks cannot be removed: it records only while on


@pytest.fixture(scope="module")
def in_process(corpus, tmp_path_factory):
    """One in-process DirectRunner run, shared by the tests below; records any network use."""
    d = tmp_path_factory.mktemp("beam_one")
    text, vocab = corpus
    _NETWORK.update(on=True, seen=[])
    try:
        data = run(Options(input_file=text, vocab_file=vocab, mode="beam", runner="DirectRunner",
                           dupe_factor=5, output_file=str(d / "out"), output_shards=3,
                           nsp_reservoir_size=30, progress=False))
    finally:
        _NETWORK["on"] = False
    return d, data, list(_NETWORK["seen"])


def test_direct_runner_uses_no_network_and_passes_the_options_on(in_process):
    """Beam's DirectRunner would first fetch its Prism binary from GitHub (a stall offline):
    the local run never looks a host up; the FnApiRunner it runs on hands the pipeline
    options to the SDK workers, as the DirectRunner does."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    assert in_process[2] == []
    for name in ("DirectRunner", "direct", "apache_beam.runners.direct.direct_runner.DirectRunner"):
        options = beam_lib.pipeline_options(name, ["--direct_num_workers=2"])
        runner = beam_lib.pipeline_runner(options)
        assert isinstance(runner, fn_runner.FnApiRunner), name
        given = dict(runner._provision_info.provision_info.pipeline_options)
        assert given["beam:option:default_sdk_harness_log_level:v1"] == "WARNING", given
        assert int(given["beam:option:direct_num_workers:v1"]) == 2, given
    options = beam_lib.pipeline_options("DataflowRunner", [])
    assert beam_lib.pipeline_runner(options) == "DataflowRunner"


def test_beam_schema_statistics_and_stats_file(in_process, corpus):
    d, data, _ = in_process
    assert data["outputs"] == [str(d / f"out-0000{i}-of-00003") for i in range(3)]
    assert sorted(os.listdir(d)) == [".bert_tf", "out-00000-of-00003", "out-00001-of-00003",
                                     "out-00002-of-00003"]  # no temp files
    assert os.listdir(d / ".bert_tf") == ["out.stats.json"]  # no lock left
    records = schema.parse_records(data["outputs"], 128, 20)  # the published feature_spec
    vocab = load_vocab(corpus[1])
    s = _check_records(records, len(vocab), vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"], 20, 0.15)
    t = data["totals"]
    assert s["count"] == t["instances"] >= 2000 and t["documents"] == 100
    assert abs(s["masked_fraction"] - 0.15) <= 0.01, s
    assert abs(s["mask"] - 0.8) <= 0.03 and abs(s["keep"] - 0.1) <= 0.03, s
    assert abs(s["random"] - 0.1) <= 0.03, s
    assert round(s["random_next"] * s["count"]) == t["nsp_random_next"]
    assert abs(t["nsp_coin_random_next_fraction"] - 0.5) <= 0.03, t
    assert 0.05 <= t["nsp_forced_random_next"] / t["instances"] <= 0.25, t
    assert t["masked"] == sum(int(r["masked_lm_weights"].sum()) for r in records)
    assert t["tokens"] == sum(int(r["input_mask"].sum()) for r in records)
    with open(d / ".bert_tf" / "out.stats.json") as f:
        on_disk = json.load(f)
    assert on_disk["totals"] == t and on_disk["mode"] == "beam" and on_disk["runner"] == "DirectRunner"
    # Records of one document are spread out: neighbours rarely share their first 6 tokens.
    same = sum((a["input_ids"][1:7] == b["input_ids"][1:7]).all()
               for a, b in zip(records, records[1:]))
    assert same < len(records) * 0.05


def test_beam_shards_feed_the_training_input_pipeline(in_process):
    from bert_tf.pretraining import input_pipeline
    d, data, _ = in_process
    ds = input_pipeline.pretraining_dataset(str(d / "out-*-of-00003"), batch_size=7,
                                            max_seq_length=128, max_predictions_per_seq=20,
                                            is_training=False)
    names = {"input_word_ids": "input_ids", "input_mask": "input_mask",
             "input_type_ids": "segment_ids", "masked_lm_positions": "masked_lm_positions",
             "masked_lm_ids": "masked_lm_ids", "masked_lm_weights": "masked_lm_weights"}
    expected = schema.parse_records(sorted(data["outputs"]), 128, 20)  # files in sorted order
    count = 0
    for batch in ds:
        batch = {k: v.numpy() for k, v in batch.items()}
        assert batch["input_word_ids"].shape == (7, 128) and batch["masked_lm_ids"].shape == (7, 20)
        for i in range(7):
            record = expected[count]
            for ours, theirs in names.items():
                assert batch[ours][i].tolist() == record[theirs].tolist(), (count, ours)
            assert int(batch["next_sentence_labels"][i]) == int(record["next_sentence_labels"][0])
            count += 1
    assert count == len(expected) - len(expected) % 7  # drop_remainder


def test_beam_same_files_as_streaming_and_with_two_workers(in_process, corpus, tmp_path):
    """A piece is streaming's shard, written by streaming's writer: --output_shards=3 gives
    streaming's 3 files byte for byte, and 2 worker threads give them again. (2 worker
    processes: test_cli_multi_processing_pass_through, slow.)"""
    d, data, _ = in_process
    text, vocab = corpus
    streamed = run(Options(input_file=text, vocab_file=vocab, mode="streaming", dupe_factor=5,
                           output_file=str(tmp_path / "s" / "out"), output_shards=3,
                           nsp_reservoir_size=30, progress=False))
    assert [_bytes(p) for p in streamed["outputs"]] == [_bytes(p) for p in data["outputs"]]
    assert _counters(streamed["totals"]) == _counters(data["totals"])
    other = run(Options(input_file=text, vocab_file=vocab, mode="beam", runner="DirectRunner",
                        beam_args=("--direct_num_workers=2", "--direct_running_mode=multi_threading"),
                        dupe_factor=5, output_file=str(tmp_path / "out"),
                        output_shards=3, nsp_reservoir_size=30, progress=False))
    assert _counters(other["totals"]) == _counters(data["totals"])
    assert [_bytes(p) for p in other["outputs"]] == [_bytes(p) for p in data["outputs"]]


def test_beam_default_shard_count_is_the_piece_count(corpus, tmp_path):
    text, vocab = corpus
    pieces = beam_lib.plan_pieces([text], str(tmp_path / "out"))
    assert len(pieces) == beam_lib.num_pieces(os.path.getsize(text)) >= 2
    data = run(Options(input_file=text, vocab_file=vocab, mode="beam", runner="DirectRunner",
                       dupe_factor=1, output_file=str(tmp_path / "out"), progress=False))
    assert data["outputs"] == [t.output for t in pieces]
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(t.output) for t in pieces] + [".bert_tf"])


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


def _counters(totals):
    return {k: v for k, v in totals.items() if k not in ("seconds", "instances_per_second")}


def test_piece_count_depends_on_input_size_only(monkeypatch):
    mb = 1 << 20
    monkeypatch.setattr(beam_lib, "MIN_PIECE_BYTES", mb)  # the default
    sizes = (0, 1, mb, mb + 1, 3 * mb + 5, 20 * mb, 100 * mb, 64 * mb * 40 + 1)
    assert [beam_lib.num_pieces(b) for b in sizes] == [1, 1, 1, 2, 4, 16, 16, 41]


def test_beam_errors(tmp_path, corpus):
    text, vocab = corpus
    base = dict(input_file=text, vocab_file=vocab, output_file=str(tmp_path / "o" / "out"),
                mode="beam", runner="DirectRunner", progress=False, dupe_factor=1)
    cases = [
        (dict(resume=True), "--resume: only --mode=streaming"),
        (dict(num_workers=2), "--num_workers: with --runner, use the runner's own options"),
        (dict(output_file=f"{tmp_path}/a,{tmp_path}/b"), "--output_file: with --runner give one"),
        (dict(mode="streaming"), "--runner: runs the Beam pipeline"),
        (dict(mode="original", runner="", beam_args=("--project=x",)),
         r"unknown flag\(s\) --project=x"),
        (dict(input_file="", tfds_dataset="wikipedia"), "--tfds_dataset: not supported"),
    ]
    for kw, pattern in cases:
        with pytest.raises(BertError, match=pattern):
            run(Options(**dict(base, **kw)))
    # An error inside a worker comes back as its one-line message; nothing is left behind.
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\nalso fine\n\ncaf\xe9 au lait\n")
    with pytest.raises(BertError) as e:
        run(Options(**dict(base, input_file=str(bad), output_shards=2)))
    assert str(e.value) == f"{bad}: line 5 is not valid UTF-8 (byte 0xe9 at column 4)"
    assert os.listdir(tmp_path / "o") == []


def test_library_imports_without_beam():
    code = ("import sys; sys.modules['apache_beam'] = None  # as if not installed\n"
            "import bert_tf.pretraining_data, bert_tf.pretraining_data.runner as runner\n"
            "import bert_tf.pretraining_data.streaming, bert_tf.pretraining_data.cli\n"
            "from bert_tf import BertError\n"
            "try:\n"
            "    runner._run_beam(runner.Options(mode='beam'), [], [], 's.json', 'v.txt', 0)\n"
            "except BertError as e:\n"
            "    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("--runner: apache-beam is not installed"), proc.stdout
    assert proc.stdout.rstrip().endswith('pip install "bert_tf[beam]"')


@pytest.mark.slow
def test_cli_multi_processing_pass_through(tmp_path, corpus, in_process):
    """The script passes the Beam options it does not know to the DirectRunner: 2 worker
    processes write the same files as the in-process run."""
    d, data, _ = in_process
    text, vocab = corpus
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "create_pretraining_data.py"), "--runner=DirectRunner",
         *MP_ARGS, f"--input_file={text}", f"--vocab_file={vocab}", "--dupe_factor=5",
         f"--output_file={tmp_path}/out", "--output_shards=3", "--nsp_reservoir_size=30"],
        capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"wrote {data['totals']['instances']} instances" in proc.stderr
    names = [os.path.basename(p) for p in data["outputs"]]
    assert [_bytes(tmp_path / n) for n in names] == [_bytes(p) for p in data["outputs"]]
    bad = subprocess.run(
        [sys.executable, os.path.join(REPO, "create_pretraining_data.py"), "--no_such_flag=1",
         f"--input_file={text}", f"--vocab_file={vocab}", f"--output_file={tmp_path}/x"],
        capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == (
        "error: unknown flag(s) --no_such_flag=1 (Beam pipeline options need --runner)")
