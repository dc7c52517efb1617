/* gc beside a multi-rank save in flight, with the store's lock made node-local:
 * CKPT_TEST_LOCAL_LOCK=1 (test builds) grants every flock of the writer lock, as a lock on
 * another node of a mount with local locks would. 4 thread-ranks save step 2. Once every
 * rank's part is durable and its part save has ended (released its lock), and before the global
 * manifest is written (rank 0's commit reads the parts: ckpt_test_part_hook, test builds),
 * another handle deletes step 1 and runs gc. Step 2's shard "w" holds step 1's values, so its parts reference step 1's packs (dedup),
 * and its "fresh" tensors are in new packs no committed manifest names yet: the ranks' in-flight
 * markers (kept from begin to the global commit) must spare both. Then the ranks commit and
 * step 2 restores and verifies; a later gc, with no save in flight, reclaims nothing step 2
 * needs. Without the markers kept past the part save, step 2's restore fails (its packs are
 * gone). */
#include "helpers.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "t-dist-world.h"
#include "t-open-opts.h"

#define NR 4
#define ROWS 64
#define COLS 1024

struct job {
	const char *dir;
	uint64_t step;
	gc_report *del, *gc;   /* the delete and gc on the other handle, in rank 0's commit */
	int rc[NR];
};

static float wval(uint64_t i)
{
	return (float)i * 0.25f + 3.0f;
}

static ckpt_store *open_store(const char *dir)
{
	return t_open_opts(dir, (const int64_t[]){CKPT_OPT_CHUNK_SIZE, 64 << 10, CKPT_OPT_POOL_SIZE,
						 4 << 20, CKPT_OPT_PACK_SIZE, 1 << 20, 0});
}

extern void (*ckpt_test_part_hook)(unsigned rank);
static struct job *hooked; /* the save whose commit runs the gc */

/* Rank 0, between every rank's durable part and the global manifest: "another node" deletes
 * step 1 and collects garbage, once. */
static void other_node_gc(unsigned rank)
{
	struct job *j = hooked;
	if (rank != 0 || !j)
		return;
	hooked = NULL;
	ckpt_store *b = open_store(j->dir);
	uint64_t one = 1;
	CHECK_OK(retain_delete(b, &one, 1, NULL, CKPT_GC_NEWEST, &j->del));
	CHECK_OK(retain_gc(b, 0, 0, &j->gc));
	ckpt_store_close(b);
}

static int save_rank(struct job *j, ckpt_comm *c, ckpt_store *s, const float *w, const float *f)
{
	int k = c->rank;
	dsave *d;
	int rc = dsave_begin(s, c, j->step, &d);
	if (rc)
		return rc;
	uint64_t g[2] = {NR * ROWS, COLS}, off[2] = {(uint64_t)k * ROWS, 0}, l[2] = {ROWS, COLS};
	uint64_t fg = NR * 4096, fo = (uint64_t)k * 4096, fl = 4096;
	if ((rc = dsave_add_shard(d, "w", CKPT_DTYPE_F32, 2, g, off, l, CKPT_MEM_HOST, w)) ||
	    (rc = dsave_add_shard(d, "fresh", CKPT_DTYPE_F32, 1, &fg, &fo, &fl,
					   CKPT_MEM_HOST, f))) {
		dsave_abort(d);
		return rc;
	}
	return dsave_commit(d, NULL);
}

static int rank_main(ckpt_comm *c, void *p)
{
	struct job *j = p;
	int k = c->rank;
	float *w = malloc(ROWS * COLS * sizeof *w), f[4096];
	REQUIRE(w);
	for (uint64_t i = 0; i < ROWS * COLS; i++)
		w[i] = wval((uint64_t)k * ROWS * COLS + i); /* the same every step */
	for (int i = 0; i < 4096; i++)
		f[i] = (float)(j->step * 100000 + (uint64_t)k * 4096 + (uint64_t)i);
	ckpt_store *s = open_store(j->dir);
	int rc = save_rank(j, c, s, w, f);
	ckpt_store_close(s);
	free(w);
	return rc;
}

static void run(struct job *j)
{
	REQUIRE(tw_run(NR, rank_main, j, j->rc) == 0);
	for (int k = 0; k < NR; k++)
		CHECK(j->rc[k] == 0);
}

static bool restores(const char *dir, uint64_t step)
{
	ckpt_store *s = open_store(dir);
	dreader *r = NULL;
	int rc = dreader_open(s, step, &r);
	uint64_t bad = 0;
	if (!rc) {
		uint64_t off[2] = {0, 0}, len[2] = {NR * ROWS, COLS};
		float *w = malloc(NR * ROWS * COLS * sizeof *w);
		REQUIRE(w);
		rc = dreader_restore_box(r, (size_t)dreader_find(r, "w"), off, len, w,
						  NR * ROWS * COLS * sizeof *w);
		for (uint64_t i = 0; !rc && i < NR * ROWS * COLS; i++)
			bad += w[i] != wval(i);
		free(w);
		if (!rc && dreader_verify_parts(r, NULL, NULL) != 0)
			rc = -1;
		dreader_close(r);
	}
	if (rc || bad)
		fprintf(stderr, "step %" PRIu64 " does not restore: %s (%" PRIu64 " values differ)\n",
			step, rc ? ckpt_errmsg() : "values", bad);
	ckpt_store_close(s);
	return !rc && !bad;
}

int main(void)
{
	/* Before any thread: every writer-lock flock of this process succeeds. */
	setenv("CKPT_TEST_LOCAL_LOCK", "1", 1);
	char *dir = t_tmpdir("gcinflightd");
	struct job one = {.dir = dir, .step = 1};
	run(&one);
	struct job two = {.dir = dir, .step = 2};
	hooked = &two;
	ckpt_test_part_hook = other_node_gc;
	run(&two);
	ckpt_test_part_hook = NULL;
	CHECK(hooked == NULL); /* the gc ran */
	if (two.del)
		CHECK(two.del->n_steps_removed == 1 && two.del->packs_removed == 0 &&
		      two.del->packs_spared >= 1 && two.del->in_flight);
	if (two.gc)
		CHECK(two.gc->packs_removed == 0 && two.gc->packs_spared >= 1);
	CHECK(restores(dir, 2));
	/* Committed: no marker is left, and gc removes only what no checkpoint references. */
	ckpt_store *s = open_store(dir);
	gc_report *rep = NULL;
	CHECK_OK(retain_gc(s, 0, 0, &rep));
	if (rep)
		CHECK(rep->packs_spared == 0 && !rep->in_flight);
	gc_report_free(rep);
	ckpt_store_close(s);
	CHECK(restores(dir, 2));
	gc_report_free(two.del);
	gc_report_free(two.gc);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
