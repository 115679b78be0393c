#!/usr/bin/env bash
# The checks that need a GPU, in one run, for a machine with CuPy and a CUDA
# device: the versions seen, the cuda-marked tests, then bench_cuda.py --quick.
#
#   benchmarks/gpu_checks.sh OUT_DIR [TEST_SECONDS] [BENCH_SECONDS] [-- PYTEST_ARGS...]
#
# Logs go to OUT_DIR (env.log, cuda_tests.log, cuda_tests.xml, bench.log) and the
# benchmark's tables to OUT_DIR/results.tar.gz. Each part stops at its time limit
# (defaults 300 s and 150 s) so that what ran still comes back; the log has a
# line per test (-vv, as pyproject adds -q), so a run stopped at its limit
# still names its failures.
# PYTEST_ARGS replace the default selection (-m cuda over tests/): `-- tests`
# runs the whole suite (about 170 s on 16 cores), `-- tests/x.py -k name` reruns one.
set -uo pipefail
out=${1:?usage: gpu_checks.sh OUT_DIR [TEST_SECONDS] [BENCH_SECONDS] [-- PYTEST_ARGS...]}
test_s=${2:-300}
bench_s=${3:-150}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
selection=("$@")
[ ${#selection[@]} -eq 0 ] && selection=(-m cuda tests)

cd "$(dirname "$0")/.."
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export MINITORCH_TEST_RECYCLE_RSS_MB=0  # a recycled worker would set up CUDA again

{
    nvidia-smi -L
    "$py" -c "import sys, numpy, numba, cupy
print('python', sys.version.split()[0], 'numpy', numpy.__version__,
      'numba', numba.__version__, 'cupy', cupy.__version__)
print(cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())
import minitorch_exp as mt
x = mt.tensor([1.0, 2.0, 3.0], device='cuda')
x[...] = (x * 2 + 1).exp()
print('smoke: exp(2x+1) on cuda =', x.numpy())"
} 2>&1 | tee "$out/env.log"

workers=${WORKERS:-$(( $(nproc) > 12 ? 12 : $(nproc) ))}
timeout "$test_s" "$py" -m pytest -n "$workers" -p no:cacheprovider --maxfail=60 -rf -vv \
    --durations=15 --junitxml="$out/cuda_tests.xml" "${selection[@]}" 2>&1 \
    | tee "$out/cuda_tests.log"

if [ "$bench_s" -gt 0 ]; then
    results="$out/results"
    timeout "$bench_s" "$py" benchmarks/bench_cuda.py --quick --no-torch-compile \
        --results-dir "$results" 2>&1 | tee "$out/bench.log"
    [ -d "$results" ] && tar -czf "$out/results.tar.gz" -C "$out" results && rm -rf "$results"
fi
exit 0
