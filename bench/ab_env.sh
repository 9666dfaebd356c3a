#!/usr/bin/env bash
# A/B of one environment setting in one device call: the benchmark run alternately without (a) and
# with (b) the setting, twice each, so that both see the same card and clocks.
#   AB_ENV="GDN_KERNELS_PDL_QUANT=0" OUT=/tmp/out bash bench/ab_env.sh NAME [w8a8|nvfp4 ...]
# Writes $OUT/results/<family>_<NAME>_{a1,b1,a2,b2}.json (and .md); bench/ab_table.py compares them
# (--new '..._b*.json' --old '..._a*.json'). AB_ARGS: the benchmarks' arguments (default rows 1-16,
# no torch, 20 replays).
set -u
OUT=${OUT:-/tmp/gdn_out}
name=$1
shift
families=${*:-w8a8}
mkdir -p "$OUT/results"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 GDN_KERNELS_REQUIRE_GPU=1
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/gdn_cupy_cache}
args=${AB_ARGS:---rows 1,2,4,8,16 --replays 20}
for i in 1 2; do
  for side in a b; do
    for fam in $families; do
      extra=""
      [ "$fam" = w8a8 ] && extra="--no-torch"
      t0=$SECONDS
      if [ $side = b ]; then
        env $AB_ENV python3 bench/bench_$fam.py --out "$OUT/results" --name "${fam}_${name}_$side$i" $args $extra \
          >>"$OUT/ab_$name.log" 2>&1
      else
        python3 bench/bench_$fam.py --out "$OUT/results" --name "${fam}_${name}_$side$i" $args $extra >>"$OUT/ab_$name.log" 2>&1
      fi
      echo "ab $name $fam $side$i rc=$? $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
    done
  done
done
