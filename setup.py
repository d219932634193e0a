"""bert_tf: Google's original BERT workflow on TensorFlow 2.20 / Keras 3."""
from setuptools import find_packages, setup

# Compatible ranges of what bert_tf imports; constraints.txt pins the exact, tested set that
# `make` and CI install (`pip install -c constraints.txt`). tensorflow-text's ops are built
# against one TensorFlow minor, so the two move together. Lowest tested: keras 3.12.0,
# numpy 2.3.5, tensorflow-datasets 4.9.9 (Python 3.11); keras 3.12.4, numpy 2.2.6 (3.10,
# `make test-py310`).
INSTALL_REQUIRES = [
    "tensorflow>=2.20,<2.21",
    "tensorflow-text>=2.20,<2.21",
    "keras>=3.12,<4",
    "numpy>=1.26,<3",
    "absl-py>=1.0",
    "tensorflow-datasets>=4.9.9,<5",
    "tqdm>=4.64",
    "safetensors>=0.4",
    "google-crc32c>=1.5",  # TFRecord framing of create_pretraining_data (no TF import)
    # Exports write TF Serving warm-up requests (PredictRequest protos). Pure Python.
    "tensorflow-serving-api>=2.20,<2.21",
]

EXTRAS = {
    "test": ["pytest>=8", "pytest-xdist>=3"],
    # Peers, imported lazily by the converters that need them. `pip install
    # "bert_tf[keras-hub]"` resolves in one command. tf-models-official cannot (its
    # tensorflow-model-optimization needs absl-py~=1.2 or numpy<2): install the model-garden
    # extra, then `pip install --no-deps tf-models-official==2.20.0
    # tensorflow-model-optimization==0.8.1` (the hint bert_tf's error gives).
    "keras-hub": ["keras-hub>=0.32", "kagglehub>=1.0", "kagglesdk>=0.1.28"],
    "model-garden": ["tf_keras>=2.20,<2.21", "tensorflow-hub>=0.16", "gin-config>=0.5",
                     "pyyaml>=6", "sentencepiece>=0.2", "tf-slim>=1.1", "scipy>=1.13",
                     "pandas>=2", "seqeval>=1.2", "sacrebleu>=2", "immutabledict>=4",
                     "kaggle>=1.6,<2.2.5", "opencv-python-headless>=4", "pycocotools>=2",
                     "py-cpuinfo>=9", "psutil>=5"],
    # Everything the interop tests and benchmarks use (with `make peers` in the checkout).
    "peers": ["keras-hub>=0.32", "tokenizers>=0.23", "tensorflow-hub>=0.16",
              "tf_keras>=2.20,<2.21", "kagglehub>=1.0", "kagglesdk>=0.1.28"],
    "beam": ["apache-beam>=2.77"],
    # `make docs`: the documentation site (guides + API reference from the docstrings; code
    # highlighted by Pygments through pymdown-extensions at build time).
    "docs": ["mkdocs>=1.6,<2", "mkdocstrings>=1.0", "mkdocstrings-python>=2.0",
             "griffelib>=2.4", "pymdown-extensions>=13.1", "pygments>=2.21"],
}

# The commands a pip install puts on PATH; bert_tf.commands.COMMANDS lists the same ones.
CONSOLE_SCRIPTS = [
    "bert-create-pretraining-data=bert_tf.commands.create_pretraining_data:main",
    "bert-pack-pretraining-data=bert_tf.commands.pack_pretraining_data:main",
    "bert-run-pretraining=bert_tf.commands.run_pretraining:main",
    "bert-run-classifier=bert_tf.commands.run_classifier:main",
    "bert-run-squad=bert_tf.commands.run_squad:main",
    "bert-run-ner=bert_tf.commands.run_ner:main",
    "bert-extract-features=bert_tf.commands.extract_features:main",
    "bert-export-savedmodel=bert_tf.commands.export_savedmodel:main",
    "bert-convert=bert_tf.commands.convert:main",
    "bert-demo=bert_tf.demo:main",
]

setup(
    name="bert_tf",
    version="0.1.0",
    description="Original BERT (pre-training data, pre-training, export, fine-tuning) on TF 2 / Keras 3",
    packages=find_packages(include=["bert_tf", "bert_tf.*"]),
    # The model configs, the demo's corpus and the guides (the checkout's configs/,
    # tfrecords/sample_corpus.txt, docs/API.md, export/README.md and tfrecords/README.md are
    # symlinks to them).
    package_data={"bert_tf.resources": ["configs/*.json", "sample_corpus.txt", "docs/*.md"]},
    python_requires=">=3.10,<3.14",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
)
