/* Asynchronous multi-rank saves (ckpt_dist_save_submit and what follows it): the commit thread
 * (CKPT_DIST_THREADED), the deferred release (CKPT_DIST_DEFER) with the metadata set until then,
 * and wait, poll and abort. The save itself (begin, adds, the part, the collective commit) is
 * dist.c. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist.h"
#include "dist/dist_save.h"
#include "format/format.h"
#include "save/save.h"
#include "store/store.h"

static int not_submitted(const ckpt_dist_save *d)
{
	return !d ? ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save")
		  : ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was not submitted", d->step);
}


static void *commit_thread(void *arg)
{
	ckpt_dist_save *d = arg;
	struct async_commit *ac = d->ac;
	int snap = d->part ? ckpt_save_wait_snapshot(d->part) : d->submit_rc;
	pthread_mutex_lock(&ac->mu);
	ac->snap_rc = snap;
	if (snap)
		snprintf(ac->snap_msg, sizeof ac->snap_msg, "%s", ckpt_errmsg());
	ac->snap_done = true;
	pthread_cond_broadcast(&ac->cv);
	while (ac->inside)
		pthread_cond_wait(&ac->cv, &ac->mu);
	pthread_mutex_unlock(&ac->mu);
	int rc = dist_finish(d, &ac->st);
	pthread_mutex_lock(&ac->mu);
	ac->rc = rc;
	if (rc) /* ckpt_errmsg() is per thread: the caller's wait() sets it from this */
		snprintf(ac->msg, sizeof ac->msg, "%s", ckpt_errmsg());
	ac->done = true;
	pthread_cond_broadcast(&ac->cv);
	pthread_mutex_unlock(&ac->mu);
	return NULL;
}

static int start_thread(ckpt_dist_save *d)
{
	struct async_commit *ac = calloc(1, sizeof *ac);
	if (!ac)
		return -1;
	pthread_mutex_init(&ac->mu, NULL);
	pthread_cond_init(&ac->cv, NULL);
	d->ac = ac;
	if (pthread_create(&ac->th, NULL, commit_thread, d) == 0)
		return 0;
	pthread_mutex_destroy(&ac->mu);
	pthread_cond_destroy(&ac->cv);
	free(ac);
	d->ac = NULL;
	return -1;
}

CKPT_API int ckpt_dist_save_submit(ckpt_dist_save *d, unsigned flags)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (d->submitted)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was already submitted", d->step);
	unsigned known = CKPT_DIST_THREADED | CKPT_DIST_DEFER;
	if (flags & ~known)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": unknown submit flags %#x",
				 d->step, flags & ~known);
	if ((flags & CKPT_DIST_DEFER) && !(flags & CKPT_DIST_THREADED))
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": CKPT_DIST_DEFER needs "
				 "CKPT_DIST_THREADED (the commit waits for the release on the library's "
				 "thread)", d->step);
	d->submitted = true;
	d->submit_rc = dist_submit_part(d);
	d->deferred = flags & CKPT_DIST_DEFER;
	/* Without a thread (none allowed, or none to be had) the collective runs in wait(). */
	d->threaded = (flags & CKPT_DIST_THREADED) && start_thread(d) == 0;
	if (d->deferred && !d->threaded) {
		/* No thread to wait for the release on: the part fails, so every rank's commit
		 * does (in wait(), where the exchange then runs). */
		d->deferred = false;
		if (d->part) {
			ckpt_save_abort(d->part);
			d->part = NULL;
		}
		if (!d->submit_rc)
			d->submit_rc = ckpt_fail(CKPT_E_NOMEM, "checkpoint %" PRIu64 ": cannot start "
						 "the commit thread", d->step);
	}
	return d->submit_rc;
}


/* Runs call on the part unless the commit thread is past the snapshot (then the part may be
 * gone, and the snapshot's outcome is the answer). */
static int on_part(ckpt_dist_save *d, int (*call)(ckpt_save *, void *), void *arg)
{
	if (!d || !d->submitted)
		return not_submitted(d);
	if (!d->threaded)
		return d->part ? call(d->part, arg) : d->submit_rc;
	struct async_commit *ac = d->ac;
	pthread_mutex_lock(&ac->mu);
	if (ac->snap_done) {
		int rc = ac->snap_rc;
		pthread_mutex_unlock(&ac->mu);
		return rc ? ckpt_fail(-rc, "%s", ac->snap_msg) : 0;
	}
	ac->inside++;
	pthread_mutex_unlock(&ac->mu);
	int rc = call(d->part, arg);
	pthread_mutex_lock(&ac->mu);
	ac->inside--;
	pthread_cond_broadcast(&ac->cv);
	pthread_mutex_unlock(&ac->mu);
	return rc;
}

static int call_wait_snapshot(ckpt_save *part, void *arg)
{
	(void)arg;
	return ckpt_save_wait_snapshot(part);
}

static int call_fence(ckpt_save *part, void *stream)
{
	return ckpt_save_fence(part, stream);
}

CKPT_API int ckpt_dist_save_wait_snapshot(ckpt_dist_save *d)
{
	return on_part(d, call_wait_snapshot, NULL);
}

CKPT_API int ckpt_dist_save_fence(ckpt_dist_save *d, void *stream)
{
	return on_part(d, call_fence, stream);
}

CKPT_API int ckpt_dist_save_after_stream(ckpt_dist_save *d, void *stream)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (d->submitted)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was already submitted", d->step);
	return ckpt_save_after_stream(d->part, stream);
}

CKPT_API int ckpt_dist_save_poll(const ckpt_dist_save *d)
{
	if (!d || !d->submitted)
		return 0;
	if (!d->threaded)
		return d->part ? ckpt_save_poll(d->part) : 1;
	pthread_mutex_lock(&d->ac->mu);
	int done = d->ac->done;
	pthread_mutex_unlock(&d->ac->mu);
	return done;
}

/* Joins the commit thread; its outcome (and statistics into st) become the caller's. */
static int join_thread(ckpt_dist_save *d, ckpt_stats *st)
{
	struct async_commit *ac = d->ac;
	pthread_join(ac->th, NULL);
	int rc = ac->rc;
	if (st)
		*st = ac->st;
	if (rc)
		ckpt_fail(-rc, "%s", ac->msg);
	for (size_t i = 0; i < ac->nlate; i++)
		free(ac->late[i]);
	free(ac->late);
	pthread_mutex_destroy(&ac->mu);
	pthread_cond_destroy(&ac->cv);
	free(ac);
	d->ac = NULL;
	return rc;
}

/* A deferred save that is waited for or aborted before its release fails (never a commit the
 * caller did not release, never a wait for ever). */
static void release_unreleased(ckpt_dist_save *d, const char *why)
{
	if (!d->deferred)
		return;
	pthread_mutex_lock(&d->ac->mu);
	bool done = d->ac->released;
	pthread_mutex_unlock(&d->ac->mu);
	if (!done)
		ckpt_dist_save_release(d, -CKPT_E_STATE, why);
}

CKPT_API int ckpt_dist_save_wait(ckpt_dist_save *d, ckpt_stats *st)
{
	if (!d || !d->submitted)
		return not_submitted(d);
	release_unreleased(d, "waited for before ckpt_dist_save_release()");
	int rc = d->threaded ? join_thread(d, st) : dist_finish(d, st);
	dist_free(d, !rc);
	return rc;
}

CKPT_API void ckpt_dist_save_abort(ckpt_dist_save *d)
{
	if (!d)
		return;
	if (d->threaded) {
		/* The collective commit is under way on the thread: one rank cannot take it back
		 * (a deferred one not yet released fails). */
		release_unreleased(d, "the save was aborted on this rank");
		int rc = join_thread(d, NULL);
		dist_free(d, !rc);
		return;
	}
	ckpt_save_abort(d->part);
	d->part = NULL;
	struct part_msg mine = {.rc = -CKPT_E_STATE};
	snprintf(mine.msg, sizeof mine.msg, "the save was aborted on this rank");
	dist_commit_all(d, NULL, &mine);
	dist_forget_part(d->s);
	dist_free(d, false);
}
