/* Asynchronous multi-rank saves: dsave_submit / _wait_snapshot /
 * _fence / _poll / _wait, ranks as threads with their own handles.
 * - Threaded (CKPT_SAVE_THREADED: the commit runs on a library thread) and not (it runs in wait):
 *   each rank overwrites its tensors as soon as wait_snapshot returns; the checkpoint holds the
 *   values of before. The state (4 x 6 MiB) is larger than each rank's pool (2 MiB), so the
 *   snapshot streams through the pool: no copy of the state is made.
 * - poll reaches 1 on its own with a thread; wait then returns at once.
 * - A rank that aborts instead of submitting fails every other rank's wait, naming it, in both
 *   modes; nothing becomes visible, and the next save of the step works.
 * - Misuse: a second submit, commit after submit, unknown flags, wait before submit. */
#include "helpers.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "t-dist-world.h"

#define NR 4
#define ELEMS (6u << 18) /* f32 elements per rank: 6 MiB */

struct job {
	const char *dir;
	uint64_t step;
	unsigned flags;
	int abort1; /* 1 + the rank that aborts instead of submitting, or 0 */
	int rc[NR], polled[NR];
	char msg[NR][1024];
};

static float val(uint64_t step, uint64_t i)
{
	return (float)(step * 1000003u + i);
}

static ckpt_store *open_small_pool(const char *dir)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 1 << 20);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 2 << 20);
	ckpt_store *s = NULL;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	return s;
}

static int save_rank(struct job *j, ckpt_comm *c, ckpt_store *s, float *w)
{
	int k = c->rank;
	dsave *d;
	int rc = dsave_begin(s, c, j->step, &d);
	if (rc)
		return rc;
	uint64_t g = (uint64_t)NR * ELEMS, off = (uint64_t)k * ELEMS, l = ELEMS;
	rc = dsave_add_shard(d, "w", CKPT_DTYPE_F32, 1, &g, &off, &l, CKPT_MEM_HOST, w);
	if (rc || k + 1 == j->abort1) {
		dsave_abort(d);
		return rc ? rc : -CKPT_E_STATE;
	}
	CHECK_OK(dsave_submit(d, j->flags));
	CHECK_RC(dsave_submit(d, j->flags), -CKPT_E_STATE);
	CHECK_RC(dsave_commit(d, NULL), -CKPT_E_STATE);
	rc = dsave_wait_snapshot(d);
	CHECK(dsave_fence(d, NULL) == rc); /* host tensors: the snapshot itself */
	for (uint64_t i = 0; i < ELEMS; i++) /* the next training step */
		w[i] = -1.0f;
	if (j->flags & CKPT_SAVE_THREADED)
		for (int n = 0; n < 600000 && !dsave_poll(d); n++)
			usleep(100); /* it finishes on its own; the bound only keeps a bug from hanging */
	j->polled[k] = dsave_poll(d);
	ckpt_stats st;
	int wrc = dsave_wait(d, &st);
	return rc ? rc : wrc;
}

static int rank_main(ckpt_comm *c, void *p)
{
	struct job *j = p;
	int k = c->rank;
	float *w = malloc(ELEMS * sizeof *w);
	REQUIRE(w);
	for (uint64_t i = 0; i < ELEMS; i++)
		w[i] = val(j->step, (uint64_t)k * ELEMS + i);
	ckpt_store *s = open_small_pool(j->dir);
	int rc = save_rank(j, c, s, w);
	if (rc)
		snprintf(j->msg[k], sizeof j->msg[k], "%s", ckpt_errmsg());
	ckpt_store_close(s);
	free(w);
	return rc;
}

static int run(struct job *j)
{
	REQUIRE(tw_run(NR, rank_main, j, j->rc) == 0);
	int failed = 0;
	for (int k = 0; k < NR; k++)
		failed += j->rc[k] != 0;
	return failed;
}

static void check_ckpt(const char *dir, uint64_t step)
{
	ckpt_store *s = open_small_pool(dir);
	dreader *r = NULL;
	CHECK_OK(dreader_open(s, step, &r));
	if (r) {
		uint64_t len = (uint64_t)NR * ELEMS, off = 0, bad = 0;
		float *w = malloc(len * sizeof *w);
		REQUIRE(w);
		CHECK_OK(dreader_restore_box(r, 0, &off, &len, w, len * sizeof *w));
		for (uint64_t i = 0; i < len; i++)
			bad += w[i] != val(step, i);
		if (bad)
			fprintf(stderr, "step %" PRIu64 ": %" PRIu64 " values differ\n", step, bad);
		CHECK(bad == 0);
		CHECK(dreader_verify_parts(r, NULL, NULL) == 0);
		free(w);
		dreader_close(r);
	}
	ckpt_store_close(s);
}

static bool exists(const char *dir, uint64_t step)
{
	ckpt_store *s = open_small_pool(dir);
	uint64_t got;
	int rc = ckpt_store_resolve(s, step, &got);
	ckpt_store_close(s);
	return rc == 0;
}

static void modes(const char *dir)
{
	const unsigned flags[2] = {CKPT_SAVE_THREADED, 0};
	for (int m = 0; m < 2; m++) {
		uint64_t step = 10 + (uint64_t)m * 10;
		struct job ok = {.dir = dir, .step = step, .flags = flags[m]};
		CHECK(run(&ok) == 0);
		for (int k = 0; k < NR; k++)
			if (ok.rc[k])
				fprintf(stderr, "mode %u rank %d: %s\n", flags[m], k, ok.msg[k]);
		if (flags[m])
			for (int k = 0; k < NR; k++)
				CHECK(ok.polled[k] == 1);
		check_ckpt(dir, step);
		struct job bad = {.dir = dir, .step = step + 1, .flags = flags[m], .abort1 = 3};
		CHECK(run(&bad) == NR);
		for (int k = 0; k < NR; k++)
			if (k != 2)
				CHECK(strstr(bad.msg[k], "rank 2 failed: the save was aborted on this rank"));
		CHECK(!exists(dir, step + 1));
		struct job again = {.dir = dir, .step = step + 1, .flags = flags[m]};
		CHECK(run(&again) == 0);
		check_ckpt(dir, step + 1);
	}
}

static int misuse_rank(ckpt_comm *c, void *p)
{
	const char *dir = p;
	ckpt_store *s = open_small_pool(dir);
	dsave *d;
	REQUIRE(dsave_begin(s, c, 99, &d) == 0);
	CHECK_RC(dsave_submit(d, 2), -CKPT_E_INVAL);
	CHECK_RC(dsave_wait(d, NULL), -CKPT_E_STATE); /* not freed: not submitted */
	CHECK_RC(dsave_wait_snapshot(d), -CKPT_E_STATE);
	CHECK(dsave_poll(d) == 0);
	CHECK_OK(dsave_submit(d, 0));
	int rc = dsave_wait(d, NULL);
	ckpt_store_close(s);
	return rc;
}

static void misuse(const char *dir)
{
	int rc = -1;
	REQUIRE(tw_run(1, misuse_rank, (void *)dir, &rc) == 0);
	CHECK(rc == 0 && exists(dir, 99));
}

int main(void)
{
	char *dir = t_tmpdir("dasync");
	modes(dir);
	misuse(dir);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
