#!/bin/sh
# gpu_bench against the CUDA test double, small: it runs to the end, its
# restored bytes match, and its JSON has every figure the GPU bundle's summary quotes, among them
# the trainer stream's stall for a state four times the pool ("save_over_pool"). Only against the
# double (a GPU machine runs it from the bundle, full size).
set -eu
B=${B:-build}
[ "${CKPT_TEST_REAL_CUDA:-0}" = 1 ] && { echo "skip: real CUDA runtime (CKPT_TEST_REAL_CUDA=1)"; exit 77; }
[ -x "$B/bench/gpu_bench" ] && [ -e "$B/tests/lib/libcudart.so.13" ] ||
	{ echo "skip: gpu_bench or the CUDA test double not built (no CUDA headers)"; exit 77; }
d=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-gpubench.XXXXXX")
trap 'rm -rf "$d"' EXIT
rc=0
"$B/bench/gpu_bench" --gib 0.06 --tensors 8 --pool-mib 128 --dir "$d" --json "$d/r.json" \
	>"$d/out" 2>"$d/err" || rc=$?
cat "$d/err"
[ "$rc" = 0 ] || { echo "FAIL: gpu_bench exited $rc"; exit 1; }
python3 - "$d/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["verified"] is True, "restored bytes differ"
assert r["snapshot_gbps_vs_d2h_peak"] > 0, "no snapshot bandwidth against the pinned D2H peak"
for k in ("save_full", "save_incremental", "save_over_pool"):
    for f in ("blocked_seconds", "fence_passed_seconds", "trainer_stall_seconds", "total_seconds"):
        assert f in r[k], f"{k}.{f} missing"
over, full = r["save_over_pool"], r["save_full"]
assert over["pool_bytes"] * 3 < r["gpu_bench"]["state_bytes"], (over["pool_bytes"], r["gpu_bench"])
assert full["pool_bytes"] >= r["gpu_bench"]["state_bytes"], full["pool_bytes"]
# over the pool the copies wait for writes: the fence passes only once all but about a pool's
# worth is durable, so after at least the bytes beyond the pool were written
assert over["fence_passed_seconds"] > 0 and over["trainer_stall_seconds"] >= 0
print("ok: gpu_bench: stall %.3f s over the pool, %.3f s within it" %
      (over["trainer_stall_seconds"], full["trainer_stall_seconds"]))
PY
