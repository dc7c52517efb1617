/* An in-process communicator for multi-rank tests: ranks are threads of one process, each with
 * its own store handle; collectives meet at a generation-counting barrier. Used by
 * tests/unit/t-dist-storm.c (also under TSan) and tests/cli/mkdist.c. No rank dies here, so
 * nothing waits for a rank that is gone. */
#ifndef T_DIST_TCOMM_H
#define T_DIST_TCOMM_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "ckpt.h"

/* The most ranks; a test of a wider world defines it before the include. */
#ifndef TC_MAXR
#define TC_MAXR 16
#endif
#define TC_BUF (TC_MAXR * 512)

struct tc_shared {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned n, arrived, gen;
	uint8_t buf[TC_BUF];
};

struct tc_rank {
	struct tc_shared *sh;
	int rank;
};

static int tc_barrier(void *ctx)
{
	struct tc_rank *r = ctx;
	struct tc_shared *s = r->sh;
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

static int tc_allgather(void *ctx, const void *in, size_t len, void *out)
{
	struct tc_rank *r = ctx;
	if (len * r->sh->n > TC_BUF)
		return -CKPT_E_INVAL;
	pthread_mutex_lock(&r->sh->mu);
	memcpy(r->sh->buf + (size_t)r->rank * len, in, len);
	pthread_mutex_unlock(&r->sh->mu);
	tc_barrier(ctx);
	pthread_mutex_lock(&r->sh->mu);
	memcpy(out, r->sh->buf, len * r->sh->n);
	pthread_mutex_unlock(&r->sh->mu);
	return tc_barrier(ctx); /* nobody overwrites buf before every rank copied it */
}

static int tc_broadcast(void *ctx, void *buf, size_t len, int root)
{
	struct tc_rank *r = ctx;
	if (len > TC_BUF)
		return -CKPT_E_INVAL;
	if (r->rank == root) {
		pthread_mutex_lock(&r->sh->mu);
		memcpy(r->sh->buf, buf, len);
		pthread_mutex_unlock(&r->sh->mu);
	}
	tc_barrier(ctx);
	if (r->rank != root) {
		pthread_mutex_lock(&r->sh->mu);
		memcpy(buf, r->sh->buf, len);
		pthread_mutex_unlock(&r->sh->mu);
	}
	return tc_barrier(ctx);
}

/* Sets up n ranks: sh (zeroed by the caller or static) and r[0..n). */
static void tc_init(struct tc_shared *sh, struct tc_rank *r, unsigned n)
{
	pthread_mutex_init(&sh->mu, NULL);
	pthread_cond_init(&sh->cv, NULL);
	sh->n = n;
	sh->arrived = sh->gen = 0;
	for (unsigned k = 0; k < n; k++)
		r[k] = (struct tc_rank){.sh = sh, .rank = (int)k};
}

static ckpt_comm tc_comm(struct tc_rank *r)
{
	return (ckpt_comm){.struct_size = sizeof(ckpt_comm), .rank = r->rank,
			   .size = (int)r->sh->n, .ctx = r,
			   .allgather = tc_allgather, .broadcast = tc_broadcast,
			   .barrier = tc_barrier};
}

#endif
