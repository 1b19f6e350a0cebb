#!/usr/bin/env bash
# The reference workloads on one CUDA GPU, in one script: `bench` on the CNN and the transformer
# (samples/s, peak memory, every tip and preset, the pick), then the transformer's MFU measured with
# Lightning's own tools (`measure_flops` for the FLOPs of one training batch, `ThroughputMonitor`
# for FLOPs/s and MFU) in fp32 and bf16-mixed.
#
#   bash benchmarks/gpu_bench.sh                 # from the repository root; writes benchmarks/results/gpu/
#   BUDGET=240 STEPS=30 bash benchmarks/gpu_bench.sh
#
# Each bench is capped by --budget (seconds); the MFU part takes about a minute. Only ratios carry
# over between machines; the MFU is absolute (FLOPs counted by torch.utils.flop_counter, peak FLOPs
# of the GPU from Lightning's table).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-benchmarks/results/gpu}
BUDGET=${BUDGET:-240}
STEPS=${STEPS:-30}
DEVICE=${DEVICE:-cuda}      # DEVICE=cpu runs the same script on a CPU (a smoke test: no MFU there)
mkdir -p "$OUT"

$PY - <<'EOF'
import torch, lightning
print("torch", torch.__version__, "lightning", lightning.__version__,
      "cuda", torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
EOF

for workload in cnn transformer; do
  $PY -m lightning_speedups bench --config "benchmarks/$workload.yaml" --device "$DEVICE" \
      --steps "$STEPS" --warmup 5 --repeats 3 --budget "$BUDGET" --compile-cache shared --no-progress \
      --json "$OUT/$workload.json" --markdown "$OUT/$workload.md" --plot "$OUT/$workload.png" \
      --write-preset "$OUT/${workload}_fastest.yaml" | tee "$OUT/$workload.txt"
done

DEVICE="$DEVICE" OUT="$OUT" STEPS="$STEPS" $PY - <<'EOF'
"""MFU of the transformer workload via Lightning's measure_flops + ThroughputMonitor."""
import csv, glob, json, os, sys

import torch
import lightning.pytorch as pl
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.loggers import CSVLogger

sys.path.insert(0, os.getcwd())
from benchmarks.transformer_workload import CharGPT, PythonDocsDataModule  # noqa: E402

device, out, steps = os.environ["DEVICE"], os.environ["OUT"], int(os.environ["STEPS"])
hp = dict(d_model=128, heads=4, ff=512, layers=4, seq=128)
batch, seq = 16, hp["seq"]  # as benchmarks/transformer.yaml

with torch.device("meta"):
    meta_model = CharGPT(**hp)
    tokens = torch.randint(0, 128, (batch, seq), device="meta")
    loss_fn = lambda y: y.float().sum()  # noqa: E731 - forward + backward FLOPs of one batch
    flops_per_batch = measure_flops(meta_model, lambda: meta_model(tokens), loss_fn)

results = {"flops_per_batch": flops_per_batch, "device": device}
for precision in ("32-true", "bf16-mixed"):
    pl.seed_everything(0, verbose=False)
    model = CharGPT(**hp)
    model.flops_per_batch = flops_per_batch
    logger = CSVLogger(out, name=f"mfu-{precision}")
    monitor = ThroughputMonitor(batch_size_fn=lambda b: b.size(0), length_fn=lambda b: b.size(1) - 1, window_size=10)
    trainer = pl.Trainer(accelerator=device, devices=1, precision=precision, max_steps=steps + 10,
                         logger=logger, log_every_n_steps=1, callbacks=[monitor], enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(model, datamodule=PythonDocsDataModule(batch_size=batch, seq=seq))
    rows = list(csv.DictReader(open(glob.glob(os.path.join(logger.log_dir, "metrics.csv"))[0])))
    last = {}
    for row in rows:
        last.update({k: v for k, v in row.items() if v not in ("", None)})
    figures = {k: float(v) for k, v in last.items() if any(s in k for s in ("mfu", "per_sec"))}
    if device == "cuda":
        figures["peak_allocated_MiB"] = torch.cuda.max_memory_allocated() / 2**20
    results[precision] = figures
    print(precision, json.dumps(figures, indent=1))
with open(os.path.join(out, "transformer_mfu.json"), "w") as fh:
    json.dump(results, fh, indent=1)
print("MFU figures:", os.path.join(out, "transformer_mfu.json"))
EOF
