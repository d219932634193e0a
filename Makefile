# The README's two commands: `make demo` and `make test`. Both create/reuse .venv.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all venv clean peers test-peers

$(STAMP): setup.py constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[test,beam]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m "not peers" tests

# Peers (Model Garden, tf_keras, TF Hub, keras-hub, HF tokenizers) for interop tests and
# benchmarks. Three steps, exact pins: a one-shot resolve fails (see constraints-peers.txt).
PEERS_STAMP := $(VENV)/.peers-installed
PIPC := $(BIN)/pip install -q -c constraints.txt -c constraints-peers.txt

$(PEERS_STAMP): $(STAMP) constraints-peers.txt
	$(PIPC) keras-hub kagglehub kagglesdk tokenizers
	$(PIPC) --only-binary=:all: --no-binary=promise,seqeval kaggle kagglesdk scipy pandas \
	  opencv-python-headless pycocotools sentencepiece tensorflow-hub tf_keras tf-slim \
	  gin-config sacrebleu seqeval scikit-learn matplotlib oauth2client \
	  google-api-python-client py-cpuinfo Cython ai-edge-litert
	$(BIN)/pip install -q --no-deps tf-models-official==2.20.0 \
	  tensorflow-model-optimization==0.8.1
	touch $(PEERS_STAMP)

peers: $(PEERS_STAMP)

# Tests marked `peers`: they fail (never skip) when a peer is missing.
test-peers: $(PEERS_STAMP)
	$(BIN)/python -m pytest -q -m peers tests

demo: $(STAMP)
	$(BIN)/python -m bert_tf.demo --output_dir demo_out

clean:
	rm -rf demo_out build *.egg-info
