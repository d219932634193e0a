"""bf16 vs float32 speed of a BERT-base pre-training step on hardware that has bf16 units,
measured with PyTorch + transformers where TensorFlow cannot run (the project's GPU machine
has no TensorFlow): evidence for what `--mixed_precision=auto` assumes (bf16 pays on CPUs with
avx512_bf16 / AMX and on GPUs of compute capability >= 8.0). These are PyTorch's numbers, not
bert_tf's: the same model shape and step, another framework's kernels.

Per device (the CPU at 2 threads and at all cores; the GPU if there is one): a 2048x768 by
768x3072 matmul in GFLOP/s, and steps/s of transformers' BertForPreTraining (bert-base: 12
layers, 768 hidden, vocab 30522, random weights), seq 128, masked-LM on 20 positions + NSP,
AdamW (eps 1e-6, weight decay 0.01), global-norm clipping 1.0, in float32 and under
`torch.autocast(bfloat16)` (weights and optimizer float32, as Keras' mixed_bfloat16); one
fixed batch (losses show it runs, not how it learns). On the GPU float32 runs twice: strict,
and with TF32 matmuls (TensorFlow's default on Ampere and later, so what a bert_tf float32 run
gets there); bf16 runs with TF32 on, as it would under TensorFlow.

  python3 bench/bf16_speed_torch.py --json out.json
"""
import argparse
import json
import os
import time

import torch
from transformers import BertConfig, BertForPreTraining

SEQ, PRED = 128, 20


def cpu_facts():
    """(model name, the bf16 / AMX / avx512f flags) of this CPU from /proc/cpuinfo."""
    model, flags = "", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return model, sorted(f for f in flags if "bf16" in f or f.startswith("amx") or f == "avx512f")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_gflops(device, dtype, reps=20, m=2048, k=768, n=3072):
    """GFLOP/s of an m x k by k x n product (mean of `reps` after 3 warm-ups).

    Args:
        device: torch.device.
        dtype: torch dtype of both operands.
        reps: timed products.
        m: rows of the left operand.
        k: the shared dimension.
        n: columns of the right operand.
    """
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * m * k * n * reps / (time.perf_counter() - start) / 1e9


def step_rate(device, bf16, batch, steps, warm=3):
    """(steps/s, last loss) of BertForPreTraining's training step on random data.

    Args:
        device: torch.device.
        bf16: compute under torch.autocast(bfloat16); weights stay float32.
        batch: sequences a step.
        steps: timed steps (after `warm` untimed ones).
        warm: untimed first steps.
    """
    torch.manual_seed(0)
    cfg = BertConfig()  # bert-base's defaults
    model = BertForPreTraining(cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
    ids = torch.randint(5, cfg.vocab_size, (batch, SEQ), device=device)
    labels = torch.full_like(ids, -100)
    pos = torch.stack([torch.randperm(SEQ - 2, device=device)[:PRED] + 1 for _ in range(batch)])
    labels.scatter_(1, pos, ids.gather(1, pos))
    ids = ids.scatter(1, pos, torch.full_like(pos, 103))  # [MASK] where the labels are
    segments = (torch.arange(SEQ, device=device) > SEQ // 2).long().expand(batch, SEQ)
    nsp = torch.randint(0, 2, (batch,), device=device)

    def one():
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=ids, token_type_ids=segments, labels=labels,
                        next_sentence_label=nsp)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss

    for _ in range(warm):
        one()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        loss = one()
    sync(device)
    return steps / (time.perf_counter() - start), float(loss.detach())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu_threads", default=f"2,{os.cpu_count()}")
    ap.add_argument("--cpu_batch", type=int, default=8)
    ap.add_argument("--cpu_steps", type=int, default=4)
    ap.add_argument("--gpu_batch", type=int, default=64)
    ap.add_argument("--gpu_steps", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    model, flags = cpu_facts()
    facts = {"torch": torch.__version__, "cpu": model, "cpu_flags": flags,
             "cores": os.cpu_count(), "rows": []}
    print(f"# torch {torch.__version__}; CPU {model} ({os.cpu_count()} cores), flags {flags}")

    def row(name, batch, rates):
        (fp32, _), (bf16, _) = rates[0], rates[-1]
        r = {"name": name, "batch": batch, "steps_per_s": {}, "loss": {}}
        labels = ["fp32", "bf16"] if len(rates) == 2 else ["fp32", "fp32_tf32", "bf16"]
        for label, (rate, loss) in zip(labels, rates):
            r["steps_per_s"][label], r["loss"][label] = rate, loss
        r["bf16_over_fp32"] = bf16 / fp32
        if len(rates) == 3:
            r["bf16_over_tf32"] = bf16 / rates[1][0]
        facts["rows"].append(r)
        print(f"{name}: " + ", ".join(f"{k} {v:.3f} steps/s" for k, v in r["steps_per_s"].items())
              + f"; bf16/fp32 {r['bf16_over_fp32']:.2f}x"
              + (f", bf16/tf32 {r['bf16_over_tf32']:.2f}x" if "bf16_over_tf32" in r else ""),
              flush=True)

    cpu = torch.device("cpu")
    for threads in [int(t) for t in args.cpu_threads.split(",") if t]:  # "": GPU only
        torch.set_num_threads(threads)
        mm = {str(d): matmul_gflops(cpu, d) for d in (torch.float32, torch.bfloat16)}
        facts[f"cpu_{threads}_matmul_gflops"] = mm
        print(f"cpu {threads} threads matmul GFLOP/s: {mm}", flush=True)
        row(f"cpu {threads} threads, bert-base", args.cpu_batch,
            [step_rate(cpu, bf16, args.cpu_batch, args.cpu_steps) for bf16 in (False, True)])
    if torch.cuda.is_available():
        gpu = torch.device("cuda")
        name, cc = torch.cuda.get_device_name(), torch.cuda.get_device_capability()
        facts.update(gpu=name, compute_capability=list(cc))
        torch.backends.cuda.matmul.allow_tf32 = False
        mm = {str(d): matmul_gflops(gpu, d, reps=200) for d in (torch.float32, torch.bfloat16)}
        fp32 = step_rate(gpu, False, args.gpu_batch, args.gpu_steps)
        torch.backends.cuda.matmul.allow_tf32 = True
        mm["tf32"] = matmul_gflops(gpu, torch.float32, reps=200)
        tf32 = step_rate(gpu, False, args.gpu_batch, args.gpu_steps)
        # bf16 with TF32 left on: TensorFlow's default, so what a bert_tf bf16 run would have
        facts["gpu_matmul_gflops"] = mm
        print(f"gpu {name} (compute capability {cc[0]}.{cc[1]}) matmul GFLOP/s: {mm}")
        row(f"gpu {name}, bert-base", args.gpu_batch,
            [fp32, tf32, step_rate(gpu, True, args.gpu_batch, args.gpu_steps)])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(facts, f, indent=1)


if __name__ == "__main__":
    main()
