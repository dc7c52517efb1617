/* The snapshot phase of a multi-rank save (dsave.c walks them all): the part is submitted to the
 * pipeline with its reserved metadata, and its tensors are copied into the store's pinned pool
 * exactly as by a one-process save1_submit() (host and CUDA tensors, the streams of
 * dsave_after_stream(), the fence). Until the snapshot is done the caller may fence or wait on
 * the part (on_part); a threaded save's commit thread takes the part over only once the snapshot
 * is done and no such call is inside it. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/common.h"
#include "dist/dist_save.h"
#include "save/save.h"

/* Adds the reserved metadata and submits the part's save (kill point 1). Returns 0 or the error
 * (the part is then gone). */
int dist_submit_part(dsave *d)
{
	int rc = 0;
	for (size_t i = 0; i < d->nkeys && !rc; i += 2)
		rc = save1_set_meta(d->part, d->keys[i], d->keys[i + 1]);
	dist_kill_point(d->comm.rank);
	if (!rc)
		rc = save1_submit(d->part);
	if (rc) {
		save1_abort(d->part);
		d->part = NULL;
	}
	return rc;
}

int dsave_after_stream(dsave *d, void *stream)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (dist_state(d, NULL) != DSAVE_OPEN)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was already submitted", d->step);
	return save1_after_stream(d->part, stream);
}

/* Runs call on the part unless the commit thread is past the snapshot (then the part may be
 * gone, and the snapshot's outcome is the answer). The thread takes the part only once no such
 * call is inside it (snapshot_done in dsave.c). */
static int on_part(dsave *d, int (*call)(save1 *, void *), void *arg)
{
	enum dsave_state state = d ? dist_state(d, NULL) : DSAVE_OPEN;
	if (state == DSAVE_OPEN)
		return dist_not_submitted(d);
	if (state == DSAVE_SUBMITTED)
		return d->part ? call(d->part, arg) : d->submit_rc;
	struct async_commit *ac = d->ac;
	pthread_mutex_lock(&d->mu);
	if (d->state != DSAVE_SNAPSHOT) {
		int rc = ac->snap_rc;
		pthread_mutex_unlock(&d->mu);
		return rc ? ckpt_fail(-rc, "%s", ac->snap_msg) : 0;
	}
	ac->inside++;
	pthread_mutex_unlock(&d->mu);
	int rc = call(d->part, arg);
	pthread_mutex_lock(&d->mu);
	ac->inside--;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

static int call_wait_snapshot(save1 *part, void *arg)
{
	(void)arg;
	return save1_wait_snapshot(part);
}

static int call_fence(save1 *part, void *stream)
{
	return save1_fence(part, stream);
}

int dsave_wait_snapshot(dsave *d)
{
	return on_part(d, call_wait_snapshot, NULL);
}

int dsave_fence(dsave *d, void *stream)
{
	return on_part(d, call_fence, stream);
}
