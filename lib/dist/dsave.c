/* Multi-rank saves: a layer over the single-process save. Each rank saves an ordinary manifest
 * (its "part") into STORE/parts/<step>/<rank>.part with packs in its own id range, under the
 * store's lock taken shared; rank 0 merges the parts into one global manifest (format version 2)
 * after an allgather says every part is durable, and that one rename is the commit.
 *
 * The global manifest is an ordinary manifest of the union of the parts' chunks, so the dedup
 * index, gc liveness, verify and du work on it unchanged: replicated tensors become ordinary
 * tensors (their pieces are whole chunks, concatenated in replica order); each shard of a sharded
 * tensor is a tensor "NAME@RANK" and the shard table lives in reserved metadata (docs/format.md,
 * "Format version 2"). The box reader is dist_read.c.
 *
 * One save runs through five phases, each in its file; this file moves a save from one to the
 * next, on the caller's thread or on the commit thread:
 *   begin     dsave_begin.c     the part save, rank 0's claim of the step, the ranks agree
 *   add       dsave_add.c       tensors, metadata and tags into the part
 *   snapshot  dsave_snapshot.c  the part submitted, its tensors copied (fence, wait_snapshot)
 *   persist   dsave_persist.c   the part durable and described for the exchange
 *   commit    dsave_commit.c    the exchange of outcomes, rank 0's global manifest, broadcast
 * dsave_commit() runs snapshot, persist and commit at once; dsave_submit() returns after the
 * part's submit, and the rest runs in dsave_wait() or, with CKPT_SAVE_THREADED, on the commit
 * thread, which with CKPT_SAVE_DEFER waits between persist and commit for dsave_release(). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist_save.h"
#include "save/save.h"

/* CKPT_SAVE_DEFER: this rank's part is durable; its outcome goes to the exchange only once the
 * caller released it (and as the caller's failure when it released with one). */
static void await_release(dsave *d, struct part_msg *m)
{
	struct async_commit *ac = d->ac;
	pthread_mutex_lock(&ac->mu);
	while (!ac->released)
		pthread_cond_wait(&ac->cv, &ac->mu);
	ac->gathering = true;
	if (ac->rel_rc && !m->rc) {
		m->rc = ac->rel_rc;
		snprintf(m->msg, sizeof m->msg, "%s", ac->rel_msg);
	}
	pthread_mutex_unlock(&ac->mu);
}

/* The rest of a save after submit: the part durable, the exchange, rank 0's commit. */
static int finish(dsave *d, ckpt_stats *st)
{
	struct part_msg mine = {0};
	dist_persist_part(d, d->submit_rc, st, &mine);
	if (d->deferred)
		await_release(d, &mine);
	int rc = dist_commit_all(d, st, &mine);
	if (rc)
		dist_forget_part(d->s);
	return rc;
}

int dsave_commit(dsave *d, ckpt_stats *st)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (d->submitted)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was submitted: wait for it with "
				 "dsave_wait()", d->step);
	d->submit_rc = dist_submit_part(d);
	int rc = finish(d, st);
	dist_free(d, !rc);
	return rc;
}

static void *commit_thread(void *arg)
{
	dsave *d = arg;
	struct async_commit *ac = d->ac;
	dist_snapshot_end(d);
	int rc = finish(d, &ac->st);
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

int dsave_release(dsave *d, int rc, const char *why)
{
	if (!d || !d->submitted)
		return !d ? ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save")
			  : ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was not submitted", d->step);
	if (!d->deferred)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was not submitted with "
				 "CKPT_SAVE_DEFER", d->step);
	if (rc > 0)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": release with rc %d (0 or a "
				 "negative CKPT_E_* code)", d->step, rc);
	struct async_commit *ac = d->ac;
	pthread_mutex_lock(&ac->mu);
	bool again = ac->released;
	if (!again) {
		ac->released = true;
		ac->rel_rc = rc;
		snprintf(ac->rel_msg, sizeof ac->rel_msg, "%s", rc ? (why && *why ? why :
				"the caller gave the save up on this rank") : "");
		pthread_cond_broadcast(&ac->cv);
	}
	pthread_mutex_unlock(&ac->mu);
	return again ? ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was released already",
				 d->step) : 0;
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
		return dist_not_submitted(d);
	release_unreleased(d, "waited for before dsave_release()");
	int rc = d->threaded ? join_thread(d, st) : finish(d, st);
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
