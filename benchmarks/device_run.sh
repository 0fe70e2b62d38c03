#!/usr/bin/env bash
# One call on a GPU machine of the device tool: set up what the image lacks, run the GPU tests
# and the benchmark scripts, and leave every log under $OUT (at most 8 files come back).
# Usage there: bash benchmarks/device_run.sh [stage ...]   (stages: tests check bench floor ssh cli aa setup scaling keepcache protocached screen loop ab abmore abnext bisect alone recheck fresh hostprof launch drawvar vcost vprof profile vecdiag ctx eageraa gpumode pmpp survey)
# A stage's seconds are capped where it says ${OKC_T_<stage>:-N}: the call's 600 s must hold them all.
set -uo pipefail
export OUT=${OUT:-/tmp/okc-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

if compgen -G ".whl/*.whl" >/dev/null; then
    # paramiko, which the image lacks; .whl/ may hold wheels of several Pythons
    python3 -m pip install -q --no-index --find-links .whl --no-compile --no-cache-dir --target /tmp/site \
        paramiko
    export PYTHONPATH="$PWD:/tmp/site"
else
    export PYTHONPATH="$PWD"
fi
mkdir -p /tmp/bin
printf '#!/bin/sh\nexec python3 -m okc "$@"\n' >/tmp/bin/okc && chmod +x /tmp/bin/okc
export PATH="/tmp/bin:$PATH" PYTHONUNBUFFERED=1 COLUMNS=160 OKC_TESTS_INSTAFAIL=1

stage() {
    local name=$1; shift
    echo "=== $name: $*" | tee -a "$OUT/summary.txt"
    local start=$SECONDS file="$OUT/$name.txt" n=2
    while [ -e "$file" ]; do file="$OUT/$name.$n.txt"; n=$((n + 1)); done  # a stage run twice keeps both logs
    "$@" >"$file" 2>&1
    local rc=$?
    tail -n 25 "$file"
    case $rc in 124|137) echo "=== $name: cut at its time limit: what ran then may read as failed or interrupted;" \
        "that is the cut, not a finding" | tee -a "$OUT/summary.txt" ;; esac
    echo "=== $name: rc=$rc in $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
}

{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'; } >>"$OUT/summary.txt" 2>&1

stages=${*:-tests check bench}
for s in $stages; do
    case $s in
        # At the stage's limit SIGTERM reaches pytest; okc's CLI inside the running test takes it for a closed terminal
        # and cancels its job (so nothing of it holds the GPU into the next call), and that test reads as failed
        # ("interrupted during start"; NOTES, 14th session). pytest then goes on: KILL 20 s later, and say so below.
        tests) stage gpu_tests timeout -k 20 ${OKC_T_tests:-400} python3 -m pytest -m gpu -v -rfE --durations=15 -p no:cacheprovider --timeout 300 ${OKC_PYTEST_ARGS:-} ${OKC_TESTS:-} ;;
        ab) stage ab_matrix timeout ${OKC_T_ab:-240} python3 benchmarks/ab_truth.py --candidates ${OKC_AB_CANDIDATES:-001,delay} --pairs ${OKC_AB_PAIRS:-480} ${OKC_AB_ARGS:-} ;;
        abmore) stage ab_more timeout ${OKC_T_abmore:-200} python3 benchmarks/ab_truth.py --candidates aa,mixed,triton --variants ${OKC_AB_VARIANTS:-paired,solo,paired_plain} ;;
        abnext) stage alone_harness timeout 60 python3 benchmarks/alone_harness.py --candidates 001,triton --rounds 30
                stage ab_next timeout ${OKC_T_abnext:-200} python3 benchmarks/ab_truth.py --candidates 001,triton \
                    --loads decode1,decode16,decode32,verify1,verify16,verify32 \
                    --variants paired,one_in_flight,sum_flush,no_rechecks,harness_like ;;
        bisect) stage alone_harness timeout ${OKC_T_alone:-60} python3 benchmarks/alone_harness.py --candidates ${OKC_BISECT_CANDIDATES:-triton} --rounds 30 --consecutive 2
                stage alone_cold timeout ${OKC_T_alone:-60} python3 benchmarks/alone_harness.py --candidates ${OKC_BISECT_CANDIDATES:-triton} --rounds 30 --consecutive 1
                stage bisect timeout ${OKC_T_bisect:-250} python3 benchmarks/ab_truth.py --candidates ${OKC_BISECT_CANDIDATES:-triton} \
                    --copies 12 --loads decode1,decode16,decode32,verify1,verify16,verify32 \
                    --variants ${OKC_BISECT_VARIANTS:-paired,harness_like,hl_but_layout,hl_but_copies,hl_but_shared_outputs,hl_but_in_flight,hl_but_flush,hl_but_rechecks} ;;
        vprof) stage verifier_profile timeout ${OKC_T_vprof:-40} python3 benchmarks/verifier_profile.py ;;
        alone) stage alone_harness timeout ${OKC_T_alone:-90} python3 benchmarks/alone_harness.py --candidates ${OKC_ALONE_CANDIDATES:-001,delay,mixed,triton,aa}
               stage alone_alternated timeout ${OKC_T_alone_alt:-30} python3 benchmarks/alone_harness.py --mode alternated --candidates 001 ;;
        recheck) stage recheck_cost timeout ${OKC_T_recheck:-90} python3 benchmarks/recheck_cost.py --runs ${OKC_RECHECK_RUNS:-1} ${OKC_RECHECK_ARGS:-}
                 [ "${OKC_T_transport:-40}" = 0 ] || stage verifier_transport timeout ${OKC_T_transport:-40} python3 benchmarks/verifier_transport.py --device cuda --total-mb 2048 ;;
        fresh) stage fresh_cost timeout ${OKC_T_fresh:-200} python3 benchmarks/fresh_cost.py --rounds ${OKC_FRESH_ROUNDS:-3} --pairs ${OKC_FRESH_PAIRS:-150} ;;
        hostprof) for way in fresh same fresh same; do
                      stage host_profile timeout ${OKC_T_hostprof:-60} python3 benchmarks/host_profile.py --pairs ${OKC_HP_PAIRS:-150} --way $way --no-profile
                  done
                  stage host_profile_cprofile timeout ${OKC_T_hostprof:-60} python3 benchmarks/host_profile.py --pairs ${OKC_HP_PAIRS:-150} --way fresh ;;
        drawvar) stage draw_variants timeout ${OKC_T_drawvar:-90} python3 benchmarks/draw_variants.py ;;
        launch) stage launch_cost timeout ${OKC_T_launch:-60} python3 benchmarks/launch_cost.py ;;
        vcost) stage verifier_cost timeout ${OKC_T_vcost:-90} python3 benchmarks/verifier_cost.py --device cuda ;;
        profile) stage profile_bench timeout ${OKC_T_profile:-60} python3 benchmarks/profile_bench.py ;;
        pmpp) stage eval_protocol timeout ${OKC_T_evalproto:-60} python3 benchmarks/eval_protocol.py .refk/pmpp_v2/matmul_py
              stage pmpp_v2 timeout ${OKC_T_pmpp:-540} python3 benchmarks/pmpp_v2.py .refk --sets ${OKC_PMPP_SETS:-pmpp_v2,pmpp} \
                  --budget ${OKC_PMPP_BUDGET:-460} ${OKC_PMPP_ARGS:-} ;;
        survey) stage pmpp_v2 timeout ${OKC_T_pmpp:-560} python3 benchmarks/pmpp_v2.py .refk --sets ${OKC_PMPP_SETS:-pmpp_v2} \
                    --budget ${OKC_PMPP_BUDGET:-500} --by-hand leaderboard --by-hand-sides both --rounds 2 ${OKC_PMPP_ARGS:-} ;;
        vecdiag) stage vecdiag bash -c 'set -e; rm -rf /tmp/vd; okc init /tmp/vd --gpumode .refk/pmpp_v2/vectoradd_py >/dev/null
                  for mode in processes alternated; do python3 benchmarks/eager_alone.py /tmp/vd/gpumode/vectoradd_py \
                      --candidate /tmp/vd/candidates/001_submission.py --mode $mode --rounds ${OKC_VD_ROUNDS:-2}; done
                  cd /tmp/vd && okc bench 001 --cases benchmark.4 --max-pairs 200 --target 0.01' ;;
        ctx) stage ranked_context timeout ${OKC_T_ctx:-560} bash -c 'set -e; R=$PWD; rm -rf /tmp/rc
                  okc init /tmp/rc --gpumode .refk/pmpp_v2/${OKC_CTX_PROBLEM:-histogram_py} >/dev/null
                  cd /tmp/rc && python3 "$R/benchmarks/ranked_context.py" --runs ${OKC_CTX_RUNS:-5}' ;;
        eageraa) stage eager_aa timeout ${OKC_T_eageraa:-540} python3 benchmarks/eager_aa.py \
                     ${OKC_EAA_FOLDERS:-.refk/pmpp/matmul_py .refk/pmpp/histogram_py} --runs ${OKC_EAA_RUNS:-6} ${OKC_EAA_ARGS:-} ;;
        gpumode) stage gpumode_bench timeout ${OKC_T_gpumode:-60} python3 benchmarks/gpumode_bench.py --runs ${OKC_GPUMODE_RUNS:-2} ;;
        check) stage check_walltime python3 benchmarks/check_walltime.py ;;
        bench) stage bench_harness python3 benchmarks/bench_harness.py ;;
        floor) stage floor okc floor ;;
        ssh) stage ssh bash benchmarks/device_ssh.sh ;;
        cli) stage cli bash -c 'set -e; okc check 000; okc check 001; okc bench 000 --aa; okc bench 001; okc floor;
                  okc report 001; okc plot; okc plot 001; cp results/plots/*.png "$OUT"/; okc ledger; okc ledger --calibration' ;;
        aa) stage aa_bias timeout ${OKC_T_aa:-200} python3 benchmarks/aa_bias.py --cli-only --runs ${OKC_AA_RUNS:-5} --half-width ${OKC_AA_HALF_WIDTH:-0.002} ;;
        setup) stage setup_profile python3 benchmarks/setup_profile.py
               stage setup_cprofile python3 benchmarks/setup_profile.py --one now --profile ;;
        scaling) stage scaling_${OKC_SCALING_POINTS:-12} python3 benchmarks/sweep_scaling.py --points ${OKC_SCALING_POINTS:-12} ${OKC_SCALING_ARGS:-} ;;
        keepcache) python3 benchmarks/keep_cache_variant.py /tmp/okc-keepcache
                   stage scaling_keepcache_${OKC_SCALING_POINTS:-36} env PYTHONPATH="/tmp/okc-keepcache:$PYTHONPATH" \
                       python3 benchmarks/sweep_scaling.py --points ${OKC_SCALING_POINTS:-36} ;;
        protocached) stage scaling_protocached_${OKC_SCALING_POINTS:-36} python3 benchmarks/sweep_scaling.py \
                         --points ${OKC_SCALING_POINTS:-36} --protocol-cached ;;
        screen) stage screen_tests python3 -m pytest -q -p no:cacheprovider tests/test_screen_gpu.py tests/test_ahead.py
                stage scaling_12 python3 benchmarks/sweep_scaling.py --points 12
                stage scaling_36 python3 benchmarks/sweep_scaling.py --points 36
                stage screen_compare python3 benchmarks/screen_compare.py --points ${OKC_COMPARE_POINTS:-6}
                tar czf "$OUT/screen_runs.tgz" results/experiments 2>/dev/null ;;
        loop) stage loop_bench timeout ${OKC_T_loop:-300} python3 benchmarks/loop_bench.py --h200 --runs ${OKC_LOOP_RUNS:-5} ${OKC_LOOP_ARGS:-} ;;
        *) echo "unknown stage $s" ;;
    esac
done
cat "$OUT/summary.txt"
