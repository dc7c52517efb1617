/* Makes a multi-rank checkpoint for the ckptctl tests: N ranks are N threads of this process,
 * each with its own store handle, talking through an in-process communicator (a mutex and a
 * condition variable). Public API only (include/ckpt.h).
 *
 *   mkdist STORE STEP NRANKS [--abort RANK] [--gen G]
 *
 * Saves "w": f32 [8,6] sharded by rows (rank r holds rows [8r/N, 8(r+1)/N)), "emb": u16
 * [1000,320] replicated on every rank (10 chunks of 64 KiB, split among the replicas) and
 * metadata "step". The values of w depend on G (default 0), so a step saved with another G
 * rewrites w's chunk but not emb's. With --abort, that rank gives up: the commit fails on every
 * rank and leaves its parts as garbage. The store is created (64 KiB chunks) when missing. Exit
 * status 0 when the checkpoint was committed, 1 when not (the error of every rank printed). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

#define MAXR 16

struct shared {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned n, arrived, gen;
	uint8_t buf[MAXR * 512];
};

struct rank {
	struct shared *sh;
	int rank;
	const char *path;
	uint64_t step;
	int abort_rank;
	unsigned g;
	int rc;
	char msg[512];
};

static int t_barrier(void *ctx)
{
	struct rank *r = ctx;
	struct shared *s = r->sh;
	pthread_mutex_lock(&s->mu);
	unsigned gen = s->gen;
	if (++s->arrived == s->n) {
		s->arrived = 0;
		s->gen++;
		pthread_cond_broadcast(&s->cv);
	} else {
		while (gen == s->gen)
			pthread_cond_wait(&s->cv, &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static int t_allgather(void *ctx, const void *in, size_t len, void *out)
{
	struct rank *r = ctx;
	if (len > 512)
		return -CKPT_E_INVAL;
	pthread_mutex_lock(&r->sh->mu);
	memcpy(r->sh->buf + (size_t)r->rank * len, in, len);
	pthread_mutex_unlock(&r->sh->mu);
	t_barrier(ctx);
	pthread_mutex_lock(&r->sh->mu);
	memcpy(out, r->sh->buf, len * r->sh->n);
	pthread_mutex_unlock(&r->sh->mu);
	t_barrier(ctx);
	return 0;
}

static int t_broadcast(void *ctx, void *buf, size_t len, int root)
{
	struct rank *r = ctx;
	if (len > sizeof r->sh->buf)
		return -CKPT_E_INVAL;
	if (r->rank == root) {
		pthread_mutex_lock(&r->sh->mu);
		memcpy(r->sh->buf, buf, len);
		pthread_mutex_unlock(&r->sh->mu);
	}
	t_barrier(ctx);
	if (r->rank != root) {
		pthread_mutex_lock(&r->sh->mu);
		memcpy(buf, r->sh->buf, len);
		pthread_mutex_unlock(&r->sh->mu);
	}
	t_barrier(ctx);
	return 0;
}

/* Filled before the rank threads start, read-only after: every replica holds the same data. */
static uint16_t emb[1000 * 320];

static int save(struct rank *r, ckpt_store *st)
{
	unsigned n = r->sh->n, k = (unsigned)r->rank;
	uint64_t r0 = 8u * k / n, r1 = 8u * (k + 1) / n;
	float w[8 * 6];
	for (uint64_t i = 0; i < (r1 - r0) * 6; i++)
		w[i] = (float)((r0 * 6 + i) * 3 + r->g) / 2.0f;
	ckpt_comm comm = {.rank = r->rank, .size = (int)n, .ctx = r, .allgather = t_allgather,
			  .broadcast = t_broadcast, .barrier = t_barrier};
	uint64_t gw[2] = {8, 6}, off[2] = {r0, 0}, lw[2] = {r1 - r0, 6}, ge[2] = {1000, 320};
	ckpt_dist_save *d;
	int rc = ckpt_dist_save_begin(st, &comm, r->step, &d);
	if (rc)
		return rc;
	char v[32];
	snprintf(v, sizeof v, "%llu", (unsigned long long)r->step);
	if ((rc = ckpt_dist_save_add_shard(d, "w", CKPT_DTYPE_F32, 2, gw, off, lw, CKPT_MEM_HOST,
					   w)) ||
	    (rc = ckpt_dist_save_add_replicated(d, "emb", CKPT_DTYPE_U16, 2, ge, k, n,
						CKPT_MEM_HOST, emb)) ||
	    (rc = ckpt_dist_save_set_meta(d, "step", v)) || r->rank == r->abort_rank) {
		ckpt_dist_save_abort(d);
		return rc ? rc : -CKPT_E_STATE;
	}
	return ckpt_dist_save_commit(d, NULL);
}

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	ckpt_store *st;
	r->rc = ckpt_store_open(r->path, NULL, &st);
	if (!r->rc) {
		r->rc = save(r, st);
		if (r->rc)
			snprintf(r->msg, sizeof r->msg, "%s", ckpt_errmsg());
		ckpt_store_close(st);
	} else {
		snprintf(r->msg, sizeof r->msg, "%s", ckpt_errmsg());
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: mkdist STORE STEP NRANKS [--abort RANK] [--gen G]\n");
		return 2;
	}
	struct shared sh = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	sh.n = (unsigned)atoi(argv[3]);
	int abort_rank = -1;
	unsigned g = 0;
	for (int i = 4; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--abort"))
			abort_rank = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--gen"))
			g = (unsigned)atoi(argv[i + 1]);
	}
	if (sh.n < 1 || sh.n > MAXR)
		return 2;
	for (size_t i = 0; i < sizeof emb / sizeof *emb; i++)
		emb[i] = (uint16_t)(i * 2654435761u >> 16);
	ckpt_options *o = ckpt_options_create();
	ckpt_store *st;
	if (!o || ckpt_options_set(o, CKPT_OPT_CREATE, 1) ||
	    ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 64 << 10) || ckpt_store_open(argv[1], o, &st)) {
		fprintf(stderr, "mkdist: %s\n", ckpt_errmsg());
		return 1;
	}
	ckpt_store_close(st);
	ckpt_options_free(o);
	struct rank rk[MAXR];
	pthread_t th[MAXR];
	for (unsigned k = 0; k < sh.n; k++) {
		rk[k] = (struct rank){.sh = &sh, .rank = (int)k, .path = argv[1],
				      .step = strtoull(argv[2], NULL, 10), .abort_rank = abort_rank,
				      .g = g};
		pthread_create(&th[k], NULL, rank_main, &rk[k]);
	}
	int fail = 0;
	for (unsigned k = 0; k < sh.n; k++) {
		pthread_join(th[k], NULL);
		if (rk[k].rc) {
			fprintf(stderr, "mkdist: rank %u: %s\n", k, rk[k].msg);
			fail = 1;
		}
	}
	return fail;
}
