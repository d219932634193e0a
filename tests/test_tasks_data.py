"""Classifier/NER data: GLUE TSV layouts, features, TFDS (mock data), CoNLL reading, errors."""
import os

import numpy as np
import pytest

import bert_tf
from bert_tf import BertError
from bert_tf.tasks import classifier_data as cd
from bert_tf.tasks import tfds_data
from bert_tf.tasks import ner
from bert_tf.tokenization import FullTokenizer

# The original release's test vocabulary (+ [MASK], which FullTokenizer requires).
REF_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing",
             ",", "[MASK]"]


@pytest.fixture
def ref_tokenizer(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(REF_VOCAB) + "\n", encoding="utf-8")
    return FullTokenizer(str(path), do_lower_case=True)


def _write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join("\t".join(row) for row in lines) + "\n")


# (task, file, rows, expected (guid, text_a, text_b, label) of the last example). Without an
# id column the guid is the 0-based row index counting the header, as the original's.
GLUE_CASES = [
    ("cola", "train.tsv", [["gj04", "1", "", "The boy ran."], ["gj04", "0", "*", "Ran boy."]],
     ("train-1", "Ran boy.", None, "0")),
    ("cola", "test.tsv", [["index", "sentence"], ["7", "Bill whistled."]],
     ("test-7", "Bill whistled.", None, "0")),
    ("mnli", "train.tsv",
     [["index", "promptID", "pairID", "genre", "b1", "b2", "p1", "p2", "sentence1", "sentence2",
       "label1", "gold_label"],
      ["0", "1", "1e", "gov", "x", "x", "x", "x", "A man.", "A person.", "entailment",
       "entailment"]],
     ("train-0", "A man.", "A person.", "entailment")),
    ("mnli", "dev_matched.tsv",
     [["index"] + ["h"] * 15,
      ["3", "1", "1e", "gov", "x", "x", "x", "x", "A cat.", "A dog.", "neutral", "neutral",
       "neutral", "neutral", "neutral", "contradiction"]],
     ("dev-3", "A cat.", "A dog.", "contradiction")),
    ("mnli", "test_matched.tsv",
     [["index"] + ["h"] * 9, ["5", "1", "1e", "gov", "x", "x", "x", "x", "P.", "H."]],
     ("test-5", "P.", "H.", "contradiction")),
    ("mnli_mismatched", "dev_mismatched.tsv",
     [["index"] + ["h"] * 15,
      ["4", "1", "1e", "gov", "x", "x", "x", "x", "S1.", "S2."] + ["neutral"] * 6],
     ("dev-4", "S1.", "S2.", "neutral")),
    ("mrpc", "train.tsv", [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                           ["1", "702876", "702977", "He said.", "He stated."]],
     ("train-1", "He said.", "He stated.", "1")),
    ("mrpc", "test.tsv", [["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                          ["0", "1089874", "1089925", "A.", "B."]],
     ("test-1", "A.", "B.", "0")),
    ("sst-2", "train.tsv", [["sentence", "label"], ["a gripping movie", "1"]],
     ("train-1", "a gripping movie", None, "1")),
    ("sst-2", "test.tsv", [["index", "sentence"], ["0", "dull"]], ("test-0", "dull", None, "0")),
    ("qnli", "dev.tsv", [["index", "question", "sentence", "label"],
                         ["0", "What?", "This.", "not_entailment"]],
     ("dev-0", "What?", "This.", "not_entailment")),
    ("qqp", "train.tsv", [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                          ["9", "1", "2", "How?", "Why?", "0"], ["10", "3", "broken line"]],
     ("train-9", "How?", "Why?", "0")),  # QQP skips its malformed lines
    ("qqp", "test.tsv", [["id", "question1", "question2"], ["0", "Q1?", "Q2?"]],
     ("test-0", "Q1?", "Q2?", "0")),
    ("rte", "train.tsv", [["index", "sentence1", "sentence2", "label"],
                          ["0", "It rains.", "It is wet.", "entailment"]],
     ("train-0", "It rains.", "It is wet.", "entailment")),
    ("sts-b", "train.tsv", [["index", "genre", "filename", "year", "old_index", "source1",
                             "source2", "sentence1", "sentence2", "score"],
                            ["0", "main", "f", "2012", "1", "n", "n", "A plane.", "A jet.",
                             "4.250"]],
     ("train-0", "A plane.", "A jet.", 4.25)),
    ("sts-b", "test.tsv", [["index"] + ["h"] * 8,
                           ["0", "main", "f", "2012", "1", "n", "n", "X.", "Y."]],
     ("test-0", "X.", "Y.", 0.0)),
    ("wnli", "train.tsv", [["index", "sentence1", "sentence2", "label"],
                           ["0", "I stuck a pin.", "I stuck it.", "1"]],
     ("train-0", "I stuck a pin.", "I stuck it.", "1")),
    # the remaining split files of each task
    ("cola", "dev.tsv", [["gj04", "1", "", "Fine."]], ("dev-0", "Fine.", None, "1")),
    ("mnli_mismatched", "test_mismatched.tsv",
     [["index"] + ["h"] * 9, ["8", "1", "1e", "gov", "x", "x", "x", "x", "T1.", "T2."]],
     ("test-8", "T1.", "T2.", "contradiction")),
    ("mrpc", "dev.tsv", [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                         ["0", "1", "2", "x y", "z"], ["1", "3", "4", "It's \"ok\".", "Fine"]],
     ("dev-2", "It's \"ok\".", "Fine", "1")),  # quotes are text (no CSV quoting)
    ("sst-2", "dev.tsv", [["sentence", "label"], ["flat , dull ", "0"]],
     ("dev-1", "flat , dull ", None, "0")),
    ("qnli", "train.tsv", [["index", "question", "sentence", "label"],
                           ["2", "Who?", "Him.", "entailment"]],
     ("train-2", "Who?", "Him.", "entailment")),
    ("qnli", "test.tsv", [["index", "question", "sentence"], ["4", "Q?", "S."]],
     ("test-4", "Q?", "S.", "entailment")),
    ("qqp", "dev.tsv", [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                        ["11", "5", "6", "A?", "B?", "1"]],
     ("dev-11", "A?", "B?", "1")),
    ("rte", "dev.tsv", [["index", "sentence1", "sentence2", "label"],
                        ["3", "S1.", "S2.", "not_entailment"]],
     ("dev-3", "S1.", "S2.", "not_entailment")),
    ("rte", "test.tsv", [["index", "sentence1", "sentence2"], ["6", "S1.", "S2."]],
     ("test-6", "S1.", "S2.", "entailment")),
    ("sts-b", "dev.tsv", [["index"] + ["h"] * 9,
                          ["1", "main", "f", "2012", "1", "n", "n", "A.", "B.", "0.000"]],
     ("dev-1", "A.", "B.", 0.0)),
    ("wnli", "dev.tsv", [["index", "sentence1", "sentence2", "label"], ["1", "A.", "B.", "0"]],
     ("dev-1", "A.", "B.", "0")),
    ("wnli", "test.tsv", [["index", "sentence1", "sentence2"], ["2", "A.", "B."]],
     ("test-2", "A.", "B.", "0")),
    ("xnli", "xnli.test.tsv",
     [["language", "gold_label", "b1", "b2", "p1", "p2", "sentence1", "sentence2"],
      ["de", "neutral", "x", "x", "x", "x", "Deutsch", "Satz"],
      ["zh", "entailment", "x", "x", "x", "x", "你好", "好"]],
     ("test-2", "你好", "好", "entailment")),
    ("xnli", "multinli/multinli.train.zh.tsv", [["premise", "hypo", "label"],
                                                ["前提", "假设", "contradictory"]],
     ("train-1", "前提", "假设", "contradiction")),
    ("xnli", "xnli.dev.tsv",
     [["language", "gold_label", "b1", "b2", "p1", "p2", "sentence1", "sentence2"],
      ["zh", "neutral", "x", "x", "x", "x", "中文", "句子"],
      ["en", "neutral", "x", "x", "x", "x", "English", "sentence"]],
     ("dev-1", "中文", "句子", "neutral")),
]


@pytest.mark.parametrize("task,filename,rows,expected", GLUE_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in GLUE_CASES])
def test_glue_layouts(tmp_path, task, filename, rows, expected):
    processor = cd.get_processor(task)
    _write(str(tmp_path / filename), rows)
    split = ("train" if "train" in filename else "dev" if "dev" in filename else "test")
    if os.path.basename(filename) not in (os.path.basename(processor.train_file),
                                          os.path.basename(processor.dev_file),
                                          os.path.basename(processor.test_file)):
        pytest.fail(f"{task} does not read {filename}")
    examples = getattr(processor, f"get_{split}_examples")(str(tmp_path))
    last = examples[-1]
    assert (last.guid, last.text_a, last.text_b, last.label) == expected
    if task == "xnli" and split == "dev":
        assert len(examples) == 1  # only the zh row


def test_processor_labels_and_metrics():
    assert cd.get_processor("CoLA").metrics == ("accuracy", "mcc")
    assert cd.get_processor("mrpc").metrics == ("accuracy", "f1")
    assert cd.get_processor("qqp").metrics == ("accuracy", "f1")
    assert cd.get_processor("sts-b").is_regression
    assert cd.get_processor("mnli").get_labels() == ["contradiction", "entailment", "neutral"]
    assert cd.get_processor("rte").get_labels() == ["entailment", "not_entailment"]


def test_bad_task_name_missing_file_bad_label_short_row(tmp_path):
    with pytest.raises(BertError, match=r"^--task_name: unknown task 'bogus'"):
        cd.get_processor("bogus")
    p = cd.get_processor("rte")
    with pytest.raises(BertError, match=r"train\.tsv: data file not found"):
        p.get_train_examples(str(tmp_path))
    _write(str(tmp_path / "train.tsv"), [["index", "s1", "s2", "label"],
                                         ["0", "a", "b", "entailment"],
                                         ["1", "a", "b", "maybe"]])
    with pytest.raises(BertError) as e:
        p.get_train_examples(str(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.endswith("train.tsv: line 3: label 'maybe' is not one of entailment, "
                        "not_entailment (rte)")
    _write(str(tmp_path / "dev.tsv"), [["index", "s1", "s2", "label"], ["0", "a"]])
    with pytest.raises(BertError, match=r"dev\.tsv: line 2 has 2 tab-separated columns, "
                                        r"expected at least 4"):
        p.get_dev_examples(str(tmp_path))
    _write(str(tmp_path / "train.tsv"), [["i"] * 10, ["0"] * 9 + ["high"]])
    with pytest.raises(BertError, match=r"label 'high' is not a number"):
        cd.get_processor("sts-b").get_train_examples(str(tmp_path))


def test_features_exact_ids(ref_tokenizer):
    examples = [cd.InputExample("a", "UNwant\u00e9d,running", "un running", "1"),
                cd.InputExample("b", "unwanted running", None, "0")]
    f = cd.convert_examples_to_features(examples, ["0", "1"], 12, ref_tokenizer)
    # [CLS] un ##want ##ed , runn ##ing [SEP] un runn ##ing [SEP]
    assert f["input_word_ids"][0].tolist() == [1, 7, 4, 5, 10, 8, 9, 2, 7, 8, 9, 2]
    assert f["input_type_ids"][0].tolist() == [0] * 8 + [1] * 4
    assert f["input_mask"][0].tolist() == [1] * 12
    assert f["input_word_ids"][1].tolist() == [1, 7, 4, 5, 8, 9, 2, 0, 0, 0, 0, 0]
    assert f["input_mask"][1].tolist() == [1] * 7 + [0] * 5
    assert f["label_ids"].tolist() == [1, 0]
    assert f["input_word_ids"].dtype == np.int32
    # longest-first truncation: a has 6 pieces, b 3; budget 9 - 3 = 6 -> a 3, b 3
    f = cd.convert_examples_to_features(examples[:1], ["0", "1"], 9, ref_tokenizer)
    assert f["input_word_ids"][0].tolist() == [1, 7, 4, 5, 2, 7, 8, 9, 2]
    with pytest.raises(BertError, match=r"example b: label '0' is not one of 1"):
        cd.convert_examples_to_features(examples, ["1"], 12, ref_tokenizer)


def test_empty_second_segment_packs_like_no_second_segment(ref_tokenizer):
    # The original checks `if tokens_b:`: "" (or text that tokenizes to nothing) gives
    # [CLS] a [SEP] with a budget of max_seq_length - 2, as the exported preprocessor does.
    examples = [cd.InputExample(g, "UNwant\u00e9d,running", b, "0")
                for g, b in (("none", None), ("empty", ""), ("blank", " \x07 "))]
    f = cd.convert_examples_to_features(examples, ["0"], 8, ref_tokenizer)
    for row in range(3):
        assert f["input_word_ids"][row].tolist() == [1, 7, 4, 5, 10, 8, 9, 2]
        assert f["input_type_ids"][row].tolist() == [0] * 8


def test_regression_features(ref_tokenizer):
    f = cd.convert_examples_to_features([cd.InputExample("a", "wa", "wa", 3.5)], [], 8,
                                        ref_tokenizer, is_regression=True)
    assert f["label_ids"].dtype == np.float32 and f["label_ids"].tolist() == [3.5]


def test_tfds_reader_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        p = tfds_data.TfdsProcessor("glue/mrpc")
        assert p.labels == ("not_equivalent", "equivalent")
        assert p.text_keys == ("sentence1", "sentence2")
        assert p.metrics == ("accuracy", "f1")
        train = p.get_train_examples()
        dev = p.get_dev_examples()
        assert len(train) == 6 and len(dev) == 6
        assert all(isinstance(e.text_a, str) and isinstance(e.text_b, str) for e in train)
        assert {e.label for e in train} <= set(p.labels)
        s = tfds_data.TfdsProcessor("glue/stsb")
        assert s.is_regression and s.metrics == ("pearson", "spearman")
        assert all(isinstance(e.label, float) for e in s.get_dev_examples())
        c = tfds_data.TfdsProcessor("glue/cola")
        assert c.text_keys == ("sentence",) and c.metrics == ("accuracy", "mcc")
        assert c.get_test_examples()[0].text_b is None
        m = tfds_data.TfdsProcessor("glue/mnli")
        assert m.splits["dev"] == "validation_matched" and m.text_keys == ("premise",
                                                                          "hypothesis")
    with pytest.raises(BertError, match=r"^--tfds_name: cannot load 'no_such_dataset_xyz'"):
        tfds_data.TfdsProcessor("no_such_dataset_xyz")


# --- NER data -------------------------------------------------------------------------------

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
. . O O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER
"""


def test_read_conll_and_iob_conversion(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(CONLL, encoding="utf-8")
    sents = ner.read_conll(str(path))
    assert [s.words for s in sents] == [["EU", "rejects", "German", "call", "."],
                                        ["Peter", "Blackburn"]]
    assert sents[0].tags == ["I-ORG", "O", "I-MISC", "O", "O"]
    assert sents[1].lines == [9, 10]
    sents = ner.prepare(sents, list(ner.CONLL2003_LABELS), "iob2", str(path))
    assert sents[0].tags == ["B-ORG", "O", "B-MISC", "O", "O"]
    assert sents[1].tags == ["B-PER", "I-PER"]
    assert ner.iob1_to_iob2(["I-PER", "B-PER", "I-PER", "I-LOC"]) == [
        "B-PER", "B-PER", "I-PER", "B-LOC"]
    assert ner.iob2_to_iob1(["B-PER", "B-PER", "I-PER", "B-LOC"]) == [
        "I-PER", "B-PER", "I-PER", "I-LOC"]
    with pytest.raises(BertError, match=r"train\.txt: line 3: label 'B-ORG' is not one of "
                                        r"O, B-PER"):
        ner.prepare(ner.read_conll(str(path)), ["O", "B-PER", "I-PER"], "iob2", str(path))


def test_ner_first_piece_features_and_window_split(tmp_path, ref_tokenizer):
    sents = [ner.Sentence(["unwanted", "running", "wa", ","], ["B-PER", "I-PER", "O", "O"],
                          [1, 2, 3, 4])]
    labels = ["O", "B-PER", "I-PER"]
    arrays, feats = ner.convert_sentences_to_features(sents, labels, 16, ref_tokenizer)
    # [CLS] un ##want ##ed runn ##ing wa , [SEP]
    assert arrays["input_word_ids"][0, :9].tolist() == [1, 7, 4, 5, 8, 9, 6, 10, 2]
    assert arrays["label_ids"][0, :9].tolist() == [0, 1, 0, 0, 2, 0, 0, 0, 0]
    assert arrays["label_weights"][0, :9].tolist() == [0, 1, 0, 0, 1, 0, 1, 1, 0]
    assert feats[0].first_piece == [1, 4, 6, 7]
    # 6 tokens leave room for 4 pieces, split between words: [un ##want ##ed] [runn ##ing wa ,]
    arrays, feats = ner.convert_sentences_to_features(sents, labels, 6, ref_tokenizer)
    assert [(f.first_word, len(f.first_piece)) for f in feats] == [(0, 1), (1, 3)]
    assert arrays["input_word_ids"][1].tolist() == [1, 8, 9, 6, 10, 2]
    logits = np.zeros((2, 6, 3), np.float32)
    logits[0, 1, 1] = 5  # unwanted -> B-PER
    logits[1, 1, 2] = 5  # running -> I-PER
    logits[1, 2, 1] = 5  # "##ing" (not a first piece) is ignored
    assert ner.decode(sents, feats, logits, labels) == [["B-PER", "I-PER", "O", "O"]]
