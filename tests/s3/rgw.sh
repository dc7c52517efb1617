#!/usr/bin/env bash
# A real S3 endpoint for the tests: a single-node Ceph (1 mon, 1 OSD on memstore, radosgw/beast; no
# mgr, no systemd) in a scratch directory, on free ports of 127.0.0.1.
#
# Sourced by a test (bash):
#   . tests/s3/rgw.sh
#   rgw_require              exits 77 (skip) when the radosgw packages are missing, saying so
#   rgw_start [DIR]          starts it (DIR: an empty scratch directory, default a new mktemp one),
#                            installs a trap that stops it on exit, and exports RGW_ENDPOINT,
#                            AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION
#   rgw_user UID AK SK       creates another S3 user with those keys
#   rgw_admin ARGS...        runs radosgw-admin against it (quotas, listings)
#   rgw_kill_gw              kill -9 of radosgw alone (the cluster under it stays)
#   rgw_start_gw             starts radosgw again on the same port and waits until it answers
#   rgw_stop                 stops exactly the processes rgw_start started, newest first
# Run as a program: `tests/s3/rgw.sh start DIR` leaves it running and prints the exports (for a
# shell: eval "$(tests/s3/rgw.sh start DIR)"); `tests/s3/rgw.sh stop DIR` stops it and removes DIR.
#
# Every wait polls its condition against a deadline (RGW_DEADLINE seconds each, default 60); the
# processes are started in the foreground (-f) as this shell's children, so their PIDs are known
# exactly ($RGW_DIR/pids) and nothing else is ever killed. Logs: $RGW_DIR/log/ (kept on failure).
# The OSD keeps its data in RAM (memstore, RGW_MEMSTORE_MB, default 1024): size it to the test.
# RGW_EXTRA_CONF: more lines for radosgw's section of ceph.conf.

RGW_DEADLINE=${RGW_DEADLINE:-60}
RGW_AK=CKPTTESTACCESSKEY0001
RGW_SK=ckpttestsecretkey00000000000000000000001

rgw_require() {
	local c missing=""
	for c in ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool python3; do
		command -v "$c" >/dev/null 2>&1 || missing="$missing $c"
	done
	if [ -n "$missing" ]; then
		echo "skip: the radosgw packages are missing (no$missing): install tools/deps.d/s3.test (sh tools/install-deps.sh test)"
		exit 77
	fi
}

# A port of 127.0.0.1 free now (the kernel's choice for a bind to port 0).
rgw_free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# True while PID runs (a zombie does not count: it has exited).
rgw_alive() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "${st:0:1}" != Z ]
}

# rgw_wait WHAT CMD...: runs CMD until it succeeds, at most RGW_DEADLINE seconds.
rgw_wait() {
	local what=$1 end=$((SECONDS + RGW_DEADLINE))
	shift
	until "$@" >/dev/null 2>&1; do
		if [ $SECONDS -ge $end ]; then
			echo "rgw.sh: $what not within ${RGW_DEADLINE}s (logs in $RGW_DIR/log)" >&2
			tail -n 20 "$RGW_DIR"/log/*.log >&2 2>/dev/null
			return 1
		fi
		sleep 0.1
	done
}

# True when radosgw answers an anonymous GET / with a 200 (bash's /dev/tcp: no curl needed).
rgw_answers() {
	local line
	exec 9<>"/dev/tcp/127.0.0.1/$RGW_PORT" || return 1
	printf 'GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&9
	IFS= read -r -t 5 line <&9
	exec 9<&- 9>&-
	[[ "$line" == "HTTP/1."?" 200"* ]]
}

rgw_osd_up() { ceph --connect-timeout 10 osd dump 2>/dev/null | grep -q '^osd\.0 up'; }

# Starts one daemon in the foreground in the background, records its PID.
rgw_spawn() {
	local name=$1
	shift
	"$@" -f </dev/null >>"$RGW_DIR/log/$name.out" 2>&1 &
	echo $! >>"$RGW_DIR/pids"
	eval "RGW_PID_$name=$!"
}

rgw_write_conf() {
	local fsid=$1
	cat >"$CEPH_CONF" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$RGW_MON_PORT]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $RGW_DIR/keyring
run dir = $RGW_DIR/run
admin socket = $RGW_DIR/run/\$name.asok
log file = $RGW_DIR/log/\$name.log
pid file = $RGW_DIR/run/\$name.pid
log to stderr = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
# One host: CRUSH must place replicas on OSDs, not hosts (read at mon --mkfs).
osd crush chooseleaf type = 0
# Each pool that rgw creates waits for a paxos round: the defaults cost about 2 s a pool.
paxos propose interval = 0.05
paxos min wait = 0.01
[mon]
mon data = $RGW_DIR/mon/\$cluster-\$id
[osd]
osd data = $RGW_DIR/osd/\$cluster-\$id
osd objectstore = memstore
memstore device bytes = $(( ${RGW_MEMSTORE_MB:-1024} * 1024 * 1024 ))
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw data = $RGW_DIR/rgw
rgw thread pool size = 64
# Virtual-hosted requests name the bucket in the host: BUCKET.localhost (libcurl resolves
# *.localhost to loopback by itself).
rgw dns name = localhost
# The tests' quota case must see its limit at once, not after a stats refresh.
rgw user quota bucket sync interval = 0
rgw user quota sync interval = 0
rgw bucket quota ttl = 0
rgw user quota ttl = 0
EOF
}

# One keyring for every daemon and the admin; mon --mkfs imports it, caps included.
rgw_keyring() {
	local k=$RGW_DIR/keyring
	ceph-authtool --create-keyring "$k" --gen-key -n mon. --cap mon 'allow *' >/dev/null &&
	ceph-authtool "$k" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
		--cap mgr 'allow *' >/dev/null &&
	ceph-authtool "$k" --gen-key -n osd.0 --cap mon 'allow profile osd' --cap osd 'allow *' \
		>/dev/null &&
	ceph-authtool "$k" --gen-key -n client.rgw.a --cap mon 'allow rw' --cap osd 'allow rwx' \
		>/dev/null
}

rgw_start_gw() {
	rgw_spawn gw radosgw -n client.rgw.a || return 1
	rgw_wait "radosgw answering on 127.0.0.1:$RGW_PORT" rgw_answers
}

rgw_kill_gw() {
	[ -n "${RGW_PID_gw:-}" ] || return 0
	kill -9 "$RGW_PID_gw" 2>/dev/null
	wait "$RGW_PID_gw" 2>/dev/null
	RGW_PID_gw=
}

rgw_admin() { radosgw-admin -n client.admin "$@"; }

rgw_user() {
	rgw_admin user create --uid="$1" --display-name="$1" --access-key="$2" --secret-key="$3" >/dev/null
}

# Brings the cluster up; on failure stops what it started and returns 1.
rgw_up() {
	local fsid osd_uuid
	mkdir -p "$RGW_DIR"/{run,log,mon,osd/ceph-0,rgw} && : >"$RGW_DIR/pids" || return 1
	RGW_MON_PORT=$(rgw_free_port) && RGW_PORT=$(rgw_free_port) || return 1
	fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
	osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
	export CEPH_CONF=$RGW_DIR/ceph.conf
	rgw_write_conf "$fsid" && rgw_keyring || return 1
	monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$RGW_MON_PORT]" \
		"$RGW_DIR/monmap" >/dev/null || return 1
	ceph-mon --mkfs -i a --monmap "$RGW_DIR/monmap" --keyring "$RGW_DIR/keyring" || return 1
	rgw_spawn mon ceph-mon -i a || return 1
	ceph --connect-timeout "$RGW_DEADLINE" osd new "$osd_uuid" >/dev/null || return 1
	ceph-osd -i 0 --mkfs --osd-uuid "$osd_uuid" >"$RGW_DIR/log/osd-mkfs.out" 2>&1 || return 1
	rgw_spawn osd ceph-osd -i 0 || return 1
	rgw_wait "osd.0 up" rgw_osd_up || return 1
	rgw_start_gw || return 1
	rgw_user ckpt "$RGW_AK" "$RGW_SK" || return 1
	export RGW_ENDPOINT=http://127.0.0.1:$RGW_PORT
	export AWS_ENDPOINT_URL=$RGW_ENDPOINT AWS_ACCESS_KEY_ID=$RGW_AK AWS_SECRET_ACCESS_KEY=$RGW_SK
	export AWS_REGION=us-east-1
}

rgw_start() {
	RGW_DIR=${1:-$(mktemp -d "${TMPDIR:-/tmp}/ckpt-rgw.XXXXXX")} || return 1
	mkdir -p "$RGW_DIR" && RGW_DIR=$(cd "$RGW_DIR" && pwd) || return 1
	if [ -n "$(ls -A "$RGW_DIR")" ]; then
		echo "rgw.sh: $RGW_DIR is not empty" >&2
		return 1
	fi
	RGW_KEEP_LOGS=0
	[ "${RGW_NO_TRAP:-0}" = 1 ] || trap 'rgw_stop' EXIT
	local t0=$SECONDS
	if ! rgw_up; then
		RGW_KEEP_LOGS=1
		rgw_stop
		return 1
	fi
	echo "rgw.sh: $RGW_ENDPOINT ready in $((SECONDS - t0)) s (scratch $RGW_DIR)" >&2
}

# Kills the recorded PIDs newest first (radosgw, OSD, mon: an OSD without its mon waits 5 s for
# an acknowledgement), each with TERM, then KILL after 10 s; removes the scratch directory unless
# the start failed (its logs are the diagnosis).
rgw_stop() {
	local p i
	[ -n "${RGW_DIR:-}" ] && [ -f "$RGW_DIR/pids" ] || return 0
	for p in $(tac "$RGW_DIR/pids"); do
		rgw_alive "$p" || continue
		kill "$p" 2>/dev/null
		for ((i = 0; i < 100; i++)); do rgw_alive "$p" || break; sleep 0.1; done
		rgw_alive "$p" && kill -9 "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	: >"$RGW_DIR/pids"
	if [ "${RGW_KEEP_LOGS:-0}" = 1 ]; then
		echo "rgw.sh: logs kept in $RGW_DIR/log" >&2
	else
		rm -rf "$RGW_DIR"
	fi
	RGW_DIR=
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	case "${1:-}" in
	start)
		rgw_require
		RGW_NO_TRAP=1 rgw_start "${2:-}" || exit 1
		printf 'export RGW_DIR=%s RGW_ENDPOINT=%s AWS_ENDPOINT_URL=%s AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s AWS_REGION=%s\n' \
			"$RGW_DIR" "$RGW_ENDPOINT" "$AWS_ENDPOINT_URL" "$AWS_ACCESS_KEY_ID" \
			"$AWS_SECRET_ACCESS_KEY" "$AWS_REGION"
		;;
	stop)
		RGW_DIR=$(cd "${2:?usage: rgw.sh stop DIR}" && pwd) || exit 1
		rgw_stop
		;;
	*)
		echo "usage: $0 start [DIR] | stop DIR" >&2
		exit 2
		;;
	esac
fi
