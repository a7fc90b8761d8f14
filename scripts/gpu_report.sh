#!/usr/bin/env bash
# The GPU checks, in one command on a machine with CUDA, written as one run record:
#
#   bash scripts/gpu_report.sh [OUT_DIR] [SECONDS]
#
# OUT_DIR (default reports/runs/<date>-<gpu>-gpu-report) receives machine.txt, cuda-tests.txt and one file
# per step below (the command's output, progress bars left out), the profiles (profile-small/,
# profile-default/), the validation report (validation/), and last the run record: results.json (each
# step's exit status, the validation's headline) and machine.json (python -m real.run.gpu_record).
# SECONDS (default 780) bounds the whole: the steps run in the order of their use, each cut at the time
# left, and a step that would start with less than it needs is skipped and named in skipped.txt, so
# that a machine lent for a few minutes yields the most useful files first.
# The demo models and platforms go where HETSPEC_CACHE_DIR and HETSPEC_PLATFORMS_DIR say (default:
# the user folders); the small models are trained on the GPU unless they are cached. PYTHON names the
# interpreter that has HetSpec and torch (default python3).
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
out=${1:-}
budget=${2:-780}
if ! [[ "$budget" =~ ^[0-9]+$ ]]; then
    echo "gpu_report: SECONDS must be a whole number of seconds, got '$budget'" >&2; exit 2
fi
if ! "$py" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_report: no CUDA device here (torch.cuda.is_available() is False); run it on a machine with one" >&2
    exit 2
fi
started=$(date -u '+%Y-%m-%dT%H:%M:%S+00:00')
if [ -z "$out" ]; then
    gpu=$("$py" -c "import torch; print(torch.cuda.get_device_name(0))" 2>/dev/null | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' \
          | cut -d- -f1-2)
    out="reports/runs/$(date -u +%Y-%m-%d)-${gpu:-gpu}-gpu-report"
fi
mkdir -p "$out" && rm -f "$out/skipped.txt"
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
hs=("$py" -m hetspec)        # the CLI through the interpreter (timeout runs programs, not shell functions)

step() {   # step FILE SECONDS_NEEDED COMMAND...: the command's output into OUT_DIR/FILE, its exit status after it
    local file=$1 need=$2; shift 2
    if [ "$(left)" -lt "$need" ]; then
        echo "$file: skipped, $(left) s left of $budget (needs about $need s): $*" | tee -a "$out/skipped.txt"
        return
    fi
    echo "== $file ($(left) s left): $*"
    timeout "$(left)" "$@" 2>&1 | tr '\r' '\n' | grep -v '%|' > "$out/$file"     # tqdm's bars left out
    local rc=${PIPESTATUS[0]}
    echo "exit status $rc" >> "$out/$file"
    echo "   exit status $rc"
}

{ echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  echo "nproc: $(nproc)"
  "$py" -c "import sys, torch; print('python, torch, CUDA, device:', sys.version.split()[0], torch.__version__, \
torch.version.cuda, torch.cuda.get_device_name(0))"
} > "$out/machine.txt"
cat "$out/machine.txt"

step cuda-tests.txt 60 "$py" -m pytest -q -p no:cacheprovider tests/real/model/test_static_steps.py tests/real/run/test_bench.py \
    tests/validation/test_profile_device.py tests/real/train/test_demo_models.py -k "cuda or gpu"
step train.txt 240 "${hs[@]}" train-demo --preset small --device cuda:0
step calibrate.txt 240 "${hs[@]}" calibrate --device cuda:0 --models demo:small --out "$out/profile-small/profiled-cuda0.toml"
if [ -f "$out/profile-small/profiled-cuda0.toml" ]; then
    step validate.txt 180 "${hs[@]}" validate --quick --preset small --device cuda:0 \
        --platform "$out/profile-small/profiled-cuda0.toml" --out "$out/validation"
fi
step run-compare.txt 90 "${hs[@]}" run --compare ar,medusa,chain,draft-tree --preset small --device cuda:0 \
    --dtype fp16 --prompts 4 --max-new-tokens 64
step bench-llama2-7b.txt 90 "${hs[@]}" bench --device cuda:0 --model random-llama2-7b --repeats 3
for method in hcmp dovetail alspec; do
    step "hetero-$method.txt" 60 "${hs[@]}" run --method "$method" --workers cuda:0,cpu --preset small --prompts 2 \
        --max-new-tokens 48
done
# last, the longest: the default models' profile (both demo presets and llama2-7b)
step calibrate-default.txt 600 "${hs[@]}" calibrate --device cuda:0 --out "$out/profile-default/profiled-cuda0.toml"
"$py" -m real.run.gpu_record "$out" --started "$started"      # results.json and machine.json
echo "wrote $out ($(( $(date +%s) - start )) s)"
