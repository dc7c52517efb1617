#!/usr/bin/env bash
# A replacement node's view of a remote (a directory remote here): `ckptctl list --remote URL`
# with no local store lists the stores there (id, host and path of the pusher, newest step,
# checkpoints, bytes; text and --json), also for a STORE that does not exist; a pull that must
# pick among several stores names --store-id and shows them; `push --all` sends every checkpoint
# the remote lacks, oldest first, with a progress line each; a directory remote is created by the
# first push.
. tests/cli/lib.sh
unset CKPT_STORE CKPT_REMOTE

R=$T/remote/a/b # not there: the first push makes it
j() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

for s in 1 2 3; do mkst model "$T/m$s.safetensors" "$s"; done
for s in 1 2 3; do ckptctl import -q "$STORE" --step "${s}0" "$T/m$s.safetensors" || exit 1; done
ckptctl import -q "$T/s2" --step 5 "$T/m1.safetensors" || exit 1

# push --all to a remote directory that does not exist yet.
ckptctl push "$STORE" 10 --remote "$R" > "$T/out" 2> "$T/err"
expect "the first push creates the remote directory" test $? = 0 -a -d "$R/libckpt1"
expect "and says so" grep -q "created the remote directory $R" "$T/err"
ckptctl push "$STORE" --all --remote "$R" > "$T/out" 2> "$T/err"
expect "push --all succeeds" test $? = 0
expect "push --all pushes what the remote lacks, oldest first" test \
	"$(grep -o '^pushed step [0-9]*' "$T/out" | tr '\n' ' ')" = "pushed step 20 pushed step 30 "
expect "and sums it up" grep -q "^pushed 2 checkpoints (.*) to $R; 1 already there$" "$T/out"
expect "push --all again has nothing to push" test \
	"$(ckptctl push "$STORE" --all --remote "$R")" = "nothing to push: $R has all 3 checkpoints"
ckptctl push "$T/s2" --all --remote "$R" --json > "$T/out" || exit 1
expect "push --all --json ($(tr -d ' \n' < "$T/out"))" test \
	"$(j 'd["steps_pushed"], d["checkpoints_present"], d["packs_sent"] > 0' < "$T/out")" = "[5] 0 True"
ckptctl push "$STORE" 20 --all --remote "$R" > /dev/null 2> "$T/err"
expect "push --all with a STEP is a usage error (2)" test $? = 2
rm -rf "$T/p" && ckptctl import -q "$T/p" --step 1 "$T/m1.safetensors" &&
	ckptctl import -q "$T/p" --step 2 "$T/m2.safetensors" || exit 1
python3 "$ROOT/tests/cli/ptyrun.py" "$CK" push "$T/p" --all --remote "$T/pr" > "$T/pty"
expect "push --all draws a progress line per checkpoint" \
	grep -q '^progress lines: push 1 (1/2), push 2 (2/2)$' "$T/pty"

# list --remote without a store: the remote's stores.
id1=$(ckptctl list "$STORE" --remote "$R" --json | j 'd[0]["store_id"]')
id2=$(ckptctl list "$T/s2" --remote "$R" --json | j 'd[0]["store_id"]')
ckptctl list --remote "$R" > "$T/out" 2> "$T/err"
expect "list --remote with no store succeeds" test $? = 0 -a ! -s "$T/err"
expect "its header" grep -q '^STORE ID  *HOST  *NEWEST  *CHECKPOINTS  *SIZE  *PATH$' "$T/out"
expect "a row per store: id, host, newest step, checkpoints, path" grep -q \
	"^$id1  $(hostname | cut -c1-20)  *30  *3  *[0-9.]* [KM]iB  $(realpath "$STORE")\$" "$T/out"
expect "the other store" grep -q "^$id2 .* 5  *1  .*  $(realpath "$T/s2")\$" "$T/out"
expect "and how to bring one back" grep -q "^2 stores on $R; bring one back: ckptctl pull STORE --remote $R --store-id ID\$" "$T/out"
expect "list --remote --json: the same fields" test "$(ckptctl list --remote "$R" --json |
	j "[(s['store_id'] == '$id1', s['checkpoints'], s['newest_step'], s['bytes'] > 0, s['path'] == '$(realpath "$STORE")') for s in d if s['store_id'] == '$id1']")" = \
	"[(True, 3, 30, True, True)]"
expect "bytes: the packs on the remote" test "$(ckptctl list --remote "$R" --json |
	j "[s['bytes'] for s in d if s['store_id'] == '$id2'][0]")" = \
	"$(cat "$R/libckpt1/$id2/packs/"* | wc -c)"
ckptctl list "$T/new" --remote "$R" > "$T/out" 2> "$T/err"
expect "list of a STORE that does not exist lists the remote's stores (0)" test $? = 0
expect "saying there is no store there" grep -q "no store at $T/new; the stores on $R:" "$T/err"
expect "then the stores" grep -q "^$id2 " "$T/out"
expect "CKPT_REMOTE stands for --remote" sh -c "CKPT_REMOTE='$R' '$CK' list | grep -q '^$id1 '"
ckptctl list > /dev/null 2> "$T/err"
expect "list with neither store nor remote is a usage error" grep -q 'expected STORE' "$T/err"
mkdir -p "$T/empty"
expect "an empty remote holds 0 stores" test "$(ckptctl list --remote "$T/empty")" = "0 stores on $T/empty"
ckptctl list --remote "$T/nowhere" > /dev/null 2> "$T/err"
expect "a missing remote directory: exit 4" test $? = 4

# A pull that must choose among the stores names --store-id and shows them.
ckptctl pull "$T/new" --remote "$R" > /dev/null 2> "$T/err"
expect "pull into a new store from a remote of two stores fails (1)" test $? = 1
expect "naming --store-id" grep -q -- "--store-id" "$T/err"
expect "and listing the stores" sh -c "grep -q '^$id1 .*$(realpath "$STORE")\$' '$T/err' && grep -q '^$id2 ' '$T/err'"
ckptctl pull "$T/new" --remote "$R" --store-id "$id2" > /dev/null || exit 1
expect "--store-id picks one" test "$(ckptctl list "$T/new" --json | j '[c["step"] for c in d]')" = "[5]"

# The info object follows the store that pushed last (a replacement node pushing from elsewhere).
ckptctl import -q "$T/new" --step 6 "$T/m2.safetensors" && ckptctl push "$T/new" --remote "$R" > /dev/null || exit 1
expect "the pusher recorded is the last one" test "$(ckptctl list --remote "$R" --json |
	j "[(s['path'], s['newest_step']) for s in d if s['store_id'] == '$id2'][0]")" = "('$(realpath "$T/new")', 6)"
finish
