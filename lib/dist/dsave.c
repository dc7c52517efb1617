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
 *
 * The variants are paths through the states of one machine (d->state, enum dsave_state in
 * dist_save.h), which name the phase a save is in:
 *
 *   dsave_commit()               OPEN -> SUBMITTED: snapshot, persist, commit; freed
 *   dsave_submit(0)              OPEN -> SUBMITTED; dsave_wait(): persist, commit; freed
 *   dsave_submit(THREADED)       OPEN -> SNAPSHOT -> PERSIST ---------> EXCHANGE -> DONE
 *   dsave_submit(THREADED|DEFER) OPEN -> SNAPSHOT -> PERSIST -> HELD -> EXCHANGE -> DONE
 *                                                  dsave_release() --^
 *
 * A SUBMITTED save runs on the caller's thread, in dsave_commit() or dsave_wait(), and stays
 * SUBMITTED until it is freed. From SNAPSHOT on, the commit thread moves it: PERSIST once the
 * snapshot is done (until then the caller's fence and wait_snapshot reach the part), EXCHANGE once
 * the part is durable, DONE with the outcome, which dsave_wait() collects before it frees the
 * save. Every change of state is made here; the phases' files only read it. A deferred save (d->defer) waits in HELD for
 * dsave_release(), which may come in any state before; until then it takes metadata for the
 * global manifest, and a release with an error (or the -CKPT_E_STATE of a wait or abort before
 * the release) becomes this rank's outcome in the exchange. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist_save.h"
#include "save/save.h"

/* PERSIST -> EXCHANGE, through HELD when deferred: this rank's part is durable; its outcome goes
 * to the exchange only once the caller released it (and as the caller's failure when it
 * released with one). A save on the caller's thread stays SUBMITTED. */
static void to_exchange(dsave *d, struct part_msg *m)
{
	pthread_mutex_lock(&d->mu);
	if (d->state == DSAVE_SUBMITTED) {
		pthread_mutex_unlock(&d->mu);
		return;
	}
	if (d->defer != DSAVE_NOT_DEFERRED) {
		d->state = DSAVE_HELD;
		while (d->defer != DSAVE_RELEASED)
			pthread_cond_wait(&d->cv, &d->mu);
		if (d->ac->rel_rc && !m->rc) {
			m->rc = d->ac->rel_rc;
			snprintf(m->msg, sizeof m->msg, "%s", d->ac->rel_msg);
		}
	}
	d->state = DSAVE_EXCHANGE;
	pthread_mutex_unlock(&d->mu);
}

/* The rest of a save after submit, from SUBMITTED or PERSIST: the part durable, the release of a
 * deferred save, the exchange, rank 0's commit. */
static int finish(dsave *d, ckpt_stats *st)
{
	struct part_msg mine = {0};
	dist_persist_part(d, d->submit_rc, st, &mine);
	to_exchange(d, &mine);
	int rc = dist_commit_all(d, st, &mine);
	if (rc)
		dist_forget_part(d->s);
	return rc;
}

int dsave_commit(dsave *d, ckpt_stats *st)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (dist_state(d, NULL) != DSAVE_OPEN)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was submitted: wait for it with "
				 "dsave_wait()", d->step);
	d->state = DSAVE_SUBMITTED;
	d->submit_rc = dist_submit_part(d);
	int rc = finish(d, st);
	dist_free(d, !rc);
	return rc;
}

/* SNAPSHOT -> PERSIST: waits for the part's snapshot, records its outcome (which answers the
 * caller's fence and wait_snapshot from then on) and returns once no such call is inside the part,
 * which the commit thread then owns. */
static void snapshot_done(dsave *d)
{
	struct async_commit *ac = d->ac;
	int snap = d->part ? save1_wait_snapshot(d->part) : d->submit_rc;
	pthread_mutex_lock(&d->mu);
	ac->snap_rc = snap;
	if (snap)
		snprintf(ac->snap_msg, sizeof ac->snap_msg, "%s", ckpt_errmsg());
	d->state = DSAVE_PERSIST;
	pthread_cond_broadcast(&d->cv);
	while (ac->inside)
		pthread_cond_wait(&d->cv, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

/* SNAPSHOT -> PERSIST -> (HELD ->) EXCHANGE -> DONE. */
static void *commit_thread(void *arg)
{
	dsave *d = arg;
	struct async_commit *ac = d->ac;
	snapshot_done(d);
	int rc = finish(d, &ac->st);
	pthread_mutex_lock(&d->mu);
	ac->rc = rc;
	if (rc) /* ckpt_errmsg() is per thread: the caller's wait() sets it from this */
		snprintf(ac->msg, sizeof ac->msg, "%s", ckpt_errmsg());
	d->state = DSAVE_DONE;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

/* SUBMITTED -> SNAPSHOT, the commit thread going on from there. Returns 0, or -1 (no thread: the
 * save stays SUBMITTED). */
static int start_thread(dsave *d)
{
	struct async_commit *ac = calloc(1, sizeof *ac);
	if (!ac)
		return -1;
	d->ac = ac;
	d->state = DSAVE_SNAPSHOT;
	if (pthread_create(&ac->th, NULL, commit_thread, d) == 0)
		return 0;
	d->state = DSAVE_SUBMITTED;
	free(ac);
	d->ac = NULL;
	return -1;
}

int dsave_submit(dsave *d, unsigned flags)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (dist_state(d, NULL) != DSAVE_OPEN)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was already submitted", d->step);
	unsigned known = CKPT_SAVE_THREADED | CKPT_SAVE_DEFER;
	if (flags & ~known)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": unknown submit flags %#x",
				 d->step, flags & ~known);
	if ((flags & CKPT_SAVE_DEFER) && !(flags & CKPT_SAVE_THREADED))
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": CKPT_SAVE_DEFER needs "
				 "CKPT_SAVE_THREADED (the commit waits for the release on the library's "
				 "thread)", d->step);
	/* Until the commit thread starts, only this thread looks at d. */
	d->state = DSAVE_SUBMITTED;
	d->submit_rc = dist_submit_part(d);
	d->defer = flags & CKPT_SAVE_DEFER ? DSAVE_DEFERRED : DSAVE_NOT_DEFERRED;
	/* Without a thread (none allowed, or none to be had) the collective runs in wait(). */
	bool threaded = (flags & CKPT_SAVE_THREADED) && start_thread(d) == 0;
	if ((flags & CKPT_SAVE_DEFER) && !threaded) {
		/* No thread to wait for the release on: the part fails, so every rank's commit
		 * does (in wait(), where the exchange then runs). */
		d->defer = DSAVE_NOT_DEFERRED;
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
	enum dsave_defer defer = DSAVE_NOT_DEFERRED;
	if (!d || dist_state(d, &defer) == DSAVE_OPEN)
		return !d ? ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save")
			  : ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was not submitted", d->step);
	if (defer == DSAVE_NOT_DEFERRED)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was not submitted with "
				 "CKPT_SAVE_DEFER", d->step);
	if (rc > 0)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": release with rc %d (0 or a "
				 "negative CKPT_E_* code)", d->step, rc);
	struct async_commit *ac = d->ac;
	pthread_mutex_lock(&d->mu);
	bool again = d->defer == DSAVE_RELEASED;
	if (!again) {
		d->defer = DSAVE_RELEASED;
		ac->rel_rc = rc;
		snprintf(ac->rel_msg, sizeof ac->rel_msg, "%s", rc ? (why && *why ? why :
				"the caller gave the save up on this rank") : "");
		pthread_cond_broadcast(&d->cv);
	}
	pthread_mutex_unlock(&d->mu);
	return again ? ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was released already",
				 d->step) : 0;
}

int dsave_poll(const dsave *d)
{
	enum dsave_state state = d ? dist_state(d, NULL) : DSAVE_OPEN;
	if (state == DSAVE_OPEN)
		return 0;
	if (state == DSAVE_SUBMITTED)
		return d->part ? save1_poll(d->part) : 1;
	return state == DSAVE_DONE;
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
	free(ac);
	d->ac = NULL;
	return rc;
}

/* A deferred save that is waited for or aborted before its release fails (never a commit the
 * caller did not release, never a wait for ever). */
static void release_unreleased(dsave *d, const char *why)
{
	enum dsave_defer defer;
	dist_state(d, &defer);
	if (defer == DSAVE_DEFERRED)
		dsave_release(d, -CKPT_E_STATE, why);
}

int dsave_wait(dsave *d, ckpt_stats *st)
{
	enum dsave_state state = d ? dist_state(d, NULL) : DSAVE_OPEN;
	if (state == DSAVE_OPEN)
		return dist_not_submitted(d);
	release_unreleased(d, "waited for before dsave_release()");
	int rc = dist_threaded(state) ? join_thread(d, st) : finish(d, st);
	dist_free(d, !rc);
	return rc;
}

void dsave_abort(dsave *d)
{
	if (!d)
		return;
	if (dist_threaded(dist_state(d, NULL))) {
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
