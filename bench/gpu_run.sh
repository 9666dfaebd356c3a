#!/usr/bin/env bash
# One device session: GPU tests, compute-sanitizer, the main job and the benchmarks; logs under $OUT.
#   OUT=/tmp/out bash bench/gpu_run.sh [warm|tests|sanitize|main|bench|bench_nvfp4 ...]   (default: all)
# warm compiles every kernel family side by side into CuPy's cache first (bench/warm_cache.py; its
# log goes to tests.log), so the steps after it pay no compile in turn.
# Files (few: the device tool brings back at most eight): summary.txt (device, commit, each step's
# exit code and time), tests.log, sanitize.log, main.log, bench.log, profile.log, results.tgz
# (benchmark JSON and markdown). GDN_TESTS selects tests; SANITIZE_FAMILIES the sanitizer's
# workloads (w8a8 nvfp4); BENCH_ARGS is passed to both benchmarks,
# SWEEP_ARGS to the schedule sweeps (steps sweep and sweep_nvfp4, not in the default list);
# read_pattern: a read-only kernel in the NVFP4 GEMM's access pattern (bench/read_pattern.py);
# profile_schedules: ncu of chosen sweep schedules, GEMM alone (PROFILE_ARGS: bench/profile_schedules.py's).
set -u
OUT=${OUT:-/tmp/gdn_out}
mkdir -p "$OUT/results"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/gdn_cupy_cache}
export GDN_KERNELS_REQUIRE_GPU=1
steps=${*:-warm tests sanitize main bench bench_nvfp4 host profile}
# A second call with the same $OUT adds to summary.txt and results.tgz instead of replacing them.
[ -f "$OUT/results.tgz" ] && tar -C "$OUT" -xzf "$OUT/results.tgz"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  echo "commit ${GDN_KERNELS_COMMIT:-unknown}"
  python3 -c 'import cupy; print("cupy", cupy.__version__)'; } >>"$OUT/summary.txt" 2>&1
run() {
  local log=$1 name=$2; shift 2
  local t0=$SECONDS
  echo "== $name: $*" >>"$OUT/$log.log"
  "$@" >>"$OUT/$log.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
}
for step in $steps; do
  case $step in
    warm) run tests warm timeout 300 python3 bench/warm_cache.py ;;
    tests) run tests tests timeout 450 python3 -m pytest -q -rs --maxfail=10 -p no:cacheprovider ${GDN_TESTS:-tests/} ;;
    sanitize)
      for fam in ${SANITIZE_FAMILIES:-w8a8 nvfp4}; do
        for tool in memcheck racecheck; do
          run sanitize "${tool}_$fam" timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/sanitize_$fam.py
        done
      done ;;
    main) run main main timeout 120 python3 -m gdn_kernels ;;
    bench) run bench bench_w8a8 python3 bench/bench_w8a8.py --out "$OUT/results" --name w8a8_h200 ${BENCH_ARGS:-} ;;
    bench_plain) GDN_KERNELS_PDL=0 run bench bench_w8a8_plain python3 bench/bench_w8a8.py --out "$OUT/results" --name w8a8_plain_h200 --no-torch --rows 1,2,4,8,16 ;;
    sweep) run bench sweep_w8a8 python3 bench/sweep_w8a8.py --out "$OUT/results" --name sweep_w8a8_h200 ${SWEEP_ARGS:-} ;;
    bench_nvfp4) run bench bench_nvfp4 python3 bench/bench_nvfp4.py --out "$OUT/results" --name nvfp4_h200 ${BENCH_ARGS:-} ;;
    sweep_nvfp4) run bench sweep_nvfp4 python3 bench/sweep_nvfp4.py --out "$OUT/results" --name sweep_nvfp4_h200 ${SWEEP_ARGS:-} ;;
    host) run bench host_overhead python3 bench/host_overhead.py ;;
    read_pattern) run bench read_pattern python3 bench/read_pattern.py ;;
    profile)
      # ncu filtered by the library's NVTX range must show its two kernels (quantizer, GEMM).
      GDN_KERNELS_NVTX=1 run profile ncu_int8 timeout 200 ncu --nvtx --nvtx-include "regex:gdn_kernels\.int8\.proj.*/" \
        --clock-control none --metrics gpu__time_duration.sum python3 bench/profile_one.py
      GDN_KERNELS_NVTX=1 run profile ncu_nvfp4 timeout 200 ncu --nvtx --nvtx-include "regex:gdn_kernels\.nvfp4\.proj.*/" \
        --clock-control none --metrics gpu__time_duration.sum python3 bench/profile_one.py ;;
    profile_gemm)
      # Where a decode GEMM's time goes: throughput, memory and warp-stall sections of one call.
      GDN_KERNELS_NVTX=1 run profile ncu_gemm timeout 300 ncu --nvtx --nvtx-include "regex:gdn_kernels\..*proj.*/" \
        --clock-control none --kernel-name "regex:${PROFILE_KERNEL:-.}" --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section LaunchStats python3 bench/profile_one.py ${PROFILE_ARGS:---n 16384 --k 5120 --rows 1 --formats int8} ;;
    profile_pipes)
      # Which pipes a GEMM keeps busy: the issue-slot and per-pipe utilization of one call.
      GDN_KERNELS_NVTX=1 run profile ncu_pipes timeout 200 ncu --nvtx --nvtx-include "regex:gdn_kernels\..*proj.*/" \
        --clock-control none --kernel-name "regex:${PROFILE_KERNEL:-gemm}" --section SpeedOfLight --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats \
        --section SchedulerStats --section WarpStateStats --metrics \
        sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
        python3 bench/profile_one.py ${PROFILE_ARGS:---n 16384 --k 5120 --rows 1 --formats nvfp4_tiles} ;;
    profile_schedules)
      # Where chosen sweep schedules' time goes, GEMM alone (bench/profile_schedules.py; caches flushed
      # before each, clocks as they are): throughput, memory tables, pipes, stalls. The default: int8 at
      # 256 rows, the shipped tiles against wider ones, unclustered, multicast and K split (NOTES W8A8 v33).
      GDN_KERNELS_NVTX=1 run profile ncu_schedules timeout 300 ncu --nvtx --nvtx-include "regex:profile:.*/" \
        --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
        python3 bench/profile_schedules.py ${PROFILE_ARGS:---formats int8 --shape 5120,17408 --shape 16384,5120 --rows 256 --packed --only '^packed_wg(128_s6_tma2(_ws_mc2x2)?|256_s4_tma2(_ws|_k[23]))$'} ;;
    sass) run profile sass python3 bench/sass_mix.py ${SASS_ARGS:-} ;;
    *) echo "unknown step $step" | tee -a "$OUT/summary.txt" ;;
  esac
done
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$OUT/results"
cat "$OUT/summary.txt"
