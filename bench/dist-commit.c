/* The multi-rank commit at scale, run by bench/dist_bench.sh:
 *
 *   dist-commit DIR RANKS STEPS
 *
 * RANKS ranks (threads of this process, each with its own store handle: the communicator of the
 * unit tests, tests/unit/t-dist-world.h) save small shards (one F32 row of 256 elements and one
 * box of a 2-D grid each) into a new store in DIR, STEPS times after one warm-up save. Timed:
 * from a barrier after every rank added its shards to the last rank's return from
 * ckpt_save_commit: each rank's part written and made durable, rank 0 reading the RANKS
 * parts, checking the tiling, merging and committing the global manifest, the outcome broadcast.
 * Also timed: the begin (every rank's handle takes the lock, finds its next pack id and refreshes
 * its index; rank 0 claims the step). One JSON line: {"ranks": N, "commit_seconds": [per step],
 * "median": s, "begin_median": s}. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TC_MAXR 256
#include "../tests/unit/t-dist-world.h"

#define ROW 256

struct job {
	ckpt_store **s;
	uint64_t step;
	double b0, b1, t0, t1;  /* the timed spans of begin and commit (mu) */
	pthread_mutex_t mu;
	int failed;
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int rank_main(ckpt_comm *c, void *arg)
{
	struct job *j = arg;
	unsigned r = (unsigned)c->rank, n = (unsigned)c->size, side = 1;
	while ((side + 1) * (side + 1) <= n)
		side++;
	float w[ROW], g[4];
	for (unsigned i = 0; i < ROW; i++)
		w[i] = (float)(j->step * 1000003u + r * ROW + i);
	for (unsigned i = 0; i < 4; i++)
		g[i] = (float)(j->step + r + i);
	/* w: one row per rank; g: a side x side grid of 2 x 2 boxes on the first side^2 ranks and a
	 * row of boxes below it for the others. */
	uint64_t wg[2] = {n, ROW}, wo[2] = {r, 0}, wl[2] = {1, ROW};
	uint64_t rows = (n + side - 1) / side;
	uint64_t gg[2] = {2 * rows, 2 * side}, go[2] = {2 * (r / side), 2 * (r % side)}, gl[2] = {2, 2};
	ckpt_tensor tg = {.struct_size = sizeof tg, .name = "g", .dtype = CKPT_DTYPE_F32, .ndim = 2,
			  .shape = gl, .mem = CKPT_MEM_HOST, .data = g, .global_shape = gg,
			  .offsets = go};
	ckpt_tensor tw = {.struct_size = sizeof tw, .name = "w", .dtype = CKPT_DTYPE_F32, .ndim = 2,
			  .shape = wl, .mem = CKPT_MEM_HOST, .data = w, .global_shape = wg,
			  .offsets = wo};
	ckpt_save_options so = {.struct_size = sizeof so, .comm = c};
	ckpt_save *d;
	c->barrier(c->ctx);
	double b0 = now();
	int rc = ckpt_save_begin(j->s[r], j->step, &so, &d);
	double b1 = now();
	if (!rc && n % side == 0 && (rc = ckpt_save_add(d, &tg)))
		ckpt_save_abort(d);
	if (!rc && (rc = ckpt_save_add(d, &tw)))
		ckpt_save_abort(d);
	c->barrier(c->ctx);
	double t0 = now();
	if (!rc)
		rc = ckpt_save_commit(d, NULL);
	double t1 = now();
	pthread_mutex_lock(&j->mu);
	j->b0 = b0 < j->b0 ? b0 : j->b0;
	j->b1 = b1 > j->b1 ? b1 : j->b1;
	if (t0 < j->t0)
		j->t0 = t0;
	if (t1 > j->t1)
		j->t1 = t1;
	if (rc && !j->failed) {
		j->failed = 1;
		fprintf(stderr, "dist-commit: rank %u, step %llu: %s\n", r,
			(unsigned long long)j->step, ckpt_errmsg());
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 4 || atoi(argv[2]) < 1 || atoi(argv[2]) > TC_MAXR || atoi(argv[3]) < 1) {
		fprintf(stderr, "usage: dist-commit DIR RANKS(1-%d) STEPS\n", TC_MAXR);
		return 2;
	}
	unsigned n = (unsigned)atoi(argv[2]), steps = (unsigned)atoi(argv[3]);
	struct job j = {.s = calloc(n, sizeof *j.s)};
	double *sec = calloc(steps, sizeof *sec), *bsec = calloc(steps, sizeof *bsec);
	int *rcs = calloc(n, sizeof *rcs);
	pthread_mutex_init(&j.mu, NULL);
	for (unsigned r = 0; j.s && r < n; r++) {
		/* Tiny saves: one thread and the smallest pool (1 MiB) per handle, no compression. */
		ckpt_options *o = ckpt_options_create();
		if (!o || ckpt_options_set(o, CKPT_OPT_CREATE, 1) ||
		    ckpt_options_set(o, CKPT_OPT_THREADS, 1) ||
		    ckpt_options_set(o, CKPT_OPT_IO_SIZE, 64 << 10) ||
		    ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 1 << 20) ||
		    ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 64 << 10) ||
		    ckpt_options_set(o, CKPT_OPT_COMPRESS, 0)) {
			fprintf(stderr, "dist-commit: options: %s\n", ckpt_errmsg());
			return 1;
		}
		if (ckpt_store_open(argv[1], o, &j.s[r])) {
			fprintf(stderr, "dist-commit: open %s: %s\n", argv[1], ckpt_errmsg());
			return 1;
		}
		ckpt_options_free(o);
	}
	for (unsigned k = 0; k <= steps; k++) { /* step 1: the warm-up (pools, rings) */
		j.step = k + 1;
		j.t0 = j.b0 = 1e300;
		j.t1 = j.b1 = 0;
		if (tw_run(n, rank_main, &j, rcs) || j.failed)
			return 1;
		if (k) {
			sec[k - 1] = j.t1 - j.t0;
			bsec[k - 1] = j.b1 - j.b0;
		}
	}
	printf("{\"ranks\": %u, \"commit_seconds\": [", n);
	for (unsigned k = 0; k < steps; k++)
		printf("%s%.6f", k ? ", " : "", sec[k]);
	qsort(sec, steps, sizeof *sec, cmp_d);
	qsort(bsec, steps, sizeof *bsec, cmp_d);
	printf("], \"median\": %.6f, \"begin_median\": %.6f}\n", sec[steps / 2], bsec[steps / 2]);
	for (unsigned r = 0; r < n; r++)
		ckpt_store_close(j.s[r]);
	free(j.s);
	free(sec);
	free(bsec);
	free(rcs);
	return 0;
}
