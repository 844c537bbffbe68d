#!/usr/bin/env bash
# The first GPU run, as one command (about 6-8 minutes on one H200):
#
#   bash benchmarks/gpu_smoke.sh            # on a CUDA machine
#   bash benchmarks/gpu_smoke.sh --tiny     # tiny sizes on the CPU: checks the script itself
#
# Steps, each with its own time limit, each reported as ok / FAILED (the script goes on):
#   1. an end-to-end short run of recipes/stylegan2.toml (gankit run, bf16 on CUDA);
#   2. SIGTERM to a run mid-training (exit 143, checkpoints/latest.pt), then --resume to its end;
#   3. the sync census and the engine timing (img/s, host syncs, GPU-busy fraction), peak memory
#      at 1024 px (config F) against batch, torch.compile graphs per phase: benchmarks/gpu_bench.py;
#   4. torch.cuda.set_sync_debug_mode("warn") over a few iterations: CUDA's own count of
#      synchronising calls (CUDA only).
# Everything goes to benchmarks/gpu_smoke-output.txt (and the terminal). Run from the repository
# root with gankit installed (pip install -e .).
set -u
cd "$(dirname "$0")/.."
OUT=benchmarks/gpu_smoke-output.txt
TINY=0
[ "${1:-}" = "--tiny" ] && TINY=1
PY=${PYTHON:-python}
if [ "$TINY" = 0 ] && ! $PY -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_smoke.sh: no CUDA device here; on the CPU run \`bash benchmarks/gpu_smoke.sh --tiny\` (it checks the script)" >&2
  exit 2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gankit-smoke.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILED=()

exec > >(tee "$OUT") 2>&1
echo "# gankit GPU smoke test, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
$PY - <<'EOF'
import torch
print("torch", torch.__version__, "| CUDA:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
EOF
if [ "$TINY" = 1 ]; then
  echo "mode: --tiny (CPU, tiny sizes: the figures measure nothing; CUDA-only steps are skipped)"
  SETS=(--set run.device=cpu --set data.resolution=8 --set growth.batch_size=8 --set architecture.channel_base=128
        --set architecture.channel_max=16 --set architecture.mapping_layers=2 --set metric=[] --set run.tick_kimg=0.016)
  KIMG=0.048; TERM_KIMG=0.4; LIMIT=300
else
  SETS=(--set run.device=cuda --set metric=[] --set run.tick_kimg=2)
  KIMG=8; TERM_KIMG=8; LIMIT=150
fi

step() {  # step NAME SECONDS COMMAND...: run with a time limit, report ok / FAILED
  local name=$1 limit=$2; shift 2
  echo; echo "## $name"; local t0=$SECONDS
  if declare -F "$1" > /dev/null; then "$@"; else timeout "$limit" "$@"; fi; local rc=$?  # a function limits its own commands
  if [ $rc -eq 0 ]; then echo "-> $name: ok ($((SECONDS - t0)) s)"; else echo "-> $name: FAILED (exit $rc, $((SECONDS - t0)) s)"; FAILED+=("$name"); fi
}

step "1. end-to-end run" "$LIMIT" gankit run recipes/stylegan2.toml --out "$WORK/e2e" "${SETS[@]}" \
  --set run.total_kimg=$KIMG

sigterm_resume() {
  timeout "$LIMIT" gankit run recipes/stylegan2.toml --out "$WORK/term" "${SETS[@]}" --set run.total_kimg=$TERM_KIMG \
    --set run.snapshot_ticks=1 &
  local pid=$!
  # wait for the first checkpoint (a tick), then SIGTERM mid-training
  for _ in $(seq 1 600); do [ -f "$WORK/term/checkpoints/latest.pt" ] && break; sleep 0.2; done
  kill -TERM $pid; wait $pid; local rc=$?
  echo "exit code after SIGTERM: $rc (expected 143)"
  [ $rc -eq 143 ] || return 1
  timeout "$LIMIT" gankit run --resume "$WORK/term" || return 1
  $PY - "$WORK/term" "$TERM_KIMG" <<'EOF'
import sys
from gan_kit.runs import checkpoint
state = checkpoint.load(sys.argv[1] + "/checkpoints/latest.pt")
print("resumed run ended at", state["cur_nimg"] / 1000, "kimg")
sys.exit(0 if state["cur_nimg"] >= float(sys.argv[2]) * 1000 else 1)
EOF
}
step "2. SIGTERM + resume" "$((LIMIT * 2))" sigterm_resume

if [ "$TINY" = 1 ]; then
  step "3. bench: census, iteration, memory, compile" 600 $PY benchmarks/gpu_bench.py --tiny
else
  step "3. bench: census, iteration, memory, compile" 300 $PY benchmarks/gpu_bench.py
fi

if [ "$TINY" = 1 ]; then
  echo; echo "## 4. CUDA sync debug mode"; echo "-> skipped: needs CUDA (--tiny)"
else
  cuda_syncs() {
    timeout 120 $PY - <<'EOF'
import tempfile, warnings
import torch
from gan_kit.runs.engine import Run, train_step
from gan_kit.recipe import load_recipe
with tempfile.TemporaryDirectory() as tmp:
    r, plugins = load_recipe("recipes/stylegan2.toml", [f"run.out_dir='{tmp}'", "metric=[]", "run.device='cuda'"])
    run = Run(r, plugins)
    phase = run.growth.phase_at(0)
    reals = run.real_images(phase.batch_size).pin_memory()
    for _ in range(3):
        train_step(run, phase, reals)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        for _ in range(10):
            train_step(run, phase, reals)
        torch.cuda.set_sync_debug_mode(0)
    sync = [w for w in caught if "synchroniz" in str(w.message)]
    print(f"CUDA synchronising calls in 10 iterations: {len(sync)}")
    for w in sync[:10]:
        print("  ", w.filename, w.lineno, str(w.message).splitlines()[0])
EOF
  }
  step "4. CUDA sync debug mode" 120 cuda_syncs
fi

echo
if [ ${#FAILED[@]} -eq 0 ]; then echo "all steps ok"; else echo "FAILED: ${FAILED[*]}"; exit 1; fi
