/* A shard table must tile its global tensor exactly. Four ranks (threads,
 * tests/unit/t-dist-world.h) save "g": I16 [4, 6] as a 2 x 2 grid of boxes and "w": F32 [8, 6]
 * by rows; the global manifest's shard tables are then re-encoded (tests/unit/t-mf-rewrite.h, so
 * the checksum follows) with a gap, overlapping boxes (in a row split, and across the grid), a
 * box outside the extent, a table whose dtype is not its shards', one tensor named twice, a
 * shard of another name, and a part record of a rank written "01". dreader_open must
 * refuse each as -CKPT_E_CORRUPT with a message naming the tensor and the problem (both ranks
 * of an overlap); the overlaps and the gap used to open, and read back rows that no shard or two
 * shards held. The intact checkpoint opens, grid included, and restores whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "helpers.h"
#include "t-dist-world.h"
#include "t-mf-rewrite.h"

#define NR 4
#define STEP 1
#define KW DIST_SHARDS "w"
#define KG DIST_SHARDS "g"

static int16_t gval(unsigned i, unsigned j)
{
	return (int16_t)(i * 10 + j);
}

static int save(ckpt_store *s, ckpt_comm *c)
{
	unsigned r = (unsigned)c->rank, gi = r / 2 * 2, gj = r % 2 * 3;
	int16_t g[2 * 3];
	float w[2 * 6];
	for (unsigned i = 0; i < 2; i++)
		for (unsigned j = 0; j < 3; j++)
			g[i * 3 + j] = gval(gi + i, gj + j);
	for (unsigned i = 0; i < 12; i++)
		w[i] = (float)(r * 12 + i);
	uint64_t gg[2] = {4, 6}, go[2] = {gi, gj}, gl[2] = {2, 3};
	uint64_t wg[2] = {8, 6}, wo[2] = {2 * r, 0}, wl[2] = {2, 6};
	dsave *d;
	int rc = dsave_begin(s, c, STEP, &d);
	if (rc)
		return rc;
	if ((rc = dsave_add_shard(d, "g", CKPT_DTYPE_I16, 2, gg, go, gl, CKPT_MEM_HOST, g)) ||
	    (rc = dsave_add_shard(d, "w", CKPT_DTYPE_F32, 2, wg, wo, wl, CKPT_MEM_HOST, w))) {
		dsave_abort(d);
		return rc;
	}
	return dsave_commit(d, NULL);
}

static int rank_main(ckpt_comm *c, void *arg)
{
	ckpt_store **s = arg;
	return save(s[c->rank], c);
}

static void save_world(const char *dir)
{
	ckpt_store *s[NR];
	int rc[NR];
	for (int k = 0; k < NR; k++)
		REQUIRE((s[k] = t_open_store(dir, 64u << 10, 0)));
	REQUIRE(tw_run(NR, rank_main, s, rc) == 0);
	for (int k = 0; k < NR; k++) {
		CHECK_OK(rc[k]);
		ckpt_store_close(s[k]);
	}
}

/* A table of tensor name: dtype, global shape, then (tensor index, offsets) per shard. */
struct table {
	unsigned dt, n;
	unsigned long long g0, g1;
	unsigned t[NR];
	unsigned long long o[NR][2];
};

static void put(char *v, size_t len, const struct table *tb)
{
	int l = snprintf(v, len, "%u 2 %llu %llu %u", tb->dt, tb->g0, tb->g1, tb->n);
	for (unsigned s = 0; s < tb->n; s++)
		l += snprintf(v + l, len - (size_t)l, " %u %llu %llu", tb->t[s], tb->o[s][0],
			      tb->o[s][1]);
}

static void get(const char *v, struct table *tb)
{
	int at;
	REQUIRE(sscanf(v, "%u 2 %llu %llu %u%n", &tb->dt, &tb->g0, &tb->g1, &tb->n, &at) == 4 &&
		tb->n == NR);
	for (unsigned s = 0; s < NR; s++) {
		int more;
		REQUIRE(sscanf(v + at, " %u %llu %llu%n", &tb->t[s], &tb->o[s][0], &tb->o[s][1],
			       &more) == 3);
		at += more;
	}
}

/* Sets key to the table, expects the open to fail naming every string of want, restores orig. */
static void refused(ckpt_store *s, const char *path, const char *key, const struct table *tb,
		    const char *orig, const char *const *want)
{
	char v[DIST_VAL_MAX];
	put(v, sizeof v, tb);
	t_mf_set_meta(path, key, v);
	dreader *d = NULL;
	int rc = dreader_open(s, STEP, &d);
	int named = rc != 0;
	for (const char *const *w = want; *w && named; w++)
		named = strstr(ckpt_errmsg(), *w) != NULL;
	if (rc != -CKPT_E_CORRUPT || !named)
		fprintf(stderr, "%s = \"%s\": rc %d (%s)\n", key, v, rc, rc ? ckpt_errmsg() : "opened");
	CHECK(rc == -CKPT_E_CORRUPT && d == NULL && named);
	dreader_close(d);
	t_mf_set_meta(path, key, orig);
}

static void test_rows(ckpt_store *s, const char *path, const char *orig)
{
	struct table tb, x;
	get(orig, &tb);
	/* Rank 1's rows [2, 4) moved to [3, 5): it overlaps rank 2's [4, 6), row 2 is in none. */
	x = tb;
	x.o[1][0] = 3;
	refused(s, path, KW, &x, orig, (const char *[]){"tensor w", "rank 1", "rank 2", "overlap",
							 NULL});
	/* One more row in the global shape: row 8 is in no shard. */
	x = tb;
	x.g0 = 9;
	refused(s, path, KW, &x, orig, (const char *[]){"tensor w", "48 of its 54 elements",
							 "no shard", NULL});
	/* Rank 3's rows [6, 8) at [7, 9): outside the 8 rows. */
	x = tb;
	x.o[3][0] = 7;
	refused(s, path, KW, &x, orig, (const char *[]){"tensor w", "rank 3", "outside", NULL});
	/* I32 has F32's size: the bytes would restore, as the wrong type. */
	x = tb;
	x.dt = CKPT_DTYPE_I32;
	refused(s, path, KW, &x, orig, (const char *[]){"tensor w", "F32", "I32", NULL});
	/* Rank 0's tensor named twice (for rows [0, 2) and [2, 4)): rank 1's rows were rank 0's. */
	x = tb;
	x.t[1] = x.t[0];
	refused(s, path, KW, &x, orig, (const char *[]){"tensor w", "already a shard", NULL});
}

static void test_grid(ckpt_store *s, const char *path, const char *orig, const char *origw)
{
	struct table tb, x;
	get(orig, &tb);
	/* Rank 3's box [2, 4) x [3, 6) at [1, 3) x [3, 6): it overlaps rank 1's [0, 2) x [3, 6)
	 * (same columns, rows apart by one); rank 2's [2, 4) x [0, 3) is beside it. */
	x = tb;
	x.o[3][0] = 1;
	refused(s, path, KG, &x, orig, (const char *[]){"tensor g", "rank 1", "rank 3", "overlap",
							 NULL});
	/* A shard of w in g's table: its name is not g@R. */
	struct table w;
	get(origw, &w);
	x = tb;
	x.t[2] = w.t[2];
	x.dt = CKPT_DTYPE_I16;
	refused(s, path, KG, &x, orig, (const char *[]){"tensor g", "w@", NULL});
}

struct rename {
	const char *from, *to;
};

static void rename_key(struct manifest *m, void *arg)
{
	const struct rename *rn = arg;
	for (uint32_t i = 0; i < m->n_meta; i++)
		if (!strcmp(m->meta[i].key, rn->from)) {
			m->meta[i].key = rn->to;
			m->meta[i].klen = (uint32_t)strlen(rn->to);
		}
}

static void test_part_key(ckpt_store *s, const char *path)
{
	struct rename rn = {DIST_PART "1", DIST_PART "01"}, back = {DIST_PART "01", DIST_PART "1"};
	t_mf_rewrite(path, rename_key, &rn, NULL);
	dreader *d = NULL;
	CHECK(dreader_open(s, STEP, &d) == -CKPT_E_CORRUPT && !d);
	CHECK(strstr(ckpt_errmsg(), DIST_PART "01"));
	t_mf_rewrite(path, rename_key, &back, NULL);
}

static void check_intact(ckpt_store *s)
{
	dreader *d = NULL;
	CHECK_OK(dreader_open(s, STEP, &d));
	REQUIRE(d);
	long g = dreader_find(d, "g");
	REQUIRE(g >= 0);
	CHECK(dreader_shard_count(d, (size_t)g) == NR);
	int16_t got[4 * 6];
	uint64_t off[2] = {0, 0}, len[2] = {4, 6};
	CHECK_OK(dreader_restore_box(d, (size_t)g, off, len, got, sizeof got));
	for (unsigned i = 0; i < 4; i++)
		for (unsigned j = 0; j < 6; j++)
			CHECK(got[i * 6 + j] == gval(i, j));
	CHECK(dreader_verify_parts(d, NULL, NULL) == 0);
	dreader_close(d);
}

int main(void)
{
	char *dir = t_tmpdir("dist-tiling");
	save_world(dir);
	ckpt_store *s = t_open_store(dir, 64u << 10, 0);
	REQUIRE(s);
	check_intact(s);
	char name[64], path[4096], ow[DIST_VAL_MAX], og[DIST_VAL_MAX];
	store_mf_name(STEP, name, sizeof name);
	snprintf(path, sizeof path, "%s/%s", s->layout.mf_dir, name);
	reader1 *r;
	CHECK_OK(reader1_open(s, STEP, &r));
	REQUIRE(r && reader1_get_meta(r, KW) && reader1_get_meta(r, KG));
	snprintf(ow, sizeof ow, "%s", reader1_get_meta(r, KW));
	snprintf(og, sizeof og, "%s", reader1_get_meta(r, KG));
	reader1_close(r);
	test_rows(s, path, ow);
	test_grid(s, path, og, ow);
	test_part_key(s, path);
	check_intact(s);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
