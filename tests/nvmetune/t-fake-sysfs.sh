#!/usr/bin/env bash
# nvmetune against a fake /sys, /dev and /proc (fake-tree.sh): status, plan, apply, rollback,
# persist, raid safety checks, bench, --json, and the error cases. Outputs are compared with the
# golden files in tests/nvmetune/golden/ (the temporary root is written as @ROOT@ there);
# NVMETUNE_BLESS=1 rewrites them. Every check asserts on output, exit status or file contents.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
BIN=$PWD/$B/bin/nvmetune
GOLD=$PWD/tests/nvmetune/golden
[ -x "$BIN" ] || { echo "FAIL: $BIN not built"; exit 1; }
. tests/nvmetune/fake-tree.sh
T=$(mktemp -d "${TMPDIR:-/tmp}/nvmetune-fake.XXXXXX")
trap 'rm -rf "$T"' EXIT
F=$T/root
S=$F/sys
N() { "$BIN" --sysfs-root "$S" --dev-root "$F/dev" --proc-root "$F/proc" --state "$T/state.json" "$@"; }

fail=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
# run NAME CMD...: output (stdout+stderr, root path replaced) in $T/NAME.out, status in $rc
run() {
	local n=$1; shift
	"$@" > "$T/$n.raw" 2>&1
	rc=$?
	sed "s|$F|@ROOT@|g; s|$T|@TMP@|g" "$T/$n.raw" > "$T/$n.out"
}
expect_rc() { [ "$rc" -eq "$2" ] && ok || { bad "$1: exit $rc, expected $2"; sed 's/^/    /' "$T/$1.out" | head -20; }; }
expect_out() { grep -qF -- "$2" "$T/$1.out" && ok || { bad "$1: output lacks '$2'"; sed 's/^/    /' "$T/$1.out" | head -20; }; }
expect_file() { # PATH CONTENT
	local got; got=$(cat "$1" 2>/dev/null || echo '<missing>')
	[ "$got" = "$2" ] && ok || bad "${1#"$F"/}: '$got', expected '$2'"
}
golden() { # NAME: compare $T/NAME.out with golden/NAME.txt (timestamps masked)
	sed -i -E 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z/@TIME@/g' "$T/$1.out"
	if [ "${NVMETUNE_BLESS:-0}" = 1 ]; then cp "$T/$1.out" "$GOLD/$1.txt"; ok; return; fi
	if diff -u "$GOLD/$1.txt" "$T/$1.out" > "$T/$1.diff"; then ok; else
		bad "$1: output differs from golden/$1.txt"; head -40 "$T/$1.diff" | sed 's/^/    /'; fi
}
chk() { # NAME RC MESSAGE CMD...
	local n=$1 want=$2 msg=$3; shift 3
	run "$n" "$@"; expect_rc "$n" "$want"; expect_out "$n" "$msg"
}
Q=$S/block

fake_tree "$F"

# ---- status -------------------------------------------------------------------------------------
run status N status; expect_rc status 0; golden status
run status_json N status --json; expect_rc status_json 0
python3 - "$T/status_json.raw" <<'EOF' && ok || bad "status --json content"
import json, sys
s = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in s["controllers"]}
assert sorted(c) == ["nvme0", "nvme1", "nvme2", "nvme3", "nvme4"], c
assert c["nvme0"]["serial"] == "FAKESN000" and c["nvme0"]["link_speed"] == "16.0 GT/s PCIe"
assert c["nvme0"]["pm_qos_latency_tolerance_us"] == "100000" and c["nvme1"]["pm_qos_latency_tolerance_us"] is None
assert c["nvme0"]["vwc_present"] is None and "not a controller device node" in c["nvme0"]["libnvme"]
assert [n["name"] for n in c["nvme2"]["namespaces"]] == ["nvme2n1"]  # multipath-style nvme2c2n1
assert c["nvme1"]["namespaces"][0]["array"] == "md0"
md = s["md_arrays"]
assert len(md) == 1 and md[0]["level"] == "raid0" and md[0]["members"] == ["nvme1n1", "nvme2n1"]
b = {d["name"]: d for d in s["block_devices"]}
assert b["nvme0n1"]["scheduler"] == "mq-deadline" and b["nvme0n1"]["write_cache"] == "write through"
assert s["aspm_policy"] == "default" and s["kernel"]["nvme_core.default_ps_max_latency_us"] == "100000"
EOF

# ---- plan ---------------------------------------------------------------------------------------
run plan N plan; expect_rc plan 0; golden plan
run plan_default N plan --profile default; expect_rc plan_default 0; golden plan_default
run plan_dev N plan /dev/nvme0n1 md0; expect_rc plan_dev 0; golden plan_dev
run plan_json N plan --json nvme0n1; expect_rc plan_json 0
python3 - "$T/plan_json.raw" <<'EOF' && ok || bad "plan --json content"
import json, sys
p = json.load(open(sys.argv[1]))
k = {(x["device"], x["knob"]): x for x in p["knobs"]}
assert p["profile"] == "checkpoint"
assert k[("nvme0n1", "scheduler")]["current"] == "mq-deadline" and k[("nvme0n1", "scheduler")]["target"] == "none"
assert k[("nvme0n1", "scheduler")]["action"] == "change" and k[("nvme0", "apst")]["target"] == "0"
assert k[("global", "aspm")]["target"] == "performance"
EOF

run plan_sda N plan sda; expect_rc plan_sda 0
expect_out plan_sda "sda       scheduler       mq-deadline    -              n/a         rotational device: a scheduler orders its seeks"
expect_out plan_sda "sda       max_sectors_kb  1280           4096           change      4 MiB (max_hw_sectors_kb 2147483647): larger requests gain nothing"
expect_out plan_sda "sda       read_ahead_kb   128            16384          change      no stripe: 4 maximum-size requests (4096 KiB)"

# ---- apply --dry-run writes nothing ---------------------------------------------------------------
before=$(cd "$F" && find sys -type f -exec sha256sum {} + | sort)
run apply_dry N apply --dry-run; expect_rc apply_dry 0; golden apply_dry
after=$(cd "$F" && find sys -type f -exec sha256sum {} + | sort)
[ "$before" = "$after" ] && ok || bad "apply --dry-run changed the tree"
[ ! -e "$T/state.json" ] && ok || bad "apply --dry-run wrote a state file"

# ---- apply with nothing to change saves no state ------------------------------------------------
run apply_none N apply --profile default nvme4n1; expect_rc apply_none 0
expect_out apply_none "profile default; nothing to change"
[ ! -e "$T/state.json" ] && ok || bad "an apply that changed nothing wrote a state file"

# ---- apply, read-back, state ----------------------------------------------------------------------
run apply N apply; expect_rc apply 0; golden apply
expect_file "$Q/nvme0n1/queue/scheduler" "none"
expect_file "$Q/nvme0n1/queue/read_ahead_kb" "2048"
expect_file "$Q/nvme0n1/queue/max_sectors_kb" "512"
expect_file "$Q/nvme0n1/queue/write_cache" "write back"
expect_file "$Q/nvme2n1/queue/max_sectors_kb" "512"
expect_file "$Q/nvme1n1/queue/read_ahead_kb" "128"
expect_file "$Q/md0/queue/read_ahead_kb" "4096"
expect_file "$Q/md0/queue/max_sectors_kb" "512"
expect_file "$S/class/nvme/nvme0/power/pm_qos_latency_tolerance_us" "0"
expect_file "$S/module/pcie_aspm/parameters/policy" "performance"
python3 - "$T/state.json" <<'EOF' && ok || bad "state file content"
import json, sys
s = json.load(open(sys.argv[1]))
prev = {(x["device"], x["knob"]): x["previous"] for x in s["saved"]}
assert s["version"] == 1 and s["profile"] == "checkpoint"
assert prev == {("global", "aspm"): "default", ("nvme0", "apst"): "100000",
                ("nvme0n1", "scheduler"): "mq-deadline", ("nvme0n1", "nr_requests"): "64",
                ("nvme0n1", "read_ahead_kb"): "128", ("nvme0n1", "max_sectors_kb"): "128",
                ("nvme0n1", "write_cache"): "write through", ("nvme2n1", "max_sectors_kb"): "256",
                ("nvme3n1", "read_ahead_kb"): "128", ("nvme4n1", "read_ahead_kb"): "128",
                ("md0", "read_ahead_kb"): "2048", ("md0", "max_sectors_kb"): "128"}, prev
# write order: scheduler before nr_requests, members before the array
order = [(x["device"], x["knob"]) for x in sorted(s["saved"], key=lambda x: x["order"])]
assert order.index(("nvme0n1", "scheduler")) < order.index(("nvme0n1", "nr_requests"))
assert max(i for i, o in enumerate(order) if o[0].startswith("nvme")) < order.index(("md0", "read_ahead_kb"))
EOF
# ---- plan --check: in tune after apply (exit 0); one knob changed behind nvmetune's back drifts
# (exit 8, that knob named, the others not), in text and JSON, as tuned-adm verify does
run check_tuned N plan --check; expect_rc check_tuned 0
expect_out check_tuned "in tune: all 23 knobs that apply are at the targets of profile checkpoint"
grep -q '^drift:' "$T/check_tuned.out" && bad "check_tuned: drift listed when in tune" || ok
echo 256 > "$Q/nvme3n1/queue/read_ahead_kb"
run check_drift N plan --check; expect_rc check_drift 8
expect_out check_drift "drift: nvme3n1   read_ahead_kb   256, target 2048 (change): no stripe: 4 maximum-size requests (512 KiB)"
expect_out check_drift "1 knob drifted from profile checkpoint (22 in tune); 'nvmetune apply' sets them"
[ "$(grep -c '^drift:' "$T/check_drift.out")" = 1 ] && ok || bad "check_drift: not exactly one drifted knob"
run check_drift_json N plan --check --json; expect_rc check_drift_json 8
python3 - "$T/check_drift_json.raw" <<'EOF2' && ok || bad "plan --check --json content"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["profile"] == "checkpoint" and j["in_tune"] is False, j
assert [(d["device"], d["knob"], d["current"], d["target"], d["action"]) for d in j["drift"]] == \
    [("nvme3n1", "read_ahead_kb", "256", "2048", "change")], j["drift"]
EOF2
run check_dev N plan --check nvme0n1; expect_rc check_dev 0   # only the devices named
echo 2048 > "$Q/nvme3n1/queue/read_ahead_kb"
run check_json N plan --check --json nvme3n1; expect_rc check_json 0
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["in_tune"] is True and j["drift"] == [], j' "$T/check_json.raw" && ok || bad "plan --check --json in tune"
# an explicit target a device cannot take is never in tune
printf 'scheduler = bfq\n' > "$T/bfq.profile"
run check_unsup N plan --check --profile "$T/bfq.profile" nvme1n1; expect_rc check_unsup 8
expect_out check_unsup "drift: nvme1n1   scheduler       none, target bfq (unsupported)"
# a second apply with another profile keeps the first saved values: rollback restores the original
printf 'read_ahead_kb = 8192\n' > "$T/ra.profile"
run apply2 N apply --profile "$T/ra.profile" nvme0n1; expect_rc apply2 0
expect_file "$Q/nvme0n1/queue/read_ahead_kb" "8192"

# one apply or rollback at a time
if command -v flock > /dev/null; then
	run busy flock "$T/state.json.lock" "$BIN" --sysfs-root "$S" --dev-root "$F/dev" --proc-root "$F/proc" --state "$T/state.json" rollback
	expect_rc busy 3
	expect_out busy "nvmetune: rollback: another nvmetune apply or rollback holds @TMP@/state.json.lock"
fi

# ---- rollback -----------------------------------------------------------------------------------
run rollback_dry N rollback --dry-run; expect_rc rollback_dry 0
expect_out rollback_dry "nvme0n1   read_ahead_kb   8192 -> 128                    dry-run"
expect_file "$Q/nvme0n1/queue/read_ahead_kb" "8192"
[ -e "$T/state.json" ] && ok || bad "rollback --dry-run removed the state file"
run rollback N rollback; expect_rc rollback 0; golden rollback
expect_file "$Q/nvme0n1/queue/scheduler" "mq-deadline"
expect_file "$Q/nvme0n1/queue/nr_requests" "64"
expect_file "$Q/nvme0n1/queue/read_ahead_kb" "128"
expect_file "$Q/nvme0n1/queue/max_sectors_kb" "128"
expect_file "$Q/nvme0n1/queue/write_cache" "write through"
expect_file "$Q/nvme2n1/queue/max_sectors_kb" "256"
expect_file "$Q/md0/queue/read_ahead_kb" "2048"
expect_file "$Q/md0/queue/max_sectors_kb" "128"
expect_file "$S/class/nvme/nvme0/power/pm_qos_latency_tolerance_us" "100000"
expect_file "$S/module/pcie_aspm/parameters/policy" "default"
[ ! -e "$T/state.json" ] && ok || bad "rollback left the state file"
run rollback_again N rollback; expect_rc rollback_again 4
expect_out rollback_again "nvmetune: rollback: @TMP@/state.json: no saved state (nothing applied, or already rolled back)"

# ---- writes that fail or do not take (fault injection in the fake tree) --------------------------
fake_tree "$F"
touch "$Q/nvme0n1/queue/read_ahead_kb.sticky"          # like md's scheduler: accepted, ignored
echo EINVAL > "$Q/nvme0n1/queue/max_sectors_kb.fail"     # like a value the device rejects
echo EPERM > "$S/module/pcie_aspm/parameters/policy.fail" # like pcie_aspm=off
run apply_faults N apply nvme0n1; expect_rc apply_faults 5; golden apply_faults
expect_file "$Q/nvme0n1/queue/read_ahead_kb" "128"
expect_file "$Q/nvme0n1/queue/scheduler" "none"
run apply_faults_json N apply --json nvme0n1; expect_rc apply_faults_json 5
python3 - "$T/apply_faults_json.raw" <<'EOF' && ok || bad "apply --json with faults"
import json, sys
a = json.load(open(sys.argv[1]))
r = {(x["device"], x["knob"]): x for x in a["results"]}
assert a["ok"] is False
assert r[("nvme0n1", "read_ahead_kb")]["result"] == "not-taken" and r[("nvme0n1", "read_ahead_kb")]["readback"] == "128"
assert r[("nvme0n1", "max_sectors_kb")]["result"] == "failed" and "EINVAL" in r[("nvme0n1", "max_sectors_kb")]["why"]
assert r[("global", "aspm")]["result"] == "failed" and "pcie_aspm=off" in r[("global", "aspm")]["why"]
EOF
rm -f "$Q"/nvme0n1/queue/*.sticky "$Q"/nvme0n1/queue/*.fail "$S"/module/pcie_aspm/parameters/*.fail
run rollback_faults N rollback --json; expect_rc rollback_faults 0
python3 - "$T/rollback_faults.raw" <<'EOF' && ok || bad "rollback --json"
import json, sys
r = json.load(open(sys.argv[1]))
res = {(x["device"], x["knob"]): x for x in r["results"]}
assert r["ok"] is True and r["dry_run"] is False
assert res[("nvme0n1", "scheduler")]["result"] == "ok" and res[("nvme0n1", "scheduler")]["readback"] == "mq-deadline"
assert res[("nvme0n1", "read_ahead_kb")]["result"] == "unchanged"
EOF
expect_file "$Q/nvme0n1/queue/scheduler" "mq-deadline"

# ---- unsupported knobs, explicit in a profile file ------------------------------------------------
fake_tree "$F"
printf '# explicit targets some devices cannot take\nscheduler = bfq\nnr_requests = 64\nmax_sectors_kb = 1024\napst = off\n' > "$T/unsup.profile"
run plan_unsup N plan --profile "$T/unsup.profile" nvme1n1 md0; expect_rc plan_unsup 0; golden plan_unsup
run apply_unsup N apply --profile "$T/unsup.profile" nvme1n1 md0; expect_rc apply_unsup 5
expect_out apply_unsup "nvme1     apst            - -> off                       unsupported: not supported by nvme1 (no APST: power/pm_qos_latency_tolerance_us absent)"
expect_out apply_unsup "md0       nr_requests     128 -> 64                      unsupported: md0 is an md array: no request queue of its own"
expect_file "$Q/nvme1n1/queue/nr_requests" "64"
expect_file "$Q/md0/queue/nr_requests" "128"
N rollback > /dev/null 2>&1

# ---- persist --------------------------------------------------------------------------------------
fake_tree "$F"
run persist N persist --rules "$T/rules/60-nvmetune.rules"; expect_rc persist 0
expect_out persist "kernel parameters to add (e.g. GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub): nvme_core.default_ps_max_latency_us=0 pcie_aspm=off"
cp "$T/rules/60-nvmetune.rules" "$T/persist_rules.out"; golden persist_rules
# A symbolic link planted at the temporary name the rules file was once written under (PATH.tmpPID;
# exec keeps the pid) is not written through: this runs as root, in /etc.
echo precious > "$T/victim"
run persist_planted bash -c 'ln -s "$1" "$2.tmp$$" && shift 2 && exec "$@"' _ "$T/victim" \
	"$T/rules/planted.rules" "$BIN" --sysfs-root "$S" --dev-root "$F/dev" --proc-root "$F/proc" \
	--state "$T/state.json" persist --rules "$T/rules/planted.rules"
expect_rc persist_planted 0
expect_file "$T/victim" precious
# The same rules as the first persist wrote (the header's timestamp masked: the two runs may fall in
# different seconds).
mask_time() { sed -E 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z/@TIME@/g' "$1"; }
cmp -s <(mask_time "$T/rules/planted.rules") <(mask_time "$T/rules/60-nvmetune.rules") && ok ||
	bad "persist_planted: rules differ"
# A serial holding udev pattern characters is not matched as a pattern (it would match other
# drives): the rule falls back to the kernel name.
for sn in 'FAKE*' 'FAKESN00?' 'FAKESN00[0-9]' 'FAKESN000|FAKESN004'; do
	printf '%s\n' "$sn" > "$S/class/nvme/nvme0/serial"
	run persist_glob N persist --dry-run --rules "$T/glob.rules"; expect_rc persist_glob 0
	grep -qF "ATTRS{serial}==\"$sn\"" "$T/persist_glob.out" && bad "persist: serial '$sn' used as a pattern" || ok
	expect_out persist_glob 'KERNEL=="nvme0n1", ATTR{queue/scheduler}="none"'
done
printf 'FAKESN000     \n' > "$S/class/nvme/nvme0/serial"
run persist_dry N persist --dry-run --rules "$T/dry.rules"; expect_rc persist_dry 0
[ ! -e "$T/dry.rules" ] && ok || bad "persist --dry-run wrote the rules file"
expect_out persist_dry 'KERNEL=="nvme*n*", ATTRS{serial}=="FAKESN000", ATTR{nsid}=="1", ATTR{queue/scheduler}="none"'
run persist_default N persist --profile default --dry-run; expect_rc persist_default 0
# mdadm.conf: the ARRAY line of each active array in nvmetune's block, the operator's lines kept,
# a rerun idempotent; a dry run prints it and writes nothing
run persist_md_dry N persist --dry-run --rules "$T/dry.rules" --mdadm-conf "$T/mdadm.conf"; expect_rc persist_md_dry 0
expect_out persist_md_dry "ARRAY /dev/md0 metadata=1.2 UUID=3f1c2a4e:8b7d4f20:9a615c0d:2e7b9a13"
expect_out persist_md_dry "would write to @TMP@/mdadm.conf:"
[ ! -e "$T/mdadm.conf" ] && ok || bad "persist --dry-run wrote mdadm.conf"
printf 'DEVICE partitions\nMAILADDR root\n# nvmetune: begin (arrays; rewritten by nvmetune persist)\nARRAY /dev/md9 metadata=1.2 UUID=0:0:0:0\n# nvmetune: end\n' > "$T/mdadm.conf"
run persist_md N persist --rules "$T/rules/60-nvmetune.rules" --mdadm-conf "$T/mdadm.conf"; expect_rc persist_md 0
expect_out persist_md "wrote the ARRAY lines of the active arrays to @TMP@/mdadm.conf"
expect_file "$T/mdadm.conf" "DEVICE partitions
MAILADDR root
# nvmetune: begin (arrays; rewritten by nvmetune persist)
ARRAY /dev/md0 metadata=1.2 UUID=3f1c2a4e:8b7d4f20:9a615c0d:2e7b9a13
# nvmetune: end"
cp "$T/mdadm.conf" "$T/mdadm.conf.1"
run persist_md_again N persist --rules "$T/rules/60-nvmetune.rules" --mdadm-conf "$T/mdadm.conf"; expect_rc persist_md_again 0
cmp -s "$T/mdadm.conf" "$T/mdadm.conf.1" && ok || bad "persist twice: mdadm.conf changed"
expect_out persist_default "kernel parameters to add: none"
run persist_json N persist --json --dry-run; expect_rc persist_json 0
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["rules"] == 7 and j["kernel_parameters"] == "nvme_core.default_ps_max_latency_us=0 pcie_aspm=off", j' "$T/persist_json.raw" && ok || bad "persist --json"

# ---- raid: safety checks and the exact mdadm command -----------------------------------------------
run raid_refuse N raid create --level 0 --dry-run /dev/nvme0n1 /dev/nvme1n1 /dev/nvme3n1 /dev/nvme4n1
expect_rc raid_refuse 6; golden raid_refuse
run raid_force N raid create --level 10 --layout f2 --chunk 1M --bitmap internal --assume-clean --name ckpt --dry-run --force nvme0n1 nvme1n1 nvme3n1 nvme4n1
expect_rc raid_force 0
expect_out raid_force "mdadm --create @ROOT@/dev/md1 --run --metadata=1.2 --level=10 --layout=f2 --chunk=1024K --bitmap=internal --assume-clean --name=ckpt --raid-devices=4 @ROOT@/dev/nvme0n1 @ROOT@/dev/nvme1n1 @ROOT@/dev/nvme3n1 @ROOT@/dev/nvme4n1"
expect_out raid_force "nvmetune: raid create: @ROOT@/dev/nvme3n1: carries a filesystem signature (ext4); overriding (--force)"
run raid_ok N raid create --level 0 --dry-run --md /dev/md5 nvme4n1 /dev/nvme2n1
expect_rc raid_ok 6    # nvme2n1 is held by md0
expect_out raid_ok "@ROOT@/dev/nvme2n1: refused: held by md0"
run raid_status N raid status; expect_rc raid_status 0
expect_out raid_status "md0      raid0   chunk 512.0 KiB layout -    disks 2   size 128.0 MiB  state clean members: nvme1n1 nvme2n1"
run raid_status_json N raid status --json md0; expect_rc raid_status_json 0
python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["arrays"]; assert a[0]["chunk_bytes"]==524288 and a[0]["layout"] is None' "$T/raid_status_json.raw" && ok || bad "raid status --json"
run raid_stop_mounted N raid stop --dry-run md0; expect_rc raid_stop_mounted 0
expect_out raid_stop_mounted "mdadm --stop @ROOT@/dev/md0"

# ---- raid create / assemble without a md driver: a real run is refused before mdadm;
# a dry run prints its plan all the same, with a warning that the real run would be refused, and
# honours --json. With moved roots the fake /proc/mdstat is the whole truth (no module is looked
# up or loaded).
mv "$F/proc/mdstat" "$T/mdstat"
nomd="this kernel has no md driver: @ROOT@/proc/mdstat is absent (md is neither loaded nor built in) (moved roots: no module is looked up)"
fix="load it with 'modprobe md_mod', or boot a kernel built with CONFIG_BLK_DEV_MD"
run nomd_dry N raid create --level 0 --dry-run nvme4n1 nvme3n1 --force; expect_rc nomd_dry 0
expect_out nomd_dry "nvmetune: raid create: warning: $nomd; a real run would be refused ($fix)"
expect_out nomd_dry "mdadm --create @ROOT@/dev/md1 --run --metadata=1.2 --level=0 --chunk=512K --raid-devices=2 @ROOT@/dev/nvme4n1 @ROOT@/dev/nvme3n1"
run nomd_dry_json N raid create --level 0 --dry-run --json nvme4n1 nvme3n1 --force; expect_rc nomd_dry_json 0
sed -n '/^{/,$p' "$T/nomd_dry_json.raw" > "$T/nomd_dry_json.json"
python3 - "$T/nomd_dry_json.json" "$F" <<'EOF2' && ok || bad "raid create --dry-run --json without md: $(cat "$T/nomd_dry_json.raw")"
import json, sys
j = json.load(open(sys.argv[1]))
root = sys.argv[2]
assert j["dry_run"] is True and j["md"] == root + "/dev/md1", j
assert j["command"][:2] == ["mdadm", "--create"] and j["command"][-1] == root + "/dev/nvme3n1", j
assert j["modprobe"] == [] and len(j["warnings"]) == 1, j
assert j["warnings"][0].startswith("this kernel has no md driver: ") and "a real run would be refused" in j["warnings"][0], j
EOF2
run nomd_real N raid create --level 0 nvme4n1 nvme3n1 --force; expect_rc nomd_real 1
expect_out nomd_real "nvmetune: raid create: $nomd; nothing was done ($fix)"
grep -q '^mdadm' "$T/nomd_real.out" && bad "nomd_real: printed an mdadm command" || ok
run nomd_refused N raid create --level 0 --dry-run nvme4n1 nvme3n1; expect_rc nomd_refused 6  # devices first
run nomd_assemble N raid assemble --dry-run /dev/md7 nvme1n1 nvme2n1; expect_rc nomd_assemble 0
expect_out nomd_assemble "nvmetune: raid assemble: warning: $nomd; a real run would be refused ($fix)"
run nomd_scan N raid assemble; expect_rc nomd_scan 1
expect_out nomd_scan "nvmetune: raid assemble: $nomd; nothing was done ($fix)"
# md loaded with RAID 0 only: RAID 10 is refused, naming the personalities there are
sed 's/ \[raid10\]//' "$T/mdstat" > "$F/proc/mdstat"
nopers="this kernel has no md driver for RAID 10: @ROOT@/proc/mdstat lists no personality [raid10] (Personalities : [raid0]) (moved roots: no module is looked up)"
run nopers N raid create --level 10 --force nvme4n1 nvme3n1; expect_rc nopers 1
expect_out nopers "nvmetune: raid create: $nopers; nothing was done (load it with 'modprobe raid10', or boot a kernel built with CONFIG_MD_RAID10)"
run nopers_dry N raid create --level 10 --dry-run --force nvme4n1 nvme3n1; expect_rc nopers_dry 0
expect_out nopers_dry "nvmetune: raid create: warning: $nopers; a real run would be refused"
expect_out nopers_dry "mdadm --create @ROOT@/dev/md1 --run --metadata=1.2 --level=10"
run pers0 N raid create --level 0 --dry-run --force nvme4n1 nvme3n1; expect_rc pers0 0
expect_out pers0 "mdadm --create @ROOT@/dev/md1 --run --metadata=1.2 --level=0"
grep -q '^modprobe\|warning' "$T/pers0.out" && bad "pers0: a modprobe line or warning with md loaded" || ok
mv "$T/mdstat" "$F/proc/mdstat"
# assemble from a given mdadm.conf (the one persist writes): mdadm --assemble --scan --config=FILE
chk raid_assemble_conf 0 "mdadm --assemble --scan --config=@TMP@/mdadm.conf" N raid assemble --dry-run --config "$T/mdadm.conf"
chk raid_assemble_noconf 4 "nvmetune: raid assemble: --config @TMP@/none.conf: No such file or directory" N raid assemble --dry-run --config "$T/none.conf"
chk raid_assemble_confmd 2 "--config applies without MD" N raid assemble --dry-run --config "$T/mdadm.conf" md7 nvme1n1 nvme2n1

# ---- bench on a directory (temporary file removed) and refusal on a device -------------------------
mkdir -p "$T/benchdir"
printf 'store_path = /mnt/ckpt\n\n# mine\nio_queue_depth = 2\n' > "$T/libckpt.conf"
run bench N bench --size 4M --config "$T/libckpt.conf" "$T/benchdir"; expect_rc bench 0
expect_out bench "recommended: io_queue_depth = "
[ -z "$(ls -A "$T/benchdir")" ] && ok || bad "bench left files in the directory"
grep -qx 'store_path = /mnt/ckpt' "$T/libckpt.conf" && grep -qx '# mine' "$T/libckpt.conf" &&
	[ "$(grep -c '^$' "$T/libckpt.conf")" = 1 ] && ok || bad "bench dropped unrelated config lines: $(cat "$T/libckpt.conf")"
[ "$(grep -c '^io_queue_depth = ' "$T/libckpt.conf")" = 1 ] && grep -qE '^io_size_bytes = [0-9]+$' "$T/libckpt.conf" &&
	grep -qE "^# nvmetune bench at .* for $T/benchdir: best write" "$T/libckpt.conf" && ok || bad "bench config: $(cat "$T/libckpt.conf")"
# A directory name holding a newline adds no line to the config.
nl_dir="$T/bench"$'\n'"io_size_bytes = 7"
mkdir -p "$nl_dir"
run bench_nl N bench --size 4M --config "$T/libckpt-nl.conf" "$nl_dir"; expect_rc bench_nl 0
[ "$(wc -l < "$T/libckpt-nl.conf")" = 3 ] && ! grep -q '^io_size_bytes = 7' "$T/libckpt-nl.conf" &&
	grep -qF 'bench\x0aio_size_bytes = 7: best write' "$T/libckpt-nl.conf" && ok ||
	bad "bench: a newline in the directory name reached the config: $(cat "$T/libckpt-nl.conf")"
run bench_dev N bench --size 4M --no-config /dev/nvme3n1; expect_rc bench_dev 6
# A disk whose protective MBR and primary GPT were wiped still has its backup GPT in the last
# sector (wipefs sees it, libblkid's safe probe does not): bench and raid create refuse it too.
# nvme4n1 is blank again afterwards.
truncate -s 64M "$F/dev/nvme4n1" && python3 tests/nvmetune/mkgpt.py "$F/dev/nvme4n1" --backup-only
run bench_gpt N bench --size 4M --no-config /dev/nvme4n1; expect_rc bench_gpt 6
expect_out bench_gpt "nvmetune: bench: @ROOT@/dev/nvme4n1: refused: carries a signature only a full probe finds (gpt at offset 67108352; wipefs lists it)"
run raid_gpt N raid create --level 0 --dry-run nvme4n1 /dev/nvme0n1; expect_rc raid_gpt 6
expect_out raid_gpt "@ROOT@/dev/nvme4n1: refused: carries a signature only a full probe finds (gpt at offset 67108352"
run raid_gpt_force N raid create --level 0 --dry-run --force nvme4n1 /dev/nvme1n1; expect_rc raid_gpt_force 0
: > "$F/dev/nvme4n1"
expect_out bench_dev "nvmetune: bench: @ROOT@/dev/nvme3n1: refused: carries a filesystem signature (ext4) (bench overwrites it; --force to allow)"

# ---- errors and usage -----------------------------------------------------------------------------
chk e_nodev 4 "nvmetune: /dev/nvme9n1: no such block device" N plan /dev/nvme9n1
chk e_nodev_apply 4 "nvmetune: nvme7n1: no such block device" N apply nvme7n1
chk e_raid_nodev 4 "nvmetune: raid create: /dev/nvme9n1: no such block device" N raid create --level 0 --dry-run nvme4n1 /dev/nvme9n1
chk e_stop_nomd 4 "nvmetune: raid stop: nvme4n1: no such md array" N raid stop nvme4n1
# raid add / replace / assemble: the exact mdadm command; new devices pass the safety checks
chk raid_add 0 "mdadm @ROOT@/dev/md0 --add @ROOT@/dev/nvme4n1" N raid add --dry-run md0 /dev/nvme4n1
chk raid_add_refused 6 "nvmetune: raid add: @ROOT@/dev/nvme3n1: refused: carries a filesystem signature (ext4)" N raid add --dry-run md0 nvme3n1
chk raid_add_force 0 "mdadm @ROOT@/dev/md0 --add @ROOT@/dev/nvme3n1" N raid add --dry-run --force md0 nvme3n1
chk raid_add_nomd 4 "nvmetune: raid add: nvme4n1: no such md array" N raid add --dry-run nvme4n1 nvme3n1
chk raid_add_args 2 "expected MD and the device(s) to add" N raid add --dry-run md0
chk raid_replace 0 "mdadm @ROOT@/dev/md0 --add @ROOT@/dev/nvme4n1 --replace @ROOT@/dev/nvme1n1 --with @ROOT@/dev/nvme4n1" N raid replace --dry-run md0 nvme1n1 nvme4n1
chk raid_replace_member 4 "nvmetune: raid replace: nvme4n1 is not a member of /dev/md0" N raid replace --dry-run md0 nvme4n1 nvme3n1
chk raid_replace_refused 6 "nvmetune: raid replace: @ROOT@/dev/nvme3n1: refused: carries a filesystem signature (ext4)" N raid replace --dry-run md0 nvme1n1 nvme3n1
# a spare of the array (raid add) is used as it is: no second --add, no refusal for being held
mkdir -p "$S/block/md0/slaves/nvme4n1" "$S/block/nvme4n1/holders/md0" "$S/block/md0/md/dev-nvme4n1"
echo spare > "$S/block/md0/md/dev-nvme4n1/state"
chk raid_replace_spare 0 "mdadm @ROOT@/dev/md0 --replace @ROOT@/dev/nvme1n1 --with @ROOT@/dev/nvme4n1" N raid replace --dry-run md0 nvme1n1 nvme4n1
grep -q -- '--add' "$T/raid_replace_spare.out" && bad "raid_replace_spare: adds the spare again" || ok
echo in_sync > "$S/block/md0/md/dev-nvme4n1/state"   # an active member is no replacement
chk raid_replace_insync 6 "nvmetune: raid replace: @ROOT@/dev/nvme4n1: refused: held by md0" N raid replace --dry-run md0 nvme1n1 nvme4n1
rm -rf "$S/block/md0/slaves/nvme4n1" "$S/block/nvme4n1/holders/md0" "$S/block/md0/md/dev-nvme4n1"
chk raid_assemble_scan 0 "mdadm --assemble --scan" N raid assemble --dry-run
chk raid_assemble 0 "mdadm --assemble @ROOT@/dev/md7 --run @ROOT@/dev/nvme1n1 @ROOT@/dev/nvme2n1" N raid assemble --dry-run /dev/md7 nvme1n1 nvme2n1
chk raid_assemble_active 1 "nvmetune: raid assemble: /dev/md0 is already an active array (raid0)" N raid assemble --dry-run md0 nvme1n1 nvme2n1
chk raid_assemble_args 2 "or MD and its members" N raid assemble --dry-run md0
# format: the LBA format needs the controller (a fake node is none); bad input
chk format_fake 1 "nvmetune: format: nvme0n1: cannot read the LBA formats: @ROOT@/dev/nvme0 is not a controller device node" N format --dry-run nvme0n1
chk format_nodev 4 "nvmetune: format: nvme9n1: no such NVMe namespace" N format --dry-run nvme9n1
chk format_md 4 "nvmetune: format: md0: no such NVMe namespace" N format --dry-run md0
chk format_args 2 "name one NVMe namespace" N format
chk format_lbaf 2 "bad --lbaf 'x': expected 0 to 63" N format --lbaf x nvme0n1
chk raid_sub_unknown 2 "unknown subcommand 'grow' (create, status, stop, add, replace, assemble)" N raid grow
printf 'scheduler = none\nturbo = on\n' > "$T/p1"
chk e_knob 2 "nvmetune: profile @TMP@/p1:2: unknown knob 'turbo'" N plan --profile "$T/p1"
printf 'read_ahead_kb = lots\n' > "$T/p2"
chk e_value 2 "nvmetune: profile @TMP@/p2:1: bad value 'lots' for read_ahead_kb: expected a positive integer, or keep/auto/default" N plan --profile "$T/p2"
printf 'just words\n' > "$T/p3"
chk e_syntax 2 "nvmetune: profile @TMP@/p3:1: expected 'knob = value', got 'just words'" N apply --profile "$T/p3"
printf 'scheduler = none\ninherit = default\n' > "$T/p4"
chk e_inherit 2 "'inherit' must come first" N plan --profile "$T/p4"
chk e_nofile 4 "nvmetune: profile @TMP@/none.profile: No such file or directory" N plan --profile "$T/none.profile"
chk e_noname 2 "nvmetune: unknown profile 'turbo': expected checkpoint, default, or a profile file" N plan --profile turbo
chk e_opt 2 "nvmetune: plan: unknown option '--bogus'" N plan --bogus
chk e_opt_near 2 "nvmetune: apply: unknown option '--dryrun'; did you mean '--dry-run'?" N apply --dryrun
chk e_opt_value 2 "nvmetune: raid create: option '--chunk' needs a value" N raid create --level 0 nvme3n1 --chunk
chk e_cmd 2 "nvmetune: unknown command 'tune'" N tune
chk e_status_arg 2 "nvmetune: status: unexpected argument 'nvme0n1'" N status nvme0n1
chk e_level 2 "--level 0 or --level 10 is required" N raid create nvme3n1 nvme4n1
chk e_level5 2 "--level 0 or --level 10 is required" N raid create --level 5 nvme3n1 nvme4n1
chk e_layout0 2 "--layout applies to RAID 10 only" N raid create --level 0 --layout f2 nvme3n1 nvme4n1
chk e_layout 2 "bad layout 'x3': n2, f2 or o2" N raid create --level 10 --layout x3 nvme3n1 nvme4n1
chk e_chunk 2 "bad chunk size '3K'" N raid create --level 0 --chunk 3K nvme3n1 nvme4n1
chk e_one 2 "at least 2 devices are needed" N raid create --level 0 nvme4n1
chk e_twice 2 "nvme4n1 is named twice" N raid create --level 0 nvme4n1 /dev/nvme4n1
chk raid_size 0 "mdadm --create @ROOT@/dev/md1 --run --metadata=1.2 --level=10 --layout=n2 --chunk=512K --bitmap=none --size=65536K --raid-devices=2 @ROOT@/dev/nvme3n1 @ROOT@/dev/nvme4n1" N raid create --level 10 --size 64M --dry-run --force nvme3n1 nvme4n1
chk e_size_big 2 "nvmetune: raid create: --size 1.0 GiB exceeds nvme3n1 (128.0 MiB)" N raid create --level 10 --size 1G --dry-run --force nvme3n1 nvme4n1
chk e_size0 2 "--size applies to RAID 10 only" N raid create --level 0 --size 64M --dry-run nvme3n1 nvme4n1
chk e_size_small 2 "--size is smaller than the chunk" N raid create --level 10 --size 1M --chunk 2M nvme3n1 nvme4n1
chk e_bitmap0 2 "RAID 0 has no redundancy" N raid create --level 0 --bitmap internal nvme3n1 nvme4n1
chk e_raidsub 2 "nvmetune: raid: unknown subcommand 'grow'" N raid grow
chk e_rollback_args 2 "takes no profile or devices" N rollback nvme0n1
chk e_sysroot 4 "nvmetune: sysfs root /nonexistent/sys: No such file or directory" "$BIN" --sysfs-root /nonexistent/sys status
echo '{"version": 1, "saved": [{"knob": "turbo"}]}' > "$T/state.json"
chk e_badstate 1 "not a valid nvmetune state file" N rollback
chk e_badstate_apply 1 "not a valid nvmetune state file; fix or remove it" N apply
rm -f "$T/state.json"
# root is checked before anything is touched (real roots: the check is skipped for fake trees)
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
	chk e_notroot 7 "nvmetune: apply: must be run as root" setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN" --state "$T/x.json" apply
	chk e_notroot_raid 7 "nvmetune: raid create: must be run as root" setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN" raid create --level 0 /dev/null /dev/zero
	# Permission problems are exit 7 and say so, never a refusal (6) that points at --force; bench
	# checks that it can write its config before the sweep, not after.
	chmod 755 "$T"
	chmod 600 "$F/dev/nvme4n1"
	chk e_perm_raid_dry 7 "nvmetune: raid create: cannot read @ROOT@/dev/nvme4n1: Permission denied: the safety checks need to look at it (run as root)" setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN" --sysfs-root "$S" --dev-root "$F/dev" --proc-root "$F/proc" --state "$T/state.json" raid create --level 0 --dry-run nvme4n1 nvme2n1
	chmod 644 "$F/dev/nvme4n1"
	mkdir -p "$T/roconf" "$T/benchnb" && chmod 777 "$T/benchnb"
	chk e_perm_bench 7 "nvmetune: bench: cannot write @TMP@/roconf/libckpt.conf: Permission denied (run as root, or --config FILE, or --no-config)" setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN" bench --size 4M --config "$T/roconf/libckpt.conf" "$T/benchnb"
	grep -q "MiB/s" "$T/e_perm_bench.out" && bad "e_perm_bench: the sweep ran before the config check" || ok
	chmod 700 "$T"
fi
NVMETUNE_SYSFS_ROOT=$S run env_root "$BIN" --dev-root "$F/dev" --proc-root "$F/proc" plan nvme0n1
expect_rc env_root 0; expect_out env_root "nvme0n1   scheduler       mq-deadline    none           change"

# ---- help -----------------------------------------------------------------------------------------
run help N --help; expect_rc help 0; expect_out help "--sysfs-root DIR"
for c in status plan apply rollback raid persist bench; do
	run "help_$c" N "$c" --help; expect_rc "help_$c" 0; expect_out "help_$c" "Usage: nvmetune $c"
done
run version N --version; expect_rc version 0; expect_out version "nvmetune "

echo "$pass checks passed, $fail failed"
[ "$fail" -eq 0 ]
