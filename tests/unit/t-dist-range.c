/* Flattened-range shards: dsave_add_range and
 * dreader_restore_range, as FSDP1 flat parameters and Megatron's distributed optimizer
 * hold a tensor (elements [offset, offset + count) of its row-major order).
 * - dist_range_boxes: every range of every small shape is cut into contiguous boxes, in order,
 *   that cover it exactly, at most 2 * ndim - 1 of them.
 * - 4 thread-ranks save "w" (6 x 5 x 7 f32) as four uneven ranges, "v" (3 x 1000) as two ranges
 *   each held by two replicas, and "m" (4 x 8) as a box on rank 0 beside ranges on ranks 1 and
 *   2. The global manifest is format version 3; the whole tensors, column boxes and arbitrary
 *   ranges read back exact; a second save of the same values writes no new chunk.
 * - Ranges that leave a hole fail the commit on every rank; a range outside the tensor and a
 *   buffer of the wrong size are INVAL. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist_layout.h"
#include "helpers.h"
#include "t-dist-world.h"
#include "t-open-opts.h"

#define NR 4
#define WN (6 * 5 * 7)
#define VN 3000
#define MN 32

enum mode { FULL, HOLE };

struct job {
	const char *dir;
	uint64_t step;
	enum mode mode;
	ckpt_stats st[NR];
};

static float wv(uint64_t i) { return (float)i + 0.25f; }
static float vv(uint64_t i) { return (float)i * 2.0f; }
static float mv(uint64_t i) { return (float)i - 100.0f; }

/* Every range of shapes up to 3 x 4 x 5 (and a few others): boxes in order, contiguous, exact. */
static void check_boxes(void)
{
	static const uint64_t shapes[][3] = {{3, 4, 5}, {1, 4, 5}, {3, 1, 5}, {2, 3, 1}, {7, 1, 1}};
	static const unsigned nds[] = {3, 3, 3, 3, 3};
	struct dist_range_box b[DIST_RANGE_MAX_BOXES];
	size_t nb, most = 0;
	for (size_t s = 0; s < ARRAY_SIZE(shapes); s++)
		for (unsigned nd = 1; nd <= nds[s]; nd++) {
			const uint64_t *g = shapes[s] + (3 - nd);
			uint64_t vol = 1, st[3];
			for (unsigned i = nd; i-- > 0;) {
				st[i] = vol;
				vol *= g[i];
			}
			for (uint64_t a = 0; a <= vol; a++)
				for (uint64_t c = 0; a + c <= vol; c++) {
					CHECK_OK(dist_range_boxes("t", nd, g, a, c, b, &nb));
					CHECK(nb <= 2 * nd - 1 || (c == 0 && nb == 0));
					most = nb > most ? nb : most;
					uint64_t at = 0;
					for (size_t i = 0; i < nb; i++) {
						uint64_t first = 0, n = 1;
						for (unsigned d = 0; d < nd; d++) {
							first += b[i].off[d] * st[d];
							n *= b[i].len[d];
							CHECK(b[i].off[d] + b[i].len[d] <= g[d]);
						}
						/* contiguous: trailing dims whole below the first >1 */
						bool inner = false;
						for (unsigned d = 0; d < nd; d++) {
							if (inner)
								CHECK(b[i].off[d] == 0 && b[i].len[d] == g[d]);
							else if (b[i].len[d] != 1)
								inner = true;
						}
						CHECK(b[i].elem == at && first == a + at && n > 0);
						at += n;
					}
					CHECK(at == c);
				}
		}
	CHECK(most == 5);
	uint64_t g2[2] = {4, 4};
	CHECK(dist_range_boxes("t", 2, g2, 10, 7, b, &nb) == -CKPT_E_INVAL);
	CHECK(strstr(ckpt_errmsg(), "outside") != NULL);
	CHECK_OK(dist_range_boxes("t", 0, NULL, 0, 1, b, &nb));
	CHECK(nb == 1);
}

static int add_all(dsave *d, int k, enum mode mode, const float *w, const float *v,
		   const float *m)
{
	static const uint64_t wcut[NR + 1] = {0, 37, 100, 101, WN};
	uint64_t wg[3] = {6, 5, 7}, vg[2] = {3, 1000}, mg[2] = {4, 8};
	uint64_t w0 = wcut[k], w1 = wcut[k + 1];
	if (mode == HOLE && k == 2)
		w1 = 100; /* [100, 101) is nobody's */
	int rc = dsave_add_range(d, "w", CKPT_DTYPE_F32, 3, wg, w0, w1 - w0, 0, 1,
					  CKPT_MEM_HOST, w + w0);
	/* v: ranks 0 and 1 hold [0, 1500) alike, ranks 2 and 3 [1500, 3000) */
	uint64_t v0 = (uint64_t)(k / 2) * 1500;
	if (!rc)
		rc = dsave_add_range(d, "v", CKPT_DTYPE_F32, 2, vg, v0, 1500,
					      (unsigned)k % 2, 2, CKPT_MEM_HOST, v + v0);
	if (!rc && k == 0) { /* m: a box of rows 0-1 (16 elements) on rank 0 */
		uint64_t off[2] = {0, 0}, l[2] = {2, 8};
		rc = dsave_add_shard(d, "m", CKPT_DTYPE_F32, 2, mg, off, l, CKPT_MEM_HOST, m);
	} else if (!rc && k == 1) {
		rc = dsave_add_range(d, "m", CKPT_DTYPE_F32, 2, mg, 16, 4, 0, 1,
					      CKPT_MEM_HOST, m + 16);
	} else if (!rc && k == 2) {
		rc = dsave_add_range(d, "m", CKPT_DTYPE_F32, 2, mg, 20, 12, 0, 1,
					      CKPT_MEM_HOST, m + 20);
	}
	return rc;
}

static int rank_main(ckpt_comm *c, void *p)
{
	struct job *j = p;
	int k = c->rank;
	float w[WN], v[VN], m[MN];
	for (uint64_t i = 0; i < WN; i++)
		w[i] = wv(i);
	for (uint64_t i = 0; i < VN; i++)
		v[i] = vv(i);
	for (uint64_t i = 0; i < MN; i++)
		m[i] = mv(i);
	ckpt_store *s = t_open_opts(j->dir, (const int64_t[]){CKPT_OPT_CHUNK_SIZE, 64 << 10, 0});
	dsave *d;
	int rc = dsave_begin(s, c, j->step, &d);
	if (!rc) {
		if (j->mode == FULL && k == 3) { /* bad arguments, refused before anything is added */
			uint64_t g[2] = {4, 8};
			CHECK(dsave_add_range(d, "bad", CKPT_DTYPE_F32, 2, g, 30, 3, 0, 1,
						       CKPT_MEM_HOST, m) == -CKPT_E_INVAL);
			CHECK(strstr(ckpt_errmsg(), "flattened range of bad") != NULL);
			CHECK(dsave_add_range(d, "bad", CKPT_DTYPE_F32, 2, g, 0, 3, 1, 1,
						       CKPT_MEM_HOST, m) == -CKPT_E_INVAL);
		}
		int arc = add_all(d, k, j->mode, w, v, m);
		CHECK_OK(arc);
		rc = dsave_commit(d, &j->st[k]);
	}
	ckpt_store_close(s);
	return rc;
}

static void save(struct job *j, int want)
{
	int rcs[NR];
	REQUIRE(tw_run(NR, rank_main, j, rcs) == 0);
	for (int k = 0; k < NR; k++)
		CHECK(rcs[k] == want);
}

static uint32_t mf_version(const char *dir, uint64_t step)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/manifests/%020" PRIu64 ".ckpt", dir, step);
	FILE *f = fopen(p, "rb");
	uint8_t h[12] = {0};
	REQUIRE(f && fread(h, 1, 12, f) == 12);
	fclose(f);
	return (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
}

static void check_read(const char *dir, uint64_t step, bool pieces)
{
	ckpt_store *s = t_open_opts(dir, (const int64_t[]){0});
	dreader *r;
	CHECK(mf_version(dir, step) == (pieces ? 3u : 2u));
	CHECK_OK(dreader_open(s, step, &r));
	long wi = dreader_find(r, "w"), vi = dreader_find(r, "v");
	long mi = dreader_find(r, "m");
	REQUIRE(wi >= 0 && vi >= 0 && mi >= 0);
	float got[VN];
	uint64_t o3[3] = {0, 0, 0}, l3[3] = {6, 5, 7};
	CHECK_OK(dreader_restore_box(r, (size_t)wi, o3, l3, got, WN * 4));
	for (uint64_t i = 0; i < WN; i++)
		CHECK(got[i] == wv(i));
	/* a column box: w[:, 2:4, 3] */
	uint64_t co[3] = {0, 2, 3}, cl[3] = {6, 2, 1};
	CHECK_OK(dreader_restore_box(r, (size_t)wi, co, cl, got, 12 * 4));
	for (uint64_t a = 0; a < 6; a++)
		for (uint64_t b = 0; b < 2; b++)
			CHECK(got[a * 2 + b] == wv(a * 35 + (2 + b) * 7 + 3));
	/* ranges across every split */
	static const uint64_t rs[][2] = {{0, WN}, {3, 147}, {36, 2}, {100, 1}, {209, 1}, {5, 0}};
	for (size_t i = 0; i < ARRAY_SIZE(rs); i++) {
		memset(got, 0, sizeof got);
		CHECK_OK(dreader_restore_range(r, (size_t)wi, rs[i][0], rs[i][1],
							CKPT_MEM_HOST, got, rs[i][1] * 4));
		for (uint64_t e = 0; e < rs[i][1]; e++)
			CHECK(got[e] == wv(rs[i][0] + e));
	}
	CHECK_OK(dreader_restore_range(r, (size_t)vi, 1, VN - 2, CKPT_MEM_HOST, got,
						(VN - 2) * 4));
	for (uint64_t e = 0; e < VN - 2; e++)
		CHECK(got[e] == vv(1 + e));
	CHECK_OK(dreader_restore_range(r, (size_t)mi, 0, MN, CKPT_MEM_HOST, got, MN * 4));
	for (uint64_t e = 0; e < MN; e++)
		CHECK(got[e] == mv(e));
	CHECK(dreader_restore_range(r, (size_t)mi, 30, 3, CKPT_MEM_HOST, got, 12) ==
	      -CKPT_E_INVAL);
	CHECK(dreader_restore_range(r, (size_t)mi, 0, 3, CKPT_MEM_HOST, got, 8) ==
	      -CKPT_E_INVAL);
	CHECK(strstr(ckpt_errmsg(), "buffer of 8 bytes") != NULL);
	/* w's ranges are 3 + 4 + 1 + 3 boxes (37 = 1 row of 35 and 2; ...): more shards than ranks */
	CHECK(dreader_shard_count(r, (size_t)wi) > NR);
	dreader_close(r);
	ckpt_store_close(s);
}

int main(void)
{
	check_boxes();
	char *dir = t_tmpdir("dist-range");
	struct job j = {.dir = dir, .step = 1, .mode = FULL};
	save(&j, 0);
	check_read(dir, 1, true);
	uint64_t logical = 0;
	for (int k = 0; k < NR; k++)
		logical += j.st[k].logical_bytes;
	/* every element once: v's replicas split it, nothing is saved twice */
	CHECK(logical == (WN + VN + MN) * 4);
	j.step = 2;
	save(&j, 0);
	for (int k = 0; k < NR; k++)
		CHECK(j.st[k].chunks_new == 0); /* the same ranges cut the same boxes: all dedup */
	check_read(dir, 2, true);
	/* a hole in w: the commit fails on every rank, no checkpoint */
	j.step = 3;
	j.mode = HOLE;
	save(&j, -CKPT_E_INVAL);
	ckpt_store *s = t_open_opts(dir, (const int64_t[]){0});
	uint64_t got;
	CHECK(ckpt_store_resolve(s, 3, &got) == -CKPT_E_NOTFOUND);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
