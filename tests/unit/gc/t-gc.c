/* Space accounting, prune and gc: numbers checked against the files on disk, every remaining
 * checkpoint verified and restored byte-identical, and a kill at every point of prune and gc. */
#include "helpers.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NT = 4, TB = 20 * (64 << 10) + 777, CHUNK = 64 << 10, STEPS = 6 };

static void data_for(uint8_t *buf, uint64_t step, int t)
{
	/* Each step changes a different quarter of each tensor: chunks shared across steps. */
	t_fill(buf, TB, (uint64_t)t);
	uint64_t q = TB / 4;
	for (uint64_t s = 1; s <= step; s++)
		t_fill(buf + ((s + (uint64_t)t) % 4) * q, q, s * 100 + (uint64_t)t);
}

static ckpt_store *open_small_packs(const char *dir)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 8 << 20);
	ckpt_options_set(o, CKPT_OPT_IO_SIZE, 256 << 10);
	ckpt_options_set(o, CKPT_OPT_PACK_SIZE, 1 << 20);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	return s;
}

static void build(const char *dir)
{
	ckpt_store *s = open_small_packs(dir);
	uint8_t *buf[NT];
	uint64_t shape[1] = {TB};
	for (int t = 0; t < NT; t++)
		buf[t] = malloc(TB);
	for (uint64_t step = 1; step <= STEPS; step++) {
		save1 *sv;
		REQUIRE(save1_begin(s, step * 10, &sv) == 0);
		for (int t = 0; t < NT; t++) {
			char nm[16];
			snprintf(nm, sizeof nm, "w%d", t);
			data_for(buf[t], step, t);
			REQUIRE(save1_add_tensor(sv, nm, CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, buf[t]) == 0);
		}
		REQUIRE(save1_commit(sv, NULL) == 0);
	}
	for (int t = 0; t < NT; t++)
		free(buf[t]);
	ckpt_store_close(s);
}

/* Every listed checkpoint verifies and restores its step's data. Returns problems found. */
static int check_all(const char *dir, int *count)
{
	ckpt_store *s = t_open_store(dir, 0, 0);
	ckpt_info *list;
	int n = ckpt_store_list(s, 1, &list), bad = 0;
	REQUIRE(n >= 0);
	uint8_t *want = malloc(TB), *got = malloc(TB);
	for (int k = 0; k < n; k++) {
		reader1 *r;
		if (list[k].error || reader1_open(s, list[k].step, &r)) {
			fprintf(stderr, "step %llu: invalid (%s)\n", (unsigned long long)list[k].step,
				ckpt_errmsg());
			bad++;
			continue;
		}
		if (reader1_verify(r, NULL, NULL, NULL) != 0) {
			fprintf(stderr, "step %llu: verify failed\n", (unsigned long long)list[k].step);
			bad++;
		}
		for (int t = 0; t < NT; t++) {
			data_for(want, list[k].step / 10, t);
			if (reader1_restore(r, (size_t)t, CKPT_MEM_HOST, got, TB) || memcmp(want, got, TB)) {
				fprintf(stderr, "step %llu w%d: %s\n", (unsigned long long)list[k].step, t,
					ckpt_errmsg());
				bad++;
			}
		}
		reader1_close(r);
	}
	*count = n;
	ckpt_info_free(list);
	free(want);
	free(got);
	ckpt_store_close(s);
	return bad;
}

/* The store's bytes but for STORE/packids, which gc writes (a few bytes) before it frees any. */
static uint64_t store_bytes(const char *dir)
{
	char p[4200];
	struct stat st;
	snprintf(p, sizeof p, "%s/packids", dir);
	return t_dir_bytes(dir) - (stat(p, &st) ? 0 : (uint64_t)st.st_size);
}

static void accounting(void)
{
	char *dir = t_tmpdir("gc");
	build(dir);
	char packs[4200];
	snprintf(packs, sizeof packs, "%s/packs", dir);
	ckpt_store *s = t_open_store(dir, 0, 0);
	ckpt_du *du;
	CHECK_OK(ckpt_store_du(s, &du));
	CHECK(du->n == STEPS);
	CHECK(du->pack_bytes == t_dir_bytes(packs));
	CHECK(du->live_bytes + du->dead_record_bytes + du->unreferenced_pack_bytes == du->pack_bytes);
	CHECK(du->garbage_bytes == du->dead_record_bytes + du->unreferenced_pack_bytes + du->leftover_bytes);
	CHECK(du->garbage_bytes == 0); /* nothing removed yet */
	for (size_t i = 0; i < du->n; i++) {
		CHECK(du->entries[i].exclusive_bytes + du->entries[i].shared_bytes ==
		      du->entries[i].referenced_bytes);
		CHECK(du->entries[i].referenced_bytes >= (uint64_t)NT * TB);
	}
	/* The newest checkpoint's last-changed quarter is exclusive to it. */
	CHECK(du->entries[STEPS - 1].exclusive_bytes > 0);
	ckpt_du_free(du);

	/* Dry run: reports, changes nothing. */
	uint64_t before = store_bytes(dir);
	retain_keep pol = {.keep_last = 2};
	gc_report *dry, *rep;
	CHECK_OK(retain_prune(s, &pol, CKPT_GC_DRY_RUN, &dry));
	CHECK(store_bytes(dir) == before);
	CHECK(dry->n_steps_removed == STEPS - 2);
	/* The real run removes exactly that and frees exactly what it says. */
	CHECK_OK(retain_prune(s, &pol, 0, &rep));
	CHECK(rep->n_steps_removed == dry->n_steps_removed);
	CHECK(rep->bytes_freed == dry->bytes_freed);
	CHECK(before - store_bytes(dir) == rep->bytes_freed);
	CHECK(rep->steps_removed[0] == 10 && rep->steps_removed[3] == 40);
	gc_report_free(dry);
	gc_report_free(rep);
	int n, bad = 0;
	CHECK((bad = check_all(dir, &n)) == 0);
	CHECK(n == 2);

	/* Partly live packs remain: du sees dead records, gc compacts them away. */
	CHECK_OK(ckpt_store_du(s, &du));
	uint64_t dead = du->dead_record_bytes;
	CHECK(dead > 0);
	CHECK(du->pack_bytes == t_dir_bytes(packs));
	ckpt_du_free(du);
	before = store_bytes(dir);
	CHECK_OK(retain_gc(s, 0.99, CKPT_GC_DRY_RUN, &dry));
	CHECK(store_bytes(dir) == before);
	CHECK_OK(retain_gc(s, 0.99, 0, &rep));
	CHECK(rep->packs_compacted == dry->packs_compacted && rep->packs_compacted > 0);
	CHECK(rep->manifests_rewritten > 0);
	CHECK(before - store_bytes(dir) == rep->bytes_freed);
	CHECK(rep->bytes_freed == dead);
	gc_report_free(dry);
	gc_report_free(rep);
	CHECK_OK(ckpt_store_du(s, &du));
	CHECK(du->dead_record_bytes == 0 && du->garbage_bytes == 0);
	CHECK(du->pack_bytes == t_dir_bytes(packs));
	ckpt_du_free(du);
	CHECK(check_all(dir, &n) == 0 && n == 2);

	/* The newest valid checkpoint is never removed, whatever the policy. */
	pol = (retain_keep){.keep_last = 0};
	CHECK_OK(retain_prune(s, &pol, 0, &rep));
	CHECK(rep->n_steps_removed == 1 && rep->steps_removed[0] == 50);
	gc_report_free(rep);
	CHECK(check_all(dir, &n) == 0 && n == 1);
	/* Saving again after gc dedups against what is left (the index is rebuilt), and works. */
	uint8_t *buf = malloc(TB);
	data_for(buf, 6, 0);
	uint64_t shape[1] = {TB};
	save1 *sv;
	CHECK_OK(save1_begin(s, 70, &sv));
	CHECK_OK(save1_add_tensor(sv, "w0", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, buf));
	ckpt_stats st;
	CHECK_OK(save1_commit(sv, &st));
	CHECK(st.chunks_new == 0);
	reader1 *r;
	CHECK_OK(reader1_open(s, 70, &r));
	CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
	reader1_close(r);
	free(buf);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

static void policies_and_damage(void)
{
	char *dir = t_tmpdir("gcpol");
	build(dir);
	ckpt_store *s = t_open_store(dir, 0, 0);
	uint64_t keep[1] = {20};
	retain_keep pol = {.keep_last = 1, .keep_every = 30, .keep_steps = keep, .n_keep_steps = 1};
	gc_report *rep;
	CHECK_OK(retain_prune(s, &pol, 0, &rep));
	/* kept: 60 (last), 30 and 60 (every 30), 20 (listed); removed: 10, 40, 50 */
	CHECK(rep->n_steps_removed == 3);
	CHECK(rep->steps_removed[0] == 10 && rep->steps_removed[1] == 40 && rep->steps_removed[2] == 50);
	gc_report_free(rep);
	int n;
	CHECK(check_all(dir, &n) == 0 && n == 3);
	/* A damaged manifest stops pack removal unless forced. */
	char mf[4200];
	snprintf(mf, sizeof mf, "%s/manifests/%020d.ckpt", dir, 20);
	t_flip_byte(mf, 100);
	CHECK_RC(retain_gc(s, 0, 0, &rep), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "00000000000000000020.ckpt") != NULL);
	ckpt_du *du;
	CHECK_OK(ckpt_store_du(s, &du));
	CHECK(du->invalid_manifests == 1 && du->n == 2);
	ckpt_du_free(du);
	CHECK_OK(retain_gc(s, 0, CKPT_GC_FORCE, &rep));
	gc_report_free(rep);
	/* The valid ones still verify after a forced gc. */
	reader1 *r;
	CHECK_OK(reader1_open(s, 60, &r));
	CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
	reader1_close(r);
	CHECK_OK(reader1_open(s, 30, &r));
	CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
	reader1_close(r);

	/* Busy: another process holds the lock. */
	int pfd[2];
	REQUIRE(pipe(pfd) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		ckpt_store *s2 = t_open_store(dir, 0, 0);
		save1 *sv;
		if (save1_begin(s2, 999, &sv) || write(pfd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	char c;
	REQUIRE(read(pfd[0], &c, 1) == 1);
	CHECK_RC(retain_gc(s, 0, 0, &rep), -CKPT_E_BUSY);
	CHECK_RC(retain_prune(s, &pol, 0, &rep), -CKPT_E_BUSY);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* A save in flight on the same handle: refused as well, not interleaved. */
	save1 *sv;
	CHECK_OK(save1_begin(s, 1000, &sv));
	CHECK_RC(retain_gc(s, 0, 0, &rep), -CKPT_E_BUSY);
	save1_abort(sv);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

/* Kill prune+gc at every point where the store changes; the store must always check out. */
static void kill_points(void)
{
	char *tmpl = t_tmpdir("gckt");
	build(tmpl);
	int points = 0;
	for (int at = 1; at < 400; at++) {
		char *dir = t_tmpdir("gck");
		char cmd[9000];
		snprintf(cmd, sizeof cmd, "cp -a %s/. %s/", tmpl, dir);
		REQUIRE(system(cmd) == 0);
		pid_t pid = fork();
		if (pid == 0) {
			char v[16];
			snprintf(v, sizeof v, "%d", at);
			setenv("CKPT_GC_KILL_AT", v, 1);
			ckpt_store *s = t_open_store(dir, 0, 0);
			retain_keep pol = {.keep_last = 3};
			if (retain_prune(s, &pol, 0, NULL) || retain_gc(s, 0.99, 0, NULL))
				_exit(2);
			ckpt_store_close(s);
			_exit(0);
		}
		int st;
		waitpid(pid, &st, 0);
		int n, bad = check_all(dir, &n);
		if (bad) {
			fprintf(stderr, "kill point %d: %d problem(s)\n", at, bad);
			t_failures++;
		}
		/* A later gc finishes the job: store clean, 3 checkpoints. */
		ckpt_store *s = t_open_store(dir, 0, 0);
		gc_report *rep;
		CHECK_OK(retain_gc(s, 0.99, 0, &rep));
		gc_report_free(rep);
		ckpt_du *du;
		CHECK_OK(ckpt_store_du(s, &du));
		CHECK(du->garbage_bytes == 0);
		ckpt_du_free(du);
		ckpt_store_close(s);
		CHECK(check_all(dir, &n) == 0 && n >= 3);
		t_rmrf(dir);
		free(dir);
		if (WIFEXITED(st)) {
			CHECK(WEXITSTATUS(st) == 0);
			break; /* ran past the last point */
		}
		points++;
	}
	printf("prune+gc killed at %d points, store intact after each\n", points);
	CHECK(points >= 10);
	t_rmrf(tmpl);
	free(tmpl);
}

int main(void)
{
	accounting();
	policies_and_damage();
	kill_points();
	return t_done();
}
