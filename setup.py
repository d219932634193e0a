"""bert_tf: Google's original BERT workflow on TensorFlow 2.20 / Keras 3."""
from setuptools import find_packages, setup

# Exact pins: an unpinned resolve of the TF stack fails. constraints.txt pins the transitive set.
INSTALL_REQUIRES = [
    "tensorflow==2.20.0",
    "tensorflow-text==2.20.1",
    "keras==3.15.1",
    "tensorflow-datasets==4.9.10",
    "tqdm==4.70.1",
    "safetensors==0.8.0",
    "numpy==2.4.6",
    "google-crc32c==1.9.0",  # TFRecord framing of create_pretraining_data (no TF import)
]

EXTRAS = {
    "test": ["pytest==9.2.0", "tensorflow-serving-api==2.20.0"],
    # Interop tests/benchmarks only, never imported by bert_tf at module level. pip cannot
    # resolve tf-models-official with the pinned stack in one go: use `make peers`, which
    # installs it with --no-deps after the rest (constraints-peers.txt).
    "peers": ["keras-hub==0.32.0", "tokenizers==0.23.3", "tensorflow-hub==0.16.1",
              "tf_keras==2.20.1", "kagglehub==1.0.2", "kagglesdk==0.1.28"],
    "beam": ["apache-beam==2.77.0"],
}

setup(
    name="bert_tf",
    version="0.1.0",
    description="Original BERT (pre-training data, pre-training, export, fine-tuning) on TF 2 / Keras 3",
    packages=find_packages(include=["bert_tf", "bert_tf.*"]),
    python_requires=">=3.11,<3.12",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
)
