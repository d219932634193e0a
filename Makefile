# The README's two commands: `make demo` and `make test`. Both create/reuse .venv.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all venv clean

$(STAMP): setup.py constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[test,beam]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m "" tests

demo: $(STAMP)
	$(BIN)/python -m bert_tf.demo --output_dir demo_out

clean:
	rm -rf demo_out build *.egg-info
