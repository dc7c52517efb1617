/* The overlap sweep of multi-rank shards (dist_find_overlap, lib/dist/dist_layout.c), shared by
 * rank 0's merge and the layout of a global manifest: on random small boxes
 * in 1 to 3 dimensions it finds an overlap exactly when a brute-force pairwise test does, and
 * the pair it names overlaps; empty boxes overlap nothing, two scalars overlap. A row split of
 * DIST_MAX_RANKS shards and a 32 x 32 grid pass, and one shard grown onto its neighbour among
 * 1022 rows is found and named. */
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "dist/dist_layout.h"
#include "helpers.h"
#include "store/store.h"

#define MAXN 12

struct boxes {
	unsigned nd;
	size_t n;
	uint64_t off[MAXN][3], len[MAXN][3];
	struct dist_box b[MAXN];
};

static bool brute(const struct boxes *x, size_t i, size_t j)
{
	for (unsigned d = 0; d < x->nd; d++)
		if (!x->len[i][d] || !x->len[j][d] || x->off[i][d] >= x->off[j][d] + x->len[j][d] ||
		    x->off[j][d] >= x->off[i][d] + x->len[i][d])
			return false;
	return true;
}

static void test_random(void)
{
	uint64_t seed = 24;
	for (int it = 0; it < 20000; it++) {
		struct boxes x = {.nd = (unsigned)(t_rand(&seed) % 4),
				  .n = 1 + (size_t)(t_rand(&seed) % MAXN)};
		for (size_t i = 0; i < x.n; i++) {
			for (unsigned d = 0; d < x.nd; d++) {
				x.off[i][d] = t_rand(&seed) % 10;
				x.len[i][d] = t_rand(&seed) % 4; /* 0: an empty box */
			}
			x.b[i] = (struct dist_box){x.off[i], x.len[i]};
		}
		bool want = false;
		for (size_t i = 0; i < x.n && !want; i++)
			for (size_t j = 0; j < i && !want; j++)
				want = brute(&x, i, j);
		size_t a = MAXN, b = MAXN;
		int rc = dist_find_overlap(x.nd, x.b, x.n, &a, &b);
		CHECK(rc == want);
		if (rc != want)
			fprintf(stderr, "iteration %d: %zu boxes of %u dims: %d, want %d\n", it, x.n,
				x.nd, rc, want);
		if (rc == 1)
			CHECK(a < x.n && b < x.n && a != b && brute(&x, a, b));
	}
}

/* n boxes: a row split [i, i + 1) of one dimension, or a side x side grid of unit boxes. */
static struct dist_box *tiles(size_t n, unsigned nd, size_t side, uint64_t *off, uint64_t *len)
{
	struct dist_box *b = calloc(n, sizeof *b);
	REQUIRE(b);
	for (size_t i = 0; i < n; i++) {
		off[2 * i] = nd == 1 ? i : i / side;
		off[2 * i + 1] = i % side;
		len[2 * i] = len[2 * i + 1] = 1;
		b[i] = (struct dist_box){&off[2 * i], &len[2 * i]};
	}
	return b;
}

static void test_scale(void)
{
	enum { N = DIST_MAX_RANKS };
	static uint64_t off[2 * 1024], len[2 * 1024]; /* the grid has 32 x 32 */
	size_t a, b;
	struct dist_box *r = tiles(N, 1, 1, off, len);
	CHECK_RC(dist_find_overlap(1, r, N, &a, &b), 0);
	/* Shard 700 two rows long: it covers shard 701's row. */
	len[2 * 700] = 2;
	CHECK_RC(dist_find_overlap(1, r, N, &a, &b), 1);
	CHECK((a == 700 && b == 701) || (a == 701 && b == 700));
	free(r);
	struct dist_box *g = tiles(32 * 32, 2, 32, off, len);
	CHECK_RC(dist_find_overlap(2, g, 32 * 32, &a, &b), 0);
	/* Box (5, 7) one column wider: it covers (5, 8). */
	len[2 * (5 * 32 + 7) + 1] = 2;
	CHECK_RC(dist_find_overlap(2, g, 32 * 32, &a, &b), 1);
	CHECK(MIN(a, b) == 5 * 32 + 7 && MAX(a, b) == 5 * 32 + 8);
	free(g);
}

static void test_edges(void)
{
	struct dist_box s[2] = {{NULL, NULL}, {NULL, NULL}};
	size_t a, b;
	CHECK_RC(dist_find_overlap(0, s, 1, &a, &b), 0);
	CHECK_RC(dist_find_overlap(0, s, 2, &a, &b), 1); /* two scalars: the same element */
	CHECK_RC(dist_find_overlap(1, s, 0, &a, &b), 0);
	/* An empty box inside another holds nothing: no overlap. */
	uint64_t o[2] = {0, 3}, l[2] = {8, 0};
	struct dist_box e[2] = {{&o[0], &l[0]}, {&o[1], &l[1]}};
	CHECK_RC(dist_find_overlap(1, e, 2, &a, &b), 0);
}

int main(void)
{
	test_random();
	test_scale();
	test_edges();
	return t_done();
}
