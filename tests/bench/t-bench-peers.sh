#!/bin/sh
# bench/python/peers_bench.py (libckpt side by side with its peers), tiny: a 4 MiB state, 1 run, the
# file section (one process) and the DCP section at 2 gloo ranks, on the torch 2.x virtual
# environment of the tests (tests/python/common.sh, use_torch2; skips without it), with whatever
# peers it has (libckpt, torch.save and DCP at least; DeepSpeed and s3torchconnector are installed
# by `make bench-peers` only, so here their rows say "not run" with the import error). Checks:
# every method has a status, "ok" or "not run: <error>"; every one that ran has every figure of
# its kind in results.json, positive; the other benches' keys are kept and a stale peers_* key
# dropped; the goal lines (the driver's last lines and `summary.py --goals`) are one a goal, each
# starting with PASS, MISS or NOT RUN; the picture draws; and a load that differs by one bit
# makes the method's process exit 3 with a MISMATCH line (the driver then fails the whole bench,
# never a "not run").
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/python/common.sh
use_torch2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo '{"full_save_gbps": 1.5, "peers_stale_key": 7}' > "$W/results.json"
export BENCH_PEERS_SIZES=4M BENCH_RUNS=1 BENCH_PEERS_WORLDS=2 BENCH_PEERS_SECTIONS="file dcp" \
	BENCH_PEERS_WARMUP=0 BENCH_DIR="$W/work" BENCH_PEERS_OUT="$W/results.json" BENCH_PEERS_TIMEOUT=240
if ! "$PY" bench/python/peers_bench.py > "$W/out" 2>&1; then
	grep -v '^\[Gloo\]' "$W/out" | tail -n 40
	echo "FAIL: peers_bench.py exited non-zero"
	exit 1
fi
grep -v '^\[Gloo\]' "$W/out" | tail -n 30
"$PY" - "$W/results.json" "$W/out" <<'PYEOF' || exit 1
import json, re, sys
sys.path.insert(0, "bench/python")
import peers_bench as P
r = json.load(open(sys.argv[1]))
bad = []
if r.get("full_save_gbps") != 1.5:
    bad.append("a key of another bench was not kept")
if "peers_stale_key" in r:
    bad.append("a stale peers_* key was kept")
ran = {}
for section, methods, sfxs in (("file", P.file_methods(False), ["_4M"]), ("dcp", P.DCP, ["_2"]),
                               ("s3", P.S3, [""])):
    for m in methods:
        for x in sfxs:
            st = r.get(f"peers_{section}_{m}_status{x}")
            if st == "ok":
                ran[(section, m)] = True
                for k in P.method_keys(section, m):
                    v = r.get(f"peers_{section}_{m}_{k}{x}")
                    # a load may add nothing to the resident set (O_DIRECT into the target)
                    low = 0 if "peak" in k else 1e-12
                    if not isinstance(v, (int, float)) or v < low:
                        bad.append(f"peers_{section}_{m}_{k}{x} is {v!r}")
            elif not (isinstance(st, str) and re.match(r"not run: \S", st)):
                bad.append(f"peers_{section}_{m}_status{x} is {st!r}")
# what the test environment has must have run: libckpt, torch.save, DCP (every saver of it)
for need in [("file", m) for m in ("torch", "fs_save", "ckpt_save", "ckpt_async")] + \
        [("dcp", m) for m in P.DCP]:
    if need not in ran:
        st = r.get("peers_%s_%s_status%s" % (need[0], need[1], "_4M" if need[0] == "file" else "_2"))
        bad.append(f"{need[0]} {need[1]} did not run: {st}")
if not r.get("peers_s3_s3t_status", "").startswith("not run: "):
    bad.append("the S3 section was not asked for, yet s3t is %r" % r.get("peers_s3_s3t_status"))
for k in ("peers_file_state_bytes_4M", "peers_dcp_state_bytes_2", "peers_bench_time",
          "peers_load_avg_start", "peers_dcp_stager_options", "peers_fastpersist_settings",
          "peers_goals"):
    if k not in r:
        bad.append(f"no {k}")
if r.get("peers_file_state_bytes_4M") != 4 << 20:
    bad.append(f"file state {r.get('peers_file_state_bytes_4M')} bytes, expected 4 MiB")
# the goals: 3 for the size (durable, restore, async peak), 3 for N=2 (blocked, blocked of
# libckpt.dcp, async peak), 2 for S3 (push, pull; not run here)
goals = r.get("peers_goals", [])
if len(goals) != 8 or any(g["result"] not in ("PASS", "MISS", "NOT RUN") for g in goals):
    bad.append(f"goals: {goals!r}")
if [g["result"] for g in goals if g["at"] == "S3"] != ["NOT RUN", "NOT RUN"]:
    bad.append("the S3 goals are not NOT RUN")
for g in goals:
    if g["at"] != "S3" and g["result"] == "NOT RUN":
        bad.append(f"goal {g['goal']} ({g['at']}) not run: {g.get('why')}")
tail = [x for x in open(sys.argv[2]).read().splitlines() if x.strip()][-len(goals):]
if not tail or any(not re.match(r"(PASS|MISS|NOT RUN) ", x) for x in tail):
    bad.append(f"the driver's last lines are not the goal lines: {tail!r}")
if bad:
    print("FAIL: results.json:\n  " + "\n  ".join(bad))
    sys.exit(1)
print(f"results.json: {sum(1 for k in r if k.startswith('peers_'))} peers_* keys; ran: "
      + ", ".join(f"{s} {m}" for s, m in ran))
PYEOF
python3 bench/summary.py --goals "$W/results.json" > "$W/goals" || { cat "$W/goals"; echo "FAIL: summary.py --goals"; exit 1; }
cat "$W/goals"
n=$(grep -c . "$W/goals")
[ "$n" = 8 ] && ! grep -Ev '^(PASS|MISS|NOT RUN) ' "$W/goals" | grep -q . ||
	{ echo "FAIL: summary.py --goals printed $n lines, or a line not starting with PASS, MISS or NOT RUN"; exit 1; }
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
	/usr/bin/python3 bench/plot_peers.py "$W/results.json" "$W/peers.svg" || { echo "FAIL: plot_peers.py"; exit 1; }
	grep -q 'Store.save' "$W/peers.svg" || { echo "FAIL: peers.svg has no Store.save bar"; exit 1; }
fi
# a loaded state one bit off: the method's process exits 3 (MISMATCH), which the driver turns into
# its own failure (run_one), never a "not run"
PEERS_TEST_FLIP=1 "$PY" bench/python/peers_bench.py --one file torch 4M "$W/flipdir" "$W/flip.json" > "$W/flip" 2>&1
rc=$?
[ $rc = 3 ] || { tail -n 5 "$W/flip"; echo "FAIL: a load one bit off exited $rc, not 3 (MISMATCH)"; exit 1; }
grep -q 'MISMATCH: torch load: .* differs from the saved tensor' "$W/flip" || { tail -n 5 "$W/flip"; echo "FAIL: no MISMATCH line"; exit 1; }
echo "PASS"
