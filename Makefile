# The README's two commands: `make demo` and `make test`. Both create/reuse .venv.
# (.venv installs the exact pins of constraints.txt; setup.py itself has ranges.)
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all venv clean peers test-peers wheel test-py313 test-py310 docs

$(STAMP): setup.py constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[test,beam,docs]'
	touch $(STAMP)

venv: $(STAMP)

# Two pytest workers (pytest-xdist), one test file each at a time (module fixtures are built
# once): most of a test is single-threaded Python (tracing, saving, process start-up), so two
# cores run two files. TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) tests

test-all: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not peers" tests

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

# Tests marked `peers`: they fail (never skip) when a peer is missing. CI runs them after
# `make test` (.ci/run), so the default suite keeps its peer-free run.
test-peers: $(PEERS_STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m peers tests

# The demo's work folder and exports go under the current directory (demo_out/, export/).
demo: $(STAMP)
	$(BIN)/python -m bert_tf.demo --output_dir demo_out --export_base export

# The documentation site (the guides + an API reference from the docstrings + each command's
# flags), built offline with warnings as errors into site/ (tests/test_docs_site.py does the same).
docs: $(STAMP)
	$(BIN)/python docs/build_site.py --site_dir site

# The wheel needs no venv (a fresh clone has none): .venv's Python when there is one, else
# python3. WHEEL_FLAGS: extra pip flags (the tests build offline: --no-build-isolation --no-index).
WHEEL_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
WHEEL_FLAGS ?=
wheel:
	rm -rf build  # setuptools keeps build/lib: modules deleted since the last build would ship
	rm -f dist/bert_tf-*.whl
	$(WHEEL_PY) -m pip wheel -q --no-deps $(WHEEL_FLAGS) . -w dist/

# The wheel in a fresh Python 3.13 venv with the newest versions setup.py's ranges allow (no
# constraints; downloads from PyPI), then a fast subset of the tests against the installed
# package, run from a directory outside the checkout. (setuptools + wheel: tests/test_install.py
# builds the wheel again, offline.)
PY313 ?= /root/.pyenv/versions/3.13.0/bin/python
VENV313 ?= .venv-py313
PY313_TESTS := tests/test_install.py tests/test_tokenization.py tests/test_text_graph.py \
	tests/test_checkpoints.py tests/test_convert_hf.py tests/test_pretraining_data_signals.py \
	tests/test_pretraining_data_sidecars.py tests/test_quiet.py tests/test_cli_help.py \
	tests/test_serve_path.py tests/test_handoffs.py tests/test_embeddings.py \
	tests/test_vocab_check.py tests/test_convert_encoder_only.py

test-py313:
	rm -rf $(VENV313) dist/bert_tf-*.whl
	$(PY313) -m venv $(VENV313)
	$(VENV313)/bin/pip install -q --upgrade pip
	$(VENV313)/bin/pip wheel -q --no-deps . -w dist/
	$(VENV313)/bin/pip install -q dist/bert_tf-*.whl pytest setuptools wheel
	$(VENV313)/bin/pip list 2>/dev/null | grep -iE \
	  '^(bert.tf|tensorflow[a-z_-]*|keras|numpy|protobuf|ml.dtypes|absl-py|h5py|grpcio|safetensors|pytest)\s'
	cd "$$(mktemp -d)" && $(abspath $(VENV313))/bin/python -c "import bert_tf, sys; \
	  assert '/site-packages/' in bert_tf.__file__, bert_tf.__file__; print('testing', bert_tf.__file__, sys.version.split()[0])" \
	  && $(abspath $(VENV313))/bin/python -m pytest -q $(abspath $(PY313_TESTS)) \
	  && $(abspath $(VENV313))/bin/python -m pytest -q -m "not peers" \
	    $(abspath tests/test_install.py)::test_demo_through_the_installed_wheel

# The same on the oldest Python that setup.py allows.
test-py310:
	$(MAKE) test-py313 PY313=/root/.pyenv/versions/3.10.13/bin/python VENV313=.venv-py310

clean:
	rm -rf demo_out build dist site *.egg-info $(VENV313) .venv-py310
