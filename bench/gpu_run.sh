#!/usr/bin/env bash
# One device session: GPU tests, compute-sanitizer, the main job and the benchmark, logs under $OUT.
#   OUT=/tmp/out bash bench/gpu_run.sh [tests|sanitize|main|bench|bench_nvfp4 ...]   (default: all)
# Each step's log is $OUT/<step>.log; a summary of exit codes is $OUT/summary.txt.
set -u
OUT=${OUT:-/tmp/gdn_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/gdn_cupy_cache}
export GDN_KERNELS_REQUIRE_GPU=1
steps=${*:-tests sanitize main bench bench_nvfp4}
: >"$OUT/summary.txt"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; echo "commit ${GDN_KERNELS_COMMIT:-unknown}"; python3 -c 'import cupy; print("cupy", cupy.__version__)'; } >"$OUT/device.txt" 2>&1
run() {
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
}
for step in $steps; do
  case $step in
    tests) run tests timeout 300 python3 -m pytest -q -rs --maxfail=10 -p no:cacheprovider --junitxml=$OUT/tests.xml ${GDN_TESTS:-tests/} ;;
    sanitize)
      for fam in w8a8 nvfp4; do
        run memcheck_$fam timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/sanitize_$fam.py
        run racecheck_$fam timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 python3 tests/sanitize_$fam.py
      done ;;
    main) run main timeout 120 python3 -m gdn_kernels ;;
    bench) run bench python3 bench/bench_w8a8.py --out "$OUT" --name "${BENCH_NAME:-w8a8_h200}" ${BENCH_ARGS:-} ;;
    bench_nvfp4) run bench_nvfp4 python3 bench/bench_nvfp4.py --out "$OUT" --name nvfp4_h200 ${BENCH_ARGS:-} ;;
    *) echo "unknown step $step" | tee -a "$OUT/summary.txt" ;;
  esac
done
cat "$OUT/summary.txt"
