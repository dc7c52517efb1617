/* The commit phase of a multi-rank save (dsave.c walks them all): every rank's part outcome is
 * gathered; rank 0 checks the parts and commits the global manifest (dist_merge.c), whose rename
 * is the only commit point, and broadcasts the outcome. After a failure the part's chunks leave
 * the handle's dedup index. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist.h"
#include "dist/dist_save.h"
#include "store/store.h"

/* Rank 0, after the global commit: which ranks upload their own packs to rank 0's remote. */
static void notify_rank0(dsave *d, const struct part_msg *all, size_t n, uint64_t key)
{
	bool *sharing = calloc(n, sizeof *sharing);
	if (!sharing) /* no one shares: rank 0's upload puts every pack itself */
		return store_notify_commit(d->s, d->step);
	for (size_t r = 0; r < n; r++)
		sharing[r] = key && all[r].upkey == key;
	store_notify_dist(d->s, d->step, 0, (unsigned)n, sharing);
	free(sharing);
}

/* Metadata set after a deferred submit (dsave_add.c): read by rank 0's commit once the exchange
 * began, when nobody adds to it any more. */
static const char *const *late_list(const dsave *d)
{
	return d->ac ? (const char *const *)d->ac->late : NULL;
}

static size_t late_count(const dsave *d)
{
	return d->ac ? d->ac->nlate : 0;
}

/* After the allgather: the first failed rank's error, or 0. */
static int gathered_error(const dsave *d, const struct part_msg *all)
{
	for (int r = 0; r < d->comm.size; r++)
		if (all[r].rc)
			return ckpt_fail(-all[r].rc, "checkpoint %" PRIu64 ": rank %d failed: %.*s",
					 d->step, r, (int)sizeof all[r].msg, all[r].msg);
	return 0;
}

int dist_commit_all(dsave *d, ckpt_stats *st, struct part_msg *mine)
{
	size_t n = (size_t)d->comm.size;
	struct part_msg *all = calloc(n, sizeof *all);
	if (!all)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	uint64_t key = store_upload_key(d->s);
	mine->upkey = key;
	int rc = d->comm.allgather(d->comm.ctx, mine, sizeof *mine, all);
	if (rc) {
		rc = dist_comm_error(&d->comm, d->step, rc, "gathering the parts' outcome");
		free(all);
		return rc;
	}
	dist_kill_point(d->comm.rank);
	struct part_msg out = {0};
	if (d->comm.rank == 0) {
		rc = gathered_error(d, all);
		if (!rc) {
			struct dist_part_sum *sums = calloc(n, sizeof *sums);
			if (!sums)
				rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
			for (size_t r = 0; r < n && sums; r++) {
				sums[r].size = all[r].size;
				memcpy(sums[r].digest, all[r].digest, 16);
			}
			if (sums)
				rc = dist_write_global(d->s, d->step, (unsigned)n, sums,
						       late_list(d), late_count(d), d->comm.rank,
						       dist_kill_point);
			if (!rc) /* every rank's packs are durable: the remote may take them */
				notify_rank0(d, all, n, key);
			free(sums);
		}
		out.rc = rc;
		out.upkey = key;
		if (rc)
			snprintf(out.msg, sizeof out.msg, "%s", ckpt_errmsg());
	}
	free(all);
	int brc = d->comm.broadcast(d->comm.ctx, &out, sizeof out, 0);
	if (brc)
		return dist_comm_error(&d->comm, d->step, brc,
				       "receiving the commit's outcome from rank 0");
	if (d->comm.rank != 0 && out.rc)
		return ckpt_fail(-out.rc, "checkpoint %" PRIu64 ": rank 0 could not commit: %.*s",
				 d->step, (int)sizeof out.msg, out.msg);
	if (d->comm.rank != 0 && key && out.upkey == key) /* rank 0 finishes what we upload */
		store_notify_dist(d->s, d->step, d->comm.rank, (unsigned)n, NULL);
	(void)st;
	return out.rc;
}

/* After a multi-rank save that made no checkpoint: the chunks this rank's part wrote are in the
 * handle's dedup index (its part committed) but no manifest names them, so gc may remove them;
 * the next save must not reuse them. The index is rebuilt from the manifests at its next use
 * (rare: only after a failure). */
void dist_forget_part(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->index.mu);
	s->index.valid = false;
	pthread_mutex_unlock(&s->index.mu);
}
