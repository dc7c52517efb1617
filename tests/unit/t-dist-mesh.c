/* Replicated shards are split among their holders: dsave_add_shard_replica.
 * 4 thread-ranks as a 2 x 2 mesh: "w" (16 x 4096 f32) is sharded by rows over the mesh's first
 * dimension and replicated over its second, so ranks 0 and 1 hold rows 0-7, ranks 2 and 3 rows
 * 8-15. Each holder saves half of its box (its logical bytes are half the box), the checkpoint
 * holds every row once and restores to the matrix, and a second save of the same values writes
 * no new chunk (the split is the same each time, so the chunks dedup).
 * Also: a box whose leading dimension is 1 splits along the next ("v", 1 x 8192, all 4 ranks); a
 * box of one element is saved by replica 0 only ("s"); more holders than rows (3 holders of 2
 * rows of "t") leaves the first with nothing to add (rows [2*i/3, 2*(i+1)/3)); replica >= nreplicas is INVAL. */
#include "helpers.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>

#include "t-dist-world.h"
#include "t-open-opts.h"

#define NR 4
#define ROWS 16
#define COLS 4096
#define VN 8192

struct job {
	const char *dir;
	uint64_t step;
	int rc[NR];
	ckpt_stats st[NR];
};

static float wval(uint64_t i)
{
	return (float)i * 0.5f + 1.0f;
}

static ckpt_store *open_store(const char *dir)
{
	return t_open_opts(dir, (const int64_t[]){CKPT_OPT_CHUNK_SIZE, 64 << 10, 0});
}

static int add_all(dsave *d, int k, const float *w, const float *v, const float *t)
{
	uint64_t g[2] = {ROWS, COLS}, off[2] = {(uint64_t)(k / 2) * (ROWS / 2), 0};
	uint64_t l[2] = {ROWS / 2, COLS};
	int rc = dsave_add_shard_replica(d, "w", CKPT_DTYPE_F32, 2, g, off, l,
						  (unsigned)k % 2, 2, CKPT_MEM_HOST, w);
	uint64_t vg[2] = {1, VN}, vo[2] = {0, 0};
	if (!rc)
		rc = dsave_add_shard_replica(d, "v", CKPT_DTYPE_F32, 2, vg, vo, vg,
						      (unsigned)k, NR, CKPT_MEM_HOST, v);
	uint64_t sg = 1, so = 0;
	if (!rc)
		rc = dsave_add_shard_replica(d, "s", CKPT_DTYPE_F32, 1, &sg, &so, &sg,
						      (unsigned)k, NR, CKPT_MEM_HOST, v);
	uint64_t tg[2] = {2, 4}, to[2] = {0, 0};
	if (!rc && k < 3) /* ranks 0-2 hold t; rank 0's share of its 2 rows is empty */
		rc = dsave_add_shard_replica(d, "t", CKPT_DTYPE_F32, 2, tg, to, tg,
						      (unsigned)k, 3, CKPT_MEM_HOST, t);
	return rc;
}

static int rank_main(ckpt_comm *c, void *p)
{
	struct job *j = p;
	int k = c->rank;
	float *w = malloc(ROWS / 2 * COLS * sizeof *w), v[VN], t[8];
	REQUIRE(w);
	for (uint64_t i = 0; i < ROWS / 2 * COLS; i++)
		w[i] = wval((uint64_t)(k / 2) * (ROWS / 2) * COLS + i);
	for (uint64_t i = 0; i < VN; i++)
		v[i] = (float)i;
	for (int i = 0; i < 8; i++)
		t[i] = (float)(100 + i);
	ckpt_store *s = open_store(j->dir);
	dsave *d;
	int rc = dsave_begin(s, c, j->step, &d);
	if (!rc) {
		CHECK_RC(dsave_add_shard_replica(d, "x", CKPT_DTYPE_F32, 2,
							  (uint64_t[]){2, 2}, (uint64_t[]){0, 0},
							  (uint64_t[]){2, 2}, 2, 2, CKPT_MEM_HOST,
							  t), -CKPT_E_INVAL);
		rc = add_all(d, k, w, v, t);
		if (rc)
			dsave_abort(d);
		else
			rc = dsave_commit(d, &j->st[k]);
	}
	ckpt_store_close(s);
	free(w);
	return rc;
}

/* The logical bytes each rank saved: half of its 8 x 4096 box of w, a quarter of v, the one
 * element of s on rank 0, and the rows of t: ranks 1 and 2 one each, rank 0 none. */
static uint64_t want_logical(int k)
{
	uint64_t b = (ROWS / 2) * COLS * 4 / 2 + VN * 4 / NR;
	if (k == 0)
		b += 4;
	if (k == 1 || k == 2)
		b += 4 * 4;
	return b;
}

static void check_restore(const char *dir, uint64_t step)
{
	ckpt_store *s = open_store(dir);
	dreader *r = NULL;
	CHECK_OK(dreader_open(s, step, &r));
	if (!r) {
		ckpt_store_close(s);
		return;
	}
	long wi = dreader_find(r, "w");
	CHECK(wi >= 0 && dreader_shard_count(r, (size_t)wi) == 4);
	for (long j = 0; wi >= 0 && j < 4; j++) {
		ckpt_shard sh;
		CHECK_OK(dreader_shard(r, (size_t)wi, (size_t)j, &sh));
		/* rank r (mesh (r/2, r%2)) saved the r%2 half of rows block r/2 */
		CHECK(sh.lengths[0] == ROWS / 4 && sh.lengths[1] == COLS && sh.rank >= 0 &&
		      sh.offsets[0] == (uint64_t)(sh.rank / 2) * 8 + (uint64_t)(sh.rank % 2) * 4);
	}
	uint64_t off[2] = {0, 0}, len[2] = {ROWS, COLS}, bad = 0;
	float *w = malloc(ROWS * COLS * sizeof *w);
	REQUIRE(w);
	CHECK_OK(dreader_restore_box(r, (size_t)wi, off, len, w, ROWS * COLS * 4));
	for (uint64_t i = 0; i < ROWS * COLS; i++)
		bad += w[i] != wval(i);
	CHECK(bad == 0);
	float v[VN], t[8];
	uint64_t vl[2] = {1, VN}, tl[2] = {2, 4};
	CHECK_OK(dreader_restore_box(r, (size_t)dreader_find(r, "v"), off, vl, v,
					      sizeof v));
	for (uint64_t i = 0; i < VN; i++)
		bad += v[i] != (float)i;
	CHECK(dreader_shard_count(r, (size_t)dreader_find(r, "s")) == 1);
	CHECK(dreader_shard_count(r, (size_t)dreader_find(r, "t")) == 2);
	CHECK_OK(dreader_restore_box(r, (size_t)dreader_find(r, "t"), off, tl, t,
					      sizeof t));
	for (int i = 0; i < 8; i++)
		bad += t[i] != (float)(100 + i);
	CHECK(bad == 0);
	free(w);
	dreader_close(r);
	ckpt_store_close(s);
}

int main(void)
{
	char *dir = t_tmpdir("dmesh");
	for (uint64_t step = 1; step <= 2; step++) {
		struct job j = {.dir = dir, .step = step};
		REQUIRE(tw_run(NR, rank_main, &j, j.rc) == 0);
		for (int k = 0; k < NR; k++) {
			CHECK(j.rc[k] == 0);
			if (j.st[k].logical_bytes != want_logical(k))
				fprintf(stderr, "step %" PRIu64 " rank %d saved %" PRIu64 " bytes, want %"
					PRIu64 "\n", step, k, j.st[k].logical_bytes, want_logical(k));
			CHECK(j.st[k].logical_bytes == want_logical(k));
			if (step == 2) /* the same values split alike: every chunk is already stored */
				CHECK(j.st[k].chunks_new == 0);
		}
		check_restore(dir, step);
	}
	t_rmrf(dir);
	free(dir);
	return t_done();
}
