/* Deferred multi-rank commits (CKPT_SAVE_DEFER, dsave_release): the commit of a
 * framework whose own protocol ends after the data is written (DCP's finish()), ranks as threads.
 * - Every part durable and still no checkpoint until every rank released; rank 0's metadata set
 *   after submit goes into the global manifest, replacing its entry of before submit.
 * - A rank that releases with a failure fails every rank's wait, naming it and its text; no
 *   checkpoint, and the step saves afterwards.
 * - A rank that waits or aborts before its release fails the save on every rank (never a commit
 *   it did not release, never a wait for ever).
 * - Misuse: DEFER without THREADED, release of a save not deferred, twice, rc > 0; metadata after
 *   the release, a tag after submit. */
#include "helpers.h"

#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "t-dist-world.h"

#define NR 4
#define ELEMS (1u << 18) /* f32 elements per rank: 1 MiB */
#define DEFER (CKPT_SAVE_THREADED | CKPT_SAVE_DEFER)

enum how { RELEASE_OK, RELEASE_FAIL, WAIT_EARLY, ABORT_EARLY };

struct job {
	const char *dir;
	uint64_t step;
	enum how how;    /* what rank `odd` does; the others release with 0 */
	int odd;
	int rc[NR];
	char msg[NR][1024];
	int visible_early; /* a checkpoint appeared before the releases */
};

static ckpt_store *open_store(const char *dir)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 1 << 20);
	ckpt_store *s = NULL;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	return s;
}

static int exists(const char *dir, uint64_t step)
{
	ckpt_store *s = open_store(dir);
	uint64_t got;
	int rc = ckpt_store_resolve(s, step, &got);
	ckpt_store_close(s);
	return rc == 0;
}

/* Waits (bounded, so that a bug cannot hang the test) until every rank's part file exists. */
static int parts_durable(const char *dir, uint64_t step)
{
	for (int n = 0; n < 200000; n++) {
		int have = 0;
		for (int r = 0; r < NR; r++) {
			char p[4096];
			struct stat st;
			snprintf(p, sizeof p, "%s/parts/%020" PRIu64 "/%d.part", dir, step, r);
			have += stat(p, &st) == 0;
		}
		if (have == NR)
			return 1;
		usleep(100);
	}
	return 0;
}

static int finish_rank(struct job *j, ckpt_comm *c, dsave *d)
{
	int k = c->rank;
	if (k == 0) { /* every part is durable, and nothing is visible until the releases */
		CHECK(parts_durable(j->dir, j->step));
		j->visible_early = exists(j->dir, j->step);
		CHECK_OK(dsave_set_meta(d, "k", "late"));
		CHECK_OK(dsave_set_meta(d, "k2", "new"));
	}
	CHECK_OK(c->barrier(c->ctx)); /* rank 0 looked before anyone released */
	if (k == j->odd && j->how == RELEASE_FAIL)
		CHECK_OK(dsave_release(d, -CKPT_E_IO, "the framework failed here"));
	else if (k == j->odd && j->how == ABORT_EARLY) {
		dsave_abort(d);
		return -CKPT_E_STATE;
	} else if (!(k == j->odd && j->how == WAIT_EARLY))
		CHECK_OK(dsave_release(d, 0, NULL));
	return dsave_wait(d, NULL);
}

static int rank_main(ckpt_comm *c, void *p)
{
	struct job *j = p;
	int k = c->rank;
	float *w = malloc(ELEMS * sizeof *w);
	REQUIRE(w);
	for (uint64_t i = 0; i < ELEMS; i++)
		w[i] = (float)(j->step * 7 + (uint64_t)k * ELEMS + i);
	ckpt_store *s = open_store(j->dir);
	dsave *d;
	int rc = dsave_begin(s, c, j->step, &d);
	if (!rc) {
		uint64_t g = (uint64_t)NR * ELEMS, off = (uint64_t)k * ELEMS, l = ELEMS;
		CHECK_OK(dsave_add_shard(d, "w", CKPT_DTYPE_F32, 1, &g, &off, &l,
						  CKPT_MEM_HOST, w));
		if (k == 0)
			CHECK_OK(dsave_set_meta(d, "k", "early"));
		CHECK_OK(dsave_submit(d, DEFER));
		CHECK_RC(dsave_add_tag(d, "late"), -CKPT_E_STATE);
		CHECK_OK(dsave_wait_snapshot(d));
		rc = finish_rank(j, c, d);
	}
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
	CHECK(!j->visible_early);
	return failed;
}

static void check_meta(const char *dir, uint64_t step)
{
	ckpt_store *s = open_store(dir);
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, step, &r));
	if (r) {
		const char *v = reader1_get_meta(r, "k"), *v2 = reader1_get_meta(r, "k2");
		CHECK(v && !strcmp(v, "late"));
		CHECK(v2 && !strcmp(v2, "new"));
		reader1_close(r);
	}
	ckpt_store_close(s);
}

static void outcomes(const char *dir)
{
	struct job ok = {.dir = dir, .step = 5, .how = RELEASE_OK, .odd = -1};
	CHECK(run(&ok) == 0);
	CHECK(exists(dir, 5));
	check_meta(dir, 5);

	struct job fail = {.dir = dir, .step = 6, .how = RELEASE_FAIL, .odd = 1};
	CHECK(run(&fail) == NR);
	for (int k = 0; k < NR; k++)
		CHECK(strstr(fail.msg[k], "rank 1 failed: the framework failed here") != NULL);
	CHECK(!exists(dir, 6));

	struct job early = {.dir = dir, .step = 6, .how = WAIT_EARLY, .odd = 2};
	CHECK(run(&early) == NR);
	for (int k = 0; k < NR; k++)
		CHECK(strstr(early.msg[k], "waited for before dsave_release") != NULL);
	CHECK(!exists(dir, 6));

	struct job ab = {.dir = dir, .step = 6, .how = ABORT_EARLY, .odd = 3};
	CHECK(run(&ab) == NR);
	for (int k = 0; k < 3; k++)
		CHECK(strstr(ab.msg[k], "rank 3 failed: the save was aborted on this rank") != NULL);
	CHECK(!exists(dir, 6));

	struct job again = {.dir = dir, .step = 6, .how = RELEASE_OK, .odd = -1};
	CHECK(run(&again) == 0);
	CHECK(exists(dir, 6));
}

static int misuse_rank(ckpt_comm *c, void *p)
{
	const char *dir = p;
	ckpt_store *s = open_store(dir);
	dsave *d;
	REQUIRE(dsave_begin(s, c, 90, &d) == 0);
	CHECK_RC(dsave_release(d, 0, NULL), -CKPT_E_STATE); /* not submitted */
	CHECK_RC(dsave_submit(d, CKPT_SAVE_DEFER), -CKPT_E_INVAL);
	CHECK_OK(dsave_submit(d, CKPT_SAVE_THREADED));
	CHECK_RC(dsave_release(d, 0, NULL), -CKPT_E_STATE); /* not deferred */
	CHECK_RC(dsave_set_meta(d, "k", "v"), -CKPT_E_STATE);
	CHECK_OK(dsave_wait(d, NULL));
	REQUIRE(dsave_begin(s, c, 91, &d) == 0);
	CHECK_OK(dsave_submit(d, DEFER));
	CHECK_RC(dsave_set_meta(d, "ckpt.dist.x", "v"), -CKPT_E_INVAL);
	CHECK_RC(dsave_set_meta(d, "ckpt.tags", "v"), -CKPT_E_INVAL);
	CHECK_RC(dsave_release(d, 5, NULL), -CKPT_E_INVAL);
	CHECK_OK(dsave_release(d, 0, NULL));
	CHECK_RC(dsave_release(d, 0, NULL), -CKPT_E_STATE);
	CHECK_RC(dsave_set_meta(d, "k", "v"), -CKPT_E_STATE);
	int rc = dsave_wait(d, NULL);
	ckpt_store_close(s);
	return rc;
}

static void misuse(const char *dir)
{
	int rc = -1;
	REQUIRE(tw_run(1, misuse_rank, (void *)dir, &rc) == 0);
	CHECK(rc == 0 && exists(dir, 90) && exists(dir, 91));
}

int main(void)
{
	char *dir = t_tmpdir("ddefer");
	outcomes(dir);
	misuse(dir);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
