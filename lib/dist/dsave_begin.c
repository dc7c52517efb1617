/* The begin phase of a multi-rank save (dsave.c walks them all): the handle, this rank's part save
 * under the store's lock taken shared and, on rank 0, the step's claim; then every rank's outcome,
 * step, world and chunk size gathered, so that a rank that cannot begin, or ranks that disagree,
 * fail every rank before any data is written. Also what every phase shares: the handle's end
 * (dist_free), the crash-test points and the communicator's errors. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "dist/dist.h"
#include "dist/dist_save.h"
#include "save/save.h"
#include "store/store.h"

/* Crash testing, in test builds only: CKPT_DIST_KILL_AT="RANK:N" kills rank RANK at the Nth
 * point of its multi-rank save (tests/unit/dist/t-dist kills at every point in turn). */
#ifdef CKPT_TEST_HOOKS
void dist_kill_point(int rank)
{
	static long n;
	const char *e = getenv("CKPT_DIST_KILL_AT");
	char *end;
	if (e && strtol(e, &end, 10) == rank && *end == ':' && ++n == atol(end + 1))
		raise(SIGKILL);
}
#else
void dist_kill_point(int rank) { (void)rank; }
#endif


/* What each rank tells the others at begin: whether its part could begin, and what it saves. */
struct begin_msg {
	int32_t rc;
	uint32_t world;
	uint64_t step;
	uint64_t chunk_size;
	char msg[232];
};

void dist_free(dsave *d, bool committed)
{
	for (size_t i = 0; i < d->nkeys; i++)
		free(d->keys[i]);
	free(d->keys);
	dist_claim_release(d->s, d->step, d->claim_fd, committed);
	if (d->lock_fd >= 0)
		close(d->lock_fd);
	pthread_mutex_lock(&d->s->lock.mu);
	d->s->lock.part_mode = false;
	pthread_mutex_unlock(&d->s->lock.mu);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->cv);
	free(d);
}

/* This rank's half of begin: its part save (the shared lock) and, on rank 0, the step's claim.
 * Returns 0 and sets *out, or an error (*out NULL). */
static int begin_local(ckpt_store *s, const ckpt_comm *comm, uint64_t step, dsave **out)
{
	dsave *d = calloc(1, sizeof *d);
	if (!d)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	/* One multi-rank save per handle at a time, and none beside a single-process one: the
	 * handle's mode decides which lock and which pack ids its saves take. */
	pthread_mutex_lock(&s->lock.mu);
	bool busy = s->lock.users > 0 || s->lock.part_mode;
	if (!busy) {
		s->lock.part_mode = true;
		s->lock.part_rank = (uint32_t)comm->rank;
	}
	pthread_mutex_unlock(&s->lock.mu);
	if (busy) {
		free(d);
		return ckpt_fail(CKPT_E_BUSY, "store %s: another save of this handle is in flight",
				 s->path);
	}
	*d = (dsave){.s = s, .comm = *comm, .step = step, .lock_fd = -1, .claim_fd = -1,
		     .state = DSAVE_OPEN};
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	int rc = save1_begin(s, step, &d->part);
	/* Our own shared hold on LOCK: the part save releases the store's when its part is
	 * durable, but gc must stay out until the global manifest names the part's packs. */
	if (!rc && (d->lock_fd = dup(s->lock.fd)) < 0)
		rc = ckpt_fail(ckpt_errno_code(errno), "dup lock of %s: %s", s->path, strerror(errno));
	if (!rc && comm->rank == 0)
		rc = dist_claim_step(s, step, (unsigned)comm->size, &d->claim_fd);
	if (rc) {
		save1_abort(d->part);
		dist_free(d, false);
		return rc;
	}
	*out = d;
	return 0;
}

int dist_comm_error(const ckpt_comm *c, uint64_t step, int rc, const char *what)
{
	const char *m = c->errmsg ? c->errmsg(c->ctx) : NULL;
	return ckpt_fail(rc < 0 ? -rc : CKPT_E_IO, "checkpoint %" PRIu64 ", rank %d: %s failed: %s",
			 step, c->rank, what, m ? m : ckpt_strerror(rc));
}

/* Every rank's begin, gathered: the first failure is every rank's, and the ranks must agree on
 * the step, the world and the chunk size before any of them writes data. */
static int begin_agree(const ckpt_comm *c, uint64_t step, const dsave *d, int rc)
{
	struct begin_msg mine = {.rc = rc, .world = (uint32_t)c->size, .step = step,
				 .chunk_size = d ? d->part->chunk_size : 0};
	if (rc)
		snprintf(mine.msg, sizeof mine.msg, "%s", ckpt_errmsg());
	struct begin_msg *all = calloc((size_t)c->size, sizeof *all);
	if (!all)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	int grc = c->allgather(c->ctx, &mine, sizeof mine, all);
	if (grc)
		rc = dist_comm_error(c, step, grc, "gathering every rank's begin");
	for (int r = 0; r < c->size && !grc && !rc; r++)
		if (all[r].rc)
			rc = ckpt_fail(-all[r].rc, "checkpoint %" PRIu64 ": rank %d could not begin: "
				       "%.*s", step, r, (int)sizeof all[r].msg, all[r].msg);
	for (int r = 1; r < c->size && !grc && !rc; r++)
		if (all[r].step != all[0].step || all[r].world != all[0].world)
			rc = ckpt_fail(CKPT_E_INVAL, "distributed save: rank %d begins step %" PRIu64
				       " of %u ranks, rank 0 step %" PRIu64 " of %u", r, all[r].step,
				       all[r].world, all[0].step, all[0].world);
		else if (all[r].chunk_size != all[0].chunk_size)
			rc = ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": rank %d's store handle "
				       "has chunk size %" PRIu64 ", rank 0's %" PRIu64 " (open the "
				       "store with the same options on every rank)", step, r,
				       all[r].chunk_size, all[0].chunk_size);
	free(all);
	return rc;
}

int dsave_begin(ckpt_store *s, const ckpt_comm *comm, uint64_t step,
				  dsave **out)
{
	*out = NULL;
	if (!s || !comm || !comm->allgather || !comm->broadcast)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL store or communicator");
	if (comm->size < 1 || comm->size > (int)DIST_MAX_RANKS || comm->rank < 0 ||
	    comm->rank >= comm->size)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: rank %d of %d (1 to %u ranks)",
				 comm->rank, comm->size, DIST_MAX_RANKS);
	dsave *d = NULL;
	int rc = begin_local(s, comm, step, &d);
	/* Collective even when this rank failed: the others must not wait for it at commit. */
	rc = begin_agree(comm, step, d, rc);
	if (rc && d) {
		save1_abort(d->part);
		dist_free(d, false);
	}
	if (!rc)
		*out = d;
	return rc;
}

int dist_not_submitted(const dsave *d)
{
	return !d ? ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save")
		  : ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was not submitted", d->step);
}
