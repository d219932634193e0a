"""Converters between bert_tf models and other formats (one module per foreign format).

  checkpoints  the original TF1 checkpoints (`bert/encoder/layer_0/...`), our own training
               checkpoints, and Hugging Face safetensors
"""
