"""Peer pre-training steps for bench/train_step.py: keras-hub in-process, Model Garden in a child.

Both peers do the work of one bert_tf pre-training step on the same TFRecords and global batch
(masked-LM over `masked_lm_positions` with tied embeddings, 2-way NSP, AdamW-type update with
global-norm clipping at 1.0, dropout 0.1) and expose `run(calls) -> (wall, CPU) seconds` for
`calls * iterations` steps after a warm-up call, so train_step.py can interleave their rounds.

  keras-hub     `keras_hub.models.BertBackbone` + `keras_hub.layers.MaskedLMHead` (tied to
                `backbone.token_embedding`) + Dense(2) NSP on `pooled_output`, compiled with
                keras AdamW (global_clipnorm 1.0), `fit(steps_per_execution=iterations)`;
                input: a plain tf.data pipeline (shuffle, batch, vectorised parse_example).
  Model Garden  `BertPretrainerV2(networks.BertEncoder)` with MaskedLMTask's default NSP head
                (ClsHead inner_dim = hidden, tanh) and its `train_step` (losses and metrics),
                `official.modeling.optimization` AdamWeightDecay (global clipnorm 1.0,
                warm-up + linear decay), the BertPretrainDataLoader, and an Orbit
                `create_tf_while_loop_fn` loop in one tf.function (Model Garden's trainer loop).
                Model Garden is tf_keras-based, so it runs in a child process
                (`python bench/peers_train.py model_garden ...`) that answers "run N" on stdin
                with seconds on stdout; tf.keras in this process stays Keras 3.

For bench/time_to_quality.py the child also takes the run's hyperparameters (--seq, --preds,
--lr, --train_steps, --warmup; dropout from the config, the NSP head's too), writes its initial
weights before the first step (--init_out, a `Checkpoint(model=BertPretrainerV2)` that
bert_tf's --init_checkpoint reads) and answers "steps N" (N steps in one loop call) and
"eval PATTERN" (MaskedLMTask.validation_step's masked-LM accuracy over the unpacked records,
batches of --eval_batch, the last partial batch dropped as bert_tf's eval does) and "save
PREFIX" (the current weights, for a parity check of the two evaluations). Its
learning rate is bert_tf's formula (lr * t / W during warm-up, then lr * (1 - t / T)): Model
Garden's own warm-ups ramp to the decay's value at W, lr * (1 - W / T), not to lr.
"""
import argparse
import json
import os
import subprocess
import sys
import time

SEQ, PRED = 128, 20
_TAG = "@@peer "  # protocol lines of the Model Garden child (other stdout lines are ignored)


def clock():
    """(wall seconds, CPU seconds of this process, all threads): CPU time is what a step costs
    even when other jobs share the cores."""
    return (time.perf_counter(), time.process_time())


def since(start):
    now = clock()
    return (now[0] - start[0], now[1] - start[1])


# ---- keras-hub (Keras 3, in-process) ---------------------------------------------------------

class KerasHubFit:
    """keras-hub BERT pre-training under compile/fit; `run(calls)` -> seconds for
    calls * iterations steps (fit's set-up and first execution excluded)."""

    def __init__(self, cfg, files, batch, iterations, jit=False, seed=1):
        import keras
        import keras_hub
        import tensorflow as tf

        keras.utils.set_random_seed(seed)
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=cfg.vocab_size, num_layers=cfg.num_hidden_layers,
            num_heads=cfg.num_attention_heads, hidden_dim=cfg.hidden_size,
            intermediate_dim=cfg.intermediate_size, dropout=cfg.hidden_dropout_prob,
            max_sequence_length=cfg.max_position_embeddings, num_segments=cfg.type_vocab_size)
        inputs = {"token_ids": keras.Input((SEQ,), dtype="int32", name="token_ids"),
                  "segment_ids": keras.Input((SEQ,), dtype="int32", name="segment_ids"),
                  "padding_mask": keras.Input((SEQ,), dtype="int32", name="padding_mask"),
                  "mask_positions": keras.Input((PRED,), dtype="int32", name="mask_positions")}
        out = backbone({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
        mlm = keras_hub.layers.MaskedLMHead(
            vocabulary_size=cfg.vocab_size, token_embedding=backbone.token_embedding,
            intermediate_activation="gelu", name="mlm")(out["sequence_output"],
                                                         inputs["mask_positions"])
        nsp = keras.layers.Dense(2, name="nsp")(out["pooled_output"])
        self.model = keras.Model(inputs, {"mlm": mlm, "nsp": nsp})
        self.model.compile(
            optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01, epsilon=1e-6,
                                             global_clipnorm=1.0),
            loss={"mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  "nsp": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
            steps_per_execution=iterations, jit_compile=bool(jit))
        spec = {k: tf.io.FixedLenFeature([SEQ], tf.int64)
                for k in ("input_ids", "input_mask", "segment_ids")}
        spec.update({k: tf.io.FixedLenFeature([PRED], tf.int64)
                     for k in ("masked_lm_positions", "masked_lm_ids")})
        spec["masked_lm_weights"] = tf.io.FixedLenFeature([PRED], tf.float32)
        spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)

        def to_fit(records):
            f = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
                 for k, v in tf.io.parse_example(records, spec).items()}
            x = {"token_ids": f["input_ids"], "segment_ids": f["segment_ids"],
                 "padding_mask": f["input_mask"], "mask_positions": f["masked_lm_positions"]}
            y = {"mlm": f["masked_lm_ids"], "nsp": f["next_sentence_labels"][:, 0]}
            w = {"mlm": f["masked_lm_weights"], "nsp": tf.ones([tf.shape(records)[0]])}
            return x, y, w

        self.ds = (tf.data.Dataset.list_files(files, shuffle=True, seed=seed)
                   .interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
                   .shuffle(1000, seed=seed).repeat().batch(batch, drop_remainder=True)
                   .map(to_fit, num_parallel_calls=tf.data.AUTOTUNE)
                   .prefetch(tf.data.AUTOTUNE))
        self.iterations = iterations
        self.params = self.model.count_params()
        self.run(1)  # trace + warm up

    def run(self, calls):
        import keras
        import numpy as np

        times = []
        callback = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs: times.append(clock()))
        hist = self.model.fit(self.ds, epochs=1, steps_per_epoch=(calls + 1) * self.iterations,
                              verbose=0, callbacks=[callback])
        assert np.isfinite(hist.history["loss"][-1])
        return times[-1][0] - times[0][0], times[-1][1] - times[0][1]


# ---- Model Garden (tf_keras, child process) --------------------------------------------------

def allocator_env(bfc):
    """This process's environment for a child whose TF CPU allocator is BFC (bert_tf's
    commands' setting, bert_tf/tf_env.py) or TF's default, malloc (bfc False)."""
    from bert_tf import tf_env
    env = {k: v for k, v in os.environ.items() if k not in tf_env.ALLOCATOR}
    if bfc:
        env.update({k: v for k, v in tf_env.defaults(commands=True).items()
                    if k in tf_env.ALLOCATOR})
    else:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "false"
    return env


ENVS = ("shipped", "bfc", "bert_tf")  # a Model Garden child's environment (model_garden_env)


def model_garden_env(kind):
    """A Model Garden child's environment. kind: "shipped", as its users run it (TF's default
    allocator, TF's own oneDNN choice for this CPU); "bfc", bert_tf's allocator alone; "bert_tf",
    this process's (bert_tf's commands': BFC and its TF_ENABLE_ONEDNN_OPTS, bert_tf/tf_env.py)."""
    from bert_tf import tf_env
    if kind not in ENVS:
        raise ValueError(f"Model Garden child environment {kind!r}: expected one of {ENVS}")
    env = allocator_env(kind != "shipped")  # this process's TF_ENABLE_ONEDNN_OPTS, if any
    if kind != "bert_tf":
        env.pop(tf_env.ONEDNN, None)  # TF's own choice for this CPU
    env.pop("TF_USE_LEGACY_KERAS", None)  # tf_keras is imported explicitly
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def onednn_in_use():
    """Whether this process's TF runs oneDNN's CPU kernels (TF's own answer; a private API, as
    TF has no public one). Imports TensorFlow."""
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())


def allocators_line():
    """The header line saying which allocator and oneDNN setting each side of a bench runs with."""
    from bert_tf import tf_env
    return ("bert_tf (this process): "
            + ", ".join(f"{k}={os.environ.get(k, '(unset)')}"
                        for k in tf_env.ALLOCATOR + (tf_env.ONEDNN,))
            + f" (oneDNN on: {onednn_in_use()}); Model Garden: TF_CPU_ALLOCATOR_USE_BFC=false, "
            f"{tf_env.ONEDNN} unset (TF's choice for this CPU); model_garden_bfc: BFC, "
            f"{tf_env.ONEDNN} unset; model_garden_env: this process's")


class TaggedChild:
    """Parent side of a child process that answers lines on stdin with `tag` + JSON lines on
    stdout (other lines pass by). Its first reply (`self.ready`) says whether it got the BFC
    allocator it was started with (`bfc`)."""

    def __init__(self, cmd, bfc, tag, env=None):
        env = allocator_env(bfc) if env is None else env
        self.tag, self.bfc, self.name = tag, bfc, cmd[2]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.ready = self._reply()
        if self.ready["bfc"] != bfc:
            raise RuntimeError(f"{self.name} child: BFC allocator {self.ready['bfc']}, "
                               f"asked for {bfc}")

    def _reply(self):
        for line in self.proc.stdout:
            if line.startswith(self.tag):
                return json.loads(line[len(self.tag):])
        raise RuntimeError(f"{self.name} child exited ({self.proc.wait()}); see stderr above")

    def ask(self, line):
        """Send one command line; the child's reply (a dict)."""
        self.proc.stdin.write(f"{line}\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


class ModelGarden(TaggedChild):
    """Parent side: starts the child, `run(calls)` -> the child's seconds; `close()`.
    env: one of ENVS (`model_garden_env`); the child reports the allocator and oneDNN setting
    it got, and a "bert_tf" child must have this process's."""

    def __init__(self, config_file, files, batch, iterations, jit=False, seed=1, extra=(),
                 env="shipped"):
        cmd = [sys.executable, os.path.abspath(__file__), "model_garden", "--config", config_file,
               "--files", files, "--batch", str(batch), "--iterations", str(iterations),
               "--seed", str(seed)] + (["--jit"] if jit else []) + list(extra)
        super().__init__(cmd, env != "shipped", _TAG, model_garden_env(env))
        mine = onednn_in_use() if env == "bert_tf" else None
        if mine is not None and self.ready["onednn"] != mine:
            raise RuntimeError(f"{self.name} child: oneDNN on {self.ready['onednn']}, this "
                               f"process {mine}")
        self.params = int(self.ready["params"])  # after the child's warm-up call

    def run(self, calls):
        reply = self.ask(calls)
        return (reply["seconds"], reply["cpu_seconds"])


def _model_garden_child(args):
    import numpy as np
    import tensorflow as tf
    import tf_keras
    from official.modeling import optimization, tf_utils
    from official.nlp.configs import bert as bert_cfg
    from official.nlp.data import pretrain_dataloader
    from official.nlp.modeling import layers, models, networks
    from official.nlp.tasks import masked_lm
    from orbit.utils import create_tf_while_loop_fn

    with open(args.config) as f:
        c = json.load(f)
    # Python's, NumPy's, TF's and tf_keras's seed generator: its unseeded initializers draw
    # seeds from that generator, else from Python's random (tf.random.set_seed alone left
    # the initial weights different in every run of the same seed).
    tf_keras.utils.set_random_seed(args.seed)
    encoder = networks.BertEncoder(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
        num_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
        max_sequence_length=c["max_position_embeddings"], type_vocab_size=c["type_vocab_size"],
        inner_dim=c["intermediate_size"],
        inner_activation=tf_utils.get_activation(c["hidden_act"]),
        output_dropout=c["hidden_dropout_prob"],
        attention_dropout=c["attention_probs_dropout_prob"],
        initializer=tf_keras.initializers.TruncatedNormal(stddev=c["initializer_range"]))
    # MaskedLMTask's default NSP head (inner_dim = hidden, tanh), the config's dropout.
    cls_head = dict(inner_dim=c["hidden_size"], num_classes=2,
                    dropout_rate=c["hidden_dropout_prob"], name="next_sentence")
    model = models.BertPretrainerV2(
        encoder_network=encoder, classification_heads=[layers.ClassificationHead(**cls_head)],
        mlm_activation=tf_utils.get_activation(c["hidden_act"]),
        mlm_initializer=tf_keras.initializers.TruncatedNormal(stddev=c["initializer_range"]))
    if args.init_out:  # the initial weights, before any step, for the other arms to start from
        ids = tf.ones((1, 4), tf.int32)
        model(dict(input_word_ids=ids, input_mask=ids, input_type_ids=tf.zeros_like(ids),
                   masked_lm_positions=tf.zeros((1, 1), tf.int32)))
        # bert_tf's NSP runs through the encoder's pooler, Model Garden's through its head's
        # dense (the pooler is computed, unused): the same start needs the same weights there.
        encoder.pooler_layer.set_weights(model.classification_heads[0].dense.get_weights())
        tf.train.Checkpoint(model=model).write(args.init_out)

    def data_config(pattern, training):
        return pretrain_dataloader.BertPretrainDataConfig(
            input_path=pattern, global_batch_size=args.batch if training else args.eval_batch,
            is_training=training, seq_length=args.seq, max_predictions_per_seq=args.preds,
            seed=args.seed, shuffle_buffer_size=1000, drop_remainder=True)

    data_cfg = data_config(args.files, True)
    task = masked_lm.MaskedLMTask(masked_lm.MaskedLMConfig(
        train_data=data_cfg,
        model=bert_cfg.PretrainerConfig(cls_heads=[bert_cfg.ClsHeadConfig(**cls_head)])))
    metrics = task.build_metrics()

    class WarmupLinear(tf_keras.optimizers.schedules.LearningRateSchedule):
        """bert_tf's WarmupLinearDecay (see the module docstring)."""

        def __call__(self, step):
            t = tf.cast(step, tf.float32)
            decay = args.lr * (1.0 - tf.minimum(t, args.train_steps) / args.train_steps)
            return tf.where(t < args.warmup, args.lr * t / max(args.warmup, 1), decay)

    opt_cfg = optimization.OptimizationConfig({
        "optimizer": {"type": "adamw", "adamw": {
            "weight_decay_rate": 0.01, "epsilon": 1e-6, "global_clipnorm": 1.0,
            "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}},
        "learning_rate": {"type": "constant"}})  # replaced by WarmupLinear
    optimizer = optimization.OptimizerFactory(opt_cfg).build_optimizer(WarmupLinear())
    strategy = tf.distribute.get_strategy()
    iterator = iter(pretrain_dataloader.BertPretrainDataLoader(data_cfg).load())
    train_loss = tf_keras.metrics.Mean("training_loss")

    # --jit: as Model Garden's base_trainer compiles it (task.train_step only; it does so only
    # when runtime.enable_xla and num_gpus > 0, so its users never get XLA on a CPU).
    train_step = (tf.function(task.train_step, jit_compile=True) if args.jit
                  else task.train_step)

    def replica_fn(inputs):
        logs = train_step(inputs, model=model, optimizer=optimizer, metrics=metrics)
        train_loss.update_state(logs[task.loss])

    def step_fn(iterator):  # Model Garden's base_trainer.Trainer.train_step
        strategy.run(replica_fn, args=(next(iterator),))

    loop = tf.function(create_tf_while_loop_fn(step_fn))

    def run(calls, steps=args.iterations):
        start = clock()
        for _ in range(calls):
            loop(iterator, tf.constant(steps, tf.int32))
            loss = float(train_loss.result())  # the trainer's train_loop_end
        assert np.isfinite(loss)
        return since(start) + (loss,)

    eval_metrics = task.build_metrics()
    eval_step = tf.function(lambda inputs: task.validation_step(inputs, model, eval_metrics))

    def evaluate(pattern):
        for m in eval_metrics:
            m.reset_states()
        for batch in pretrain_dataloader.BertPretrainDataLoader(
                data_config(pattern, False)).load():
            eval_step(batch)
        return {m.name: float(m.result()) for m in eval_metrics}

    first = run(1)[0]  # trace + warm up (its steps train)
    from bert_tf import tf_env
    print(_TAG + json.dumps({"params": model.count_params(), "bfc": tf_env.bfc_in_use(),
                             "onednn": onednn_in_use(), "first_call_seconds": first}),
          flush=True)
    for line in sys.stdin:
        cmd, _, rest = line.strip().partition(" ")
        if cmd == "eval":
            print(_TAG + json.dumps(evaluate(rest)), flush=True)
        elif cmd == "save":  # the trained weights, for the eval parity check
            print(_TAG + json.dumps({"path": tf.train.Checkpoint(model=model).write(rest)}),
                  flush=True)
        elif cmd:
            wall, cpu, loss = run(1, int(rest)) if cmd == "steps" else run(int(cmd))
            print(_TAG + json.dumps({"seconds": wall, "cpu_seconds": cpu, "loss": loss}),
                  flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("peer", choices=["model_garden"])
    ap.add_argument("--config", required=True, help="bert_config.json")
    ap.add_argument("--files", required=True, help="TFRecord glob")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--iterations", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jit", action="store_true")
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--preds", type=int, default=PRED, help="max_predictions_per_seq")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--train_steps", type=int, default=10**6, help="steps of the lr decay")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval_batch", type=int, default=64)
    ap.add_argument("--init_out", help="write the initial weights to this checkpoint prefix")
    _model_garden_child(ap.parse_args())
