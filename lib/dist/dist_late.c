/* The deferred release of a multi-rank save (CKPT_SAVE_DEFER): dsave_release, the
 * commit thread's wait for it, and the metadata set after submit until then, which rank 0's
 * commit puts into the global manifest. Below dist.c (which asks it for the late metadata)
 * and dist_async.c (whose thread waits here). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist_save.h"
#include "format/format.h"

/* Metadata set after a deferred submit (late_meta): read by rank 0's commit once the exchange
 * began, when nobody adds to it any more. */
const char *const *dist_late_list(const dsave *d)
{
	return d->ac ? (const char *const *)d->ac->late : NULL;
}

size_t dist_late_count(const dsave *d)
{
	return d->ac ? d->ac->nlate : 0;
}

/* CKPT_SAVE_DEFER: this rank's part is durable; its outcome goes to the exchange only once the
 * caller released it (and as the caller's failure when it released with one). */
void dist_await_release(dsave *d, struct part_msg *m)
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

/* Metadata set after a deferred submit: kept for the global manifest (rank 0's), replacing an
 * entry of the same key, until the commit's exchange begins. */
int dist_late_meta(dsave *d, const char *key, const char *value)
{
	struct async_commit *ac = d->ac;
	if (!d->deferred || !ac)
		return ckpt_fail(CKPT_E_STATE, "metadata '%s': checkpoint %" PRIu64 " was already "
				 "submitted (after submit only a CKPT_SAVE_DEFER save takes metadata, "
				 "until dsave_release)", key, d->step);
	if (!*key || !value || !strcmp(key, CKPT_TAGS_KEY))
		return ckpt_fail(CKPT_E_INVAL, "metadata: key must be a non-empty string other than "
				 "%s, value a string", CKPT_TAGS_KEY);
	char *k = strdup(key), *v = strdup(value);
	int rc = k && v ? 0 : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	pthread_mutex_lock(&ac->mu);
	if (!rc && (ac->released || ac->gathering))
		rc = ckpt_fail(CKPT_E_STATE, "metadata '%s': checkpoint %" PRIu64 " was released "
			       "for its commit already", key, d->step);
	size_t i = 0;
	while (!rc && i < ac->nlate && strcmp(ac->late[i], key))
		i += 2;
	if (!rc && i == ac->nlate) {
		char **n = realloc(ac->late, (ac->nlate + 2) * sizeof *n);
		if (n) {
			ac->late = n;
			ac->late[i] = NULL;
			ac->late[i + 1] = NULL;
			ac->nlate += 2;
		} else
			rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	if (!rc) {
		free(ac->late[i]);
		free(ac->late[i + 1]);
		ac->late[i] = k;
		ac->late[i + 1] = v;
		k = v = NULL;
	}
	pthread_mutex_unlock(&ac->mu);
	free(k);
	free(v);
	return rc;
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
