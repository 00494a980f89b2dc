#!/usr/bin/env bash
# The RMSNorm backward on the H200 in back-to-back calls (the machine stays warm 30 s between
# them, and /root/work, /root/q and /root/tx live as long as it does):
# PEERS = .peers/RMSNorm-H100 .peers/int21_ext.tgz .snap: carried in EVERY call (an ignored folder a
# call does not carry is gone from the machine in that call: session 12 lost INT21 that way for
# two calls); a step stops at once (exit 4) when INT21, or in step c QuACK, cannot be imported.
#   STEP=a [.whl .whlq1 + PEERS] (PROBE=seeds.json: those genomes through bwd_probe.py first, PROBE_S): INT21 restored (or built),
#          the family's GPU tests (TESTS_K: their -k expression, default bf16), where the judge's CHECK time goes, a new search started (SEARCH_S; 0: none)
#   (since session 25 the cutlass wheel travels in four parts: STEP=b twice, with .whlq2 then .whlq3, and STEP=c
#   with .whlq4; REQUIRE_GPU=H200 stops a call that got another GPU. The parts wait in /root/q in any order
#   and step c installs once all are there, so since session 26 the plan is a [.whl .whlq4 + PEERS], where
#   int21_ext.tgz fits and INT21 is restored in seconds instead of built in ~120 s, then b [.whlq1
#   .peers/RMSNorm-H100], b [.whlq2 ...], c [.whlq3 ...]: after the first call INT21 lives in /root/tx and
#   only its checkout must travel)
#   STEP=b [.whlq2 + PEERS]: the search resumed for SEARCH_S more seconds (on a fresh machine, from the
#          committed dump BWD_DUMP, default results/rmsnorm_bwd_h200_run.json.gz: `evo resume DUMP`;
#          a first call carries .whl too, and .whlq1 when a step c follows)
#   STEP=c [.whlq4 + PEERS]: QuACK installed; the run dumped, its dispatch table, and the final table of
#          that table beside every baseline (INT21, QuACK, Liger, torch, the add roofline; TABLE_S);
#          then (FWD_TABLE_S > 0) the forward's table re-timed with INT21's forward beside it, from
#          the protocol-2 record results/rejudge/rejudge_run.json.gz
# Every step dumps the run to $OUT/rmsnorm_bwd_h200_run.json.gz: /root/work lives only while the
# machine stays warm (session 11 lost a run that way). STEP=b with TRAIN=1 also runs the training
# drop-in check (train_export_check.sh) on the run as dumped so far.
# The three QuACK parts (.whlq1-3: the cutlass-dsl cu13 wheel split in three, `split -n 3 -d -a 2`)
# travel one per call: a call carries at most 64 MiB with the working tree.
# .snap is `git archive HEAD` without results/ (made here before the calls): the device runs the
# committed tree while helpers edit the working one. The run lives in /root/work/runs.
set -o pipefail
. experiments/device/device_lib.sh
device_start >/dev/null || exit 1
. experiments/device/peers_build.sh > "$OUT/int21.log" 2>&1; tail -1 "$OUT/int21.log"
export EVO_INT21_ROOT=$PWD/.peers/RMSNorm-H100
require_peers int21 || exit 4
ROOT=$PWD          # the checkout; SNAP (default .snap, or . for the checkout itself) is where the steps run
cd "$ROOT/${SNAP:-.snap}" || exit 1
device_pythonpath
mkdir -p /root/work/runs
GPU_TAG=${GPU_TAG:-h200}     # names the config and every file a step writes: GPU_TAG=h100 runs experiments/rmsnorm_bwd_h100.toml
CONFIG=${CONFIG:-experiments/rmsnorm_bwd_${GPU_TAG}.toml}
case "${STEP:-a}" in
a)
    if [ "${TESTS_S:-200}" -gt 0 ]; then     # TESTS_S=0: no GPU tests (timeout 0 would mean no limit)
        timeout "${TESTS_S:-200}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_rmsnorm_bwd_gpu.py -s \
            -k "${TESTS_K:-bf16}" > "$OUT/bwd_gpu.log" 2>&1
        echo "backward GPU tests rc=$?"; grep -E "passed|failed|TB/s|Error" "$OUT/bwd_gpu.log" | cut -c1-300 | tail -30
    fi
    if [ -n "${PROBE:-}" ]; then     # a seeds file judged on the bf16 cases beside INT21 and the roofline
        # PROBE_SKIP: the seeds file's first genomes left out; PROBE_BASELINES: torch's autograd (60 ms a call
        # at 262144) tells a probe nothing, so by default only INT21 and the roofline are timed beside it;
        # PROBE_DTYPE / PROBE_MATRIX (default bf16 / quack; a matrix may be one shape, e.g. 8192x262144)
        timeout "${PROBE_S:-200}" python3 experiments/device/bwd_probe.py --dtype "${PROBE_DTYPE:-bf16}" \
            --matrix "${PROBE_MATRIX:-quack}" --random 0 --no-defaults \
            --seeds "$PROBE" --skip "${PROBE_SKIP:-0}" --baselines "${PROBE_BASELINES:-int21,roofline}" \
            --out "$OUT/probe.json" > "$OUT/probe.log" 2>&1
        echo "probe rc=$?"; grep -E "^== |roofline" "$OUT/probe.log" | cut -c1-200 | tail -40
    fi
    if [ "${PROFILE_S:-100}" -gt 0 ]; then
        timeout "${PROFILE_S:-100}" python3 experiments/scripts/profile_judge.py --reps 20 --check-per-case \
            > "$OUT/profile.txt" 2>&1
        grep -E "^CHECK|^check cases" "$OUT/profile.txt"
    fi
    if [ "${SEARCH_S:-240}" -gt 0 ]; then     # SEARCH_S=0: no new run (step b then goes on from the dump)
        timeout -s INT "${SEARCH_S:-240}" python3 -m evo.cli run "$CONFIG" --quiet --runs-dir /root/work/runs \
            > "$OUT/search_a.log" 2>&1
        tail -3 "$OUT/search_a.log"
        ls -dt /root/work/runs/*/ | head -1 > /root/work/bwd_run_dir_${GPU_TAG}
        python3 -m evo.cli dump "$(cat /root/work/bwd_run_dir_${GPU_TAG})" --out "$OUT/rmsnorm_bwd_${GPU_TAG}_run.json.gz" | tail -1
    fi ;;
b)
    if [ -s /root/work/bwd_run_dir_${GPU_TAG} ] && [ -d "$(cat /root/work/bwd_run_dir_${GPU_TAG})" ]; then
        timeout -s INT "${SEARCH_S:-240}" python3 -m evo.cli resume "$(cat /root/work/bwd_run_dir_${GPU_TAG})" --quiet \
            > "$OUT/search_b.log" 2>&1
    else        # a fresh machine: the committed dump restored (evo resume DUMP), its seeds not judged again
        timeout -s INT "${SEARCH_S:-240}" python3 -m evo.cli resume "${BWD_DUMP:-$ROOT/results/rmsnorm_bwd_${GPU_TAG}_run.json.gz}" \
            --runs-dir /root/work/runs --config-dir experiments --quiet > "$OUT/search_b.log" 2>&1
        ls -dt /root/work/runs/*/ | head -1 > /root/work/bwd_run_dir_${GPU_TAG}
    fi
    tail -3 "$OUT/search_b.log"
    python3 -m evo.cli dump "$(cat /root/work/bwd_run_dir_${GPU_TAG})" --out "$OUT/rmsnorm_bwd_${GPU_TAG}_run.json.gz" | tail -1
    if [ -n "${TRAIN:-}" ]; then
        (cd "$ROOT" && TESTS_S=${TRAIN_S:-200} bash experiments/device/train_export_check.sh \
            results/rejudge/rejudge_run.json.gz "$OUT/rmsnorm_bwd_${GPU_TAG}_run.json.gz") > "$OUT/train_check.log" 2>&1
        echo "training drop-in check rc=$?"; grep -E "passed|failed|error" "$OUT/train_check.log" | tail -5
    fi ;;
c)
    # TABLE_BASELINES (evo table --baselines; default every baseline) without quack: QuACK is not installed,
    # so no cutlass parts need to travel first (a session short of device time times the table beside INT21
    # and the roofline in the call after step a); TABLE_CASES: evo table --cases
    if [ -z "${TABLE_BASELINES:-}" ] || [[ ",$TABLE_BASELINES," == *,quack,* ]]; then
        cd "$ROOT" && install_quack && require_peers quack liger && cd "$ROOT/${SNAP:-.snap}" || exit 4
    fi
    RUN=$(cat /root/work/bwd_run_dir_${GPU_TAG} 2>/dev/null)
    if [ -n "$RUN" ] && [ -d "$RUN" ]; then
        python3 -m evo.cli dump "$RUN" --out "$OUT/rmsnorm_bwd_${GPU_TAG}_run.json.gz"
    else        # a fresh machine: the table of a dump (BWD_DUMP, default the committed record)
        RUN=${BWD_DUMP:-$ROOT/results/rmsnorm_bwd_${GPU_TAG}_run.json.gz}
        echo "no run on this machine: the table of $RUN"
    fi
    python3 -m evo.cli dispatch "$RUN" --out "$OUT/rmsnorm_bwd_dispatch.json" | tail -30
    timeout "$((${TABLE_S:-400} + 120))" python3 -m evo.cli table "$RUN" --max-s "${TABLE_S:-400}" \
        ${TABLE_BASELINES:+--baselines "$TABLE_BASELINES"} ${TABLE_CASES:+--cases "$TABLE_CASES"} \
        --out "$OUT/rmsnorm_bwd_${GPU_TAG}" > "$OUT/table.log" 2>&1
    echo "table rc=$?"; tail -45 "$OUT/rmsnorm_bwd_${GPU_TAG}.md"
    if [ "${FWD_TABLE_S:-0}" -gt 0 ]; then
        timeout "$((FWD_TABLE_S + 120))" python3 -m evo.cli table "$ROOT/results/rejudge/rejudge_run.json.gz" \
            --baselines "${FWD_BASELINES:-torch,quack,int21,copy}" --max-s "$FWD_TABLE_S" \
            --out "$OUT/rmsnorm_fwd_int21_${GPU_TAG}" > "$OUT/fwd_table.log" 2>&1
        echo "forward table rc=$?"; tail -40 "$OUT/rmsnorm_fwd_int21_${GPU_TAG}.md"
    fi ;;
esac
if [ -s /root/work/bwd_run_dir_${GPU_TAG} ]; then     # (step a with SEARCH_S=0 starts no run)
    python3 -m evo.cli status "$(cat /root/work/bwd_run_dir_${GPU_TAG})" 2>/dev/null | tail -12
fi
