#!/bin/sh
# bench/plot.py, the picture `make bench` draws from results.json: on a full set of figures every
# bar is drawn with the value results.json gives (read back from the SVG's description and ids),
# text stays text, a partial run names what it did not measure, PNG works, and a results.json
# with nothing to draw, or a Python without matplotlib, fails with one clear line.
# Uses /usr/bin/python3 (Debian's python3-matplotlib; tools/deps.d/bench.test).
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
$PY -c 'import matplotlib' 2>/dev/null || { echo "SKIP: /usr/bin/python3 has no matplotlib"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat > "$W/full.json" <<'JSON'
{"library_version": "0.1.0", "bench_time": "2026-01-01T00:00:00Z", "cpus": 2,
 "state_bytes": 2147483648, "engine": "io_uring", "direct_io": true,
 "full_save_gbps": 1.5, "fio_write_best_gbps": 1.6, "fio_write_gbps": 1.4,
 "restore_gbps": 2.0, "fio_read_best_gbps": 2.1, "fio_read_gbps": 1.9,
 "import_file_bytes": 2000000000, "export_seconds": 2.0, "cp_sync_seconds": 4.0,
 "py_state_bytes": 1000000000, "ckpt_save_seconds": 0.5, "torch_save_seconds": 2.5,
 "ckpt_load_seconds": 0.4, "torch_load_seconds": 0.8,
 "full_save_seconds": 1.4, "snapshot_seconds": 0.3, "lib_snapshot_seconds": 0.25,
 "memcpy_seconds": 0.2, "incr5_save_seconds": 0.1,
 "ckpt_async_total_seconds": 0.9, "ckpt_blocking_seconds": 0.2, "py_lib_snapshot_seconds": 0.15}
JSON
$PY bench/plot.py "$W/full.json" "$W/full.svg" > "$W/out" || { cat "$W/out"; echo "FAIL: full plot"; exit 1; }
$PY - "$W/full.svg" <<'PYEOF'
import json, sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
desc = None
for el in root.iter():
    if el.tag.endswith("}description") or el.tag.endswith("}desc") or el.tag.endswith("description"):
        desc = desc or (el.text or "").strip()
if not desc:  # matplotlib writes it as dc:description in the RDF metadata
    sys.exit("FAIL: no description in the SVG")
drawn = json.loads(desc)
want = {"save-libckpt": 1.5, "save-fio-best": 1.6, "save-fio": 1.4, "restore-libckpt": 2.0,
        "restore-fio-best": 2.1, "restore-fio": 1.9, "export-libckpt": 1.0, "export-cp": 0.5,
        "pysave-libckpt": 2.0, "pysave-torch": 0.4, "pyload-libckpt": 2.5, "pyload-torch": 1.25}
for k, v in want.items():
    if abs(drawn.get(k, -1) - v) > 1e-3:
        sys.exit("FAIL: bar %s drew %r, want %r" % (k, drawn.get(k), v))
c = drawn["split-c-full"]
if (c["blocked"], c["snapshot"], c["persist"], c["reference"]) != (0.3, 0.25, 1.1, {"memcpy": 0.2}):
    sys.exit("FAIL: C full save split %r" % c)
p = drawn["split-py"]
if (p["blocked"], p["snapshot"], p["persist"], p["reference"]) != (0.2, 0.15, 0.7, {"torch.save": 2.5}):
    sys.exit("FAIL: Python save split %r" % p)
if drawn["split-c-incr5"] != {"total": 0.1}:
    sys.exit("FAIL: incremental %r" % drawn["split-c-incr5"])
ids = {el.get("id") for el in root.iter() if el.get("id")}
for k in list(want) + ["split-c-full", "split-py", "split-c-incr5", "split-c-full-ref"]:
    if "bar-" + k not in ids:
        sys.exit("FAIL: no element with id bar-%s" % k)
texts = " ".join("".join(el.itertext()) for el in root.iter(ns + "text"))
for t in ("Throughput", "Where a save's time goes", "fio write, best", "torch.save", "cp + sync",
          "persist (caller runs on)", "state 2.00 GiB"):
    if t not in texts:
        sys.exit("FAIL: text %r not in the SVG's text elements" % t)
if "not measured" in texts:
    sys.exit("FAIL: a full run says something was not measured")
print("full: %d bars as results.json gives them" % len(want))
PYEOF
# A C-only run: the Python rows are left out and named.
$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); [r.pop(k) for k in list(r) if k.startswith(("py_","ckpt_","torch_"))]; json.dump(r,open(sys.argv[2],"w"))' "$W/full.json" "$W/c.json"
$PY bench/plot.py "$W/c.json" "$W/c.svg" > /dev/null
grep -q "not measured in this run: Python load, Python save" "$W/c.svg" || { echo "FAIL: partial run does not name what is missing"; exit 1; }
if grep -q 'id="bar-pysave' "$W/c.svg"; then echo "FAIL: Python bars drawn without figures"; exit 1; fi
# PNG, by the output's name.
$PY bench/plot.py "$W/full.json" "$W/full.png" > /dev/null
[ "$(head -c 4 "$W/full.png" | tail -c 3)" = PNG ] || { echo "FAIL: full.png is not a PNG"; exit 1; }
# Nothing to draw: exit 1, one line naming the file.
echo '{"bench_time": "x"}' > "$W/none.json"
rc=0; $PY bench/plot.py "$W/none.json" "$W/none.svg" 2> "$W/err" || rc=$?
[ $rc = 1 ] && [ "$(wc -l < "$W/err")" = 1 ] && grep -q "holds none of the figures" "$W/err" || {
	echo "FAIL: empty results: exit $rc, $(cat "$W/err")"; exit 1; }
[ ! -e "$W/none.svg" ] || { echo "FAIL: a picture was written for empty results"; exit 1; }
# No matplotlib: exit 2, one line saying what to install.
mkdir -p "$W/nompl/matplotlib"
echo 'raise ImportError("no")' > "$W/nompl/matplotlib/__init__.py"
rc=0; PYTHONPATH=$W/nompl $PY bench/plot.py "$W/full.json" "$W/x.svg" 2> "$W/err" || rc=$?
[ $rc = 2 ] && grep -q "python3-matplotlib" "$W/err" || { echo "FAIL: without matplotlib: exit $rc, $(cat "$W/err")"; exit 1; }
echo "PASS"
