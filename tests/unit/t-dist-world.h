/* Runs a world of ranks as threads of this process (tests/unit/t-dist-tcomm.h): each rank's
 * function gets its communicator and the caller's argument, and opens its own store handle.
 * Used by t-dist-bounds.c, t-dist-tiling.c and tests/fuzz/gen-dist-corpus.c. */
#ifndef T_DIST_WORLD_H
#define T_DIST_WORLD_H

#include <pthread.h>

#include "t-dist-tcomm.h"

struct tw_rank {
	struct tc_rank tc;
	int (*fn)(ckpt_comm *c, void *arg);
	void *arg;
	int rc;
};

static void *tw_main(void *p)
{
	struct tw_rank *r = p;
	ckpt_comm c = tc_comm(&r->tc);
	r->rc = r->fn(&c, r->arg);
	return NULL;
}

/* Runs fn on n ranks (at most TC_MAXR) and waits for them; rcs[k] is rank k's return value.
 * Returns 0, or -1 when a thread could not start (nothing is then left running). */
static int tw_run(unsigned n, int (*fn)(ckpt_comm *c, void *arg), void *arg, int *rcs)
{
	static struct tc_shared sh;
	struct tc_rank tr[TC_MAXR];
	struct tw_rank rk[TC_MAXR];
	pthread_t th[TC_MAXR];
	if (n < 1 || n > TC_MAXR)
		return -1;
	tc_init(&sh, tr, n);
	for (unsigned k = 0; k < n; k++) {
		rk[k] = (struct tw_rank){.tc = tr[k], .fn = fn, .arg = arg};
		if (pthread_create(&th[k], NULL, tw_main, &rk[k]))
			abort(); /* the started ranks would wait for it at the first collective */
	}
	for (unsigned k = 0; k < n; k++) {
		pthread_join(th[k], NULL);
		rcs[k] = rk[k].rc;
	}
	return 0;
}

#endif
