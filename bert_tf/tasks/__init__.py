"""Fine-tuning tasks and feature extraction (the original release's run_* scripts).

  classifier_data   GLUE/XNLI TSV processors, TFDS reader, sentence(-pair) features
  classifier        run_classifier: train / eval (eval_results.txt) / predict (test_results.tsv)
  squad             SQuAD v1.1/v2.0 reading, doc-span windows, n-best decoding, run_squad
  squad_metrics     EM/F1 as the official SQuAD v1.1/v2.0 evaluation scripts
  ner               CoNLL-2003 tagging (first-piece labels, IOB1/IOB2), run_ner
  metrics           accuracy, F1, Matthews corr., Pearson/Spearman, entity-level P/R/F1
  features          extract_features (JSON lines like the original)
  finetune          RunConfig, losses, FinetuneTask, train on the one trainer
  prediction        predict over feature arrays (cut to real length, padded back)
  squad_decoding    SQuAD n-best spans, mapped back to the context's exact text
  tfds_data         any TFDS text-classification set as sentence(-pair) examples
  cli               the fine-tuning scripts' main(): flags -> config -> run -> report

Modules import TensorFlow lazily where they can, so flag errors come back fast.
"""
