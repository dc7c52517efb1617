/* Asynchronous multi-rank saves (dsave_submit and what follows it): the commit thread
 * (CKPT_SAVE_THREADED), the deferred release (CKPT_SAVE_DEFER) with the metadata set until then,
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

static int not_submitted(const dsave *d)
{
	return !d ? ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save")
		  : ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was not submitted", d->step);
}


static void *commit_thread(void *arg)
{
	dsave *d = arg;
	struct async_commit *ac = d->ac;
	int snap = d->part ? save1_wait_snapshot(d->part) : d->submit_rc;
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

static int start_thread(dsave *d)
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

int dsave_submit(dsave *d, unsigned flags)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (d->submitted)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was already submitted", d->step);
	unsigned known = CKPT_SAVE_THREADED | CKPT_SAVE_DEFER;
	if (flags & ~known)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": unknown submit flags %#x",
				 d->step, flags & ~known);
	if ((flags & CKPT_SAVE_DEFER) && !(flags & CKPT_SAVE_THREADED))
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": CKPT_SAVE_DEFER needs "
				 "CKPT_SAVE_THREADED (the commit waits for the release on the library's "
				 "thread)", d->step);
	d->submitted = true;
	d->submit_rc = dist_submit_part(d);
	d->deferred = flags & CKPT_SAVE_DEFER;
	/* Without a thread (none allowed, or none to be had) the collective runs in wait(). */
	d->threaded = (flags & CKPT_SAVE_THREADED) && start_thread(d) == 0;
	if (d->deferred && !d->threaded) {
		/* No thread to wait for the release on: the part fails, so every rank's commit
		 * does (in wait(), where the exchange then runs). */
		d->deferred = false;
		if (d->part) {
			save1_abort(d->part);
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
static int on_part(dsave *d, int (*call)(save1 *, void *), void *arg)
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

int dsave_after_stream(dsave *d, void *stream)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (d->submitted)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was already submitted", d->step);
	return save1_after_stream(d->part, stream);
}

int dsave_poll(const dsave *d)
{
	if (!d || !d->submitted)
		return 0;
	if (!d->threaded)
		return d->part ? save1_poll(d->part) : 1;
	pthread_mutex_lock(&d->ac->mu);
	int done = d->ac->done;
	pthread_mutex_unlock(&d->ac->mu);
	return done;
}

/* Bytes of the part hashed so far; the commit thread of a threaded save owns (and frees) the
 * part, so only an unthreaded one is asked. */
int dsave_progress(const dsave *d, uint64_t *done)
{
	if (!d || d->threaded || !d->part)
		return ckpt_fail(CKPT_E_UNSUPPORTED, "distributed save: no progress count here");
	return save1_progress(d->part, done);
}

/* Joins the commit thread; its outcome (and statistics into st) become the caller's. */
static int join_thread(dsave *d, ckpt_stats *st)
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
static void release_unreleased(dsave *d, const char *why)
{
	if (!d->deferred)
		return;
	pthread_mutex_lock(&d->ac->mu);
	bool done = d->ac->released;
	pthread_mutex_unlock(&d->ac->mu);
	if (!done)
		dsave_release(d, -CKPT_E_STATE, why);
}

int dsave_wait(dsave *d, ckpt_stats *st)
{
	if (!d || !d->submitted)
		return not_submitted(d);
	release_unreleased(d, "waited for before dsave_release()");
	int rc = d->threaded ? join_thread(d, st) : dist_finish(d, st);
	dist_free(d, !rc);
	return rc;
}

void dsave_abort(dsave *d)
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
	save1_abort(d->part);
	d->part = NULL;
	struct part_msg mine = {.rc = -CKPT_E_STATE};
	snprintf(mine.msg, sizeof mine.msg, "the save was aborted on this rank");
	dist_commit_all(d, NULL, &mine);
	dist_forget_part(d->s);
	dist_free(d, false);
}
