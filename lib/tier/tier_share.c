/* The background upload of a multi-rank checkpoint (tier.h, docs/format.md "Remote layout"):
 * every rank's handle puts its share, the packs of its own id range that the global manifest
 * references, then its part object, which tells rank 0 that the share is there; rank 0 puts its
 * own share, waits for the part objects of the ranks that share (the remote only: our thread may
 * not use the caller's communicator), then pushes whatever is still missing (the packs of ranges
 * no sharing rank owns, those of a rank that made no progress for the wait), the parts, and the
 * global manifest last. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "dist/dist.h"
#include "format/format.h"
#include "tier/tier.h"

/* Test builds: CKPT_TEST_SHARE_STALL=R makes rank R's share never reach the remote (its job
 * waits until canceled), as when the rank died after the commit, before its upload;
 * CKPT_TEST_SHARE_STALL=R:MS delays it by MS milliseconds (a slow rank). Returns the delay
 * (-1: for ever). */
#ifdef CKPT_TEST_HOOKS
static long share_stall(unsigned rank)
{
	const char *e = getenv("CKPT_TEST_SHARE_STALL");
	char *end;
	if (!e || !*e || strtoul(e, &end, 10) != rank)
		return 0;
	return *end == ':' ? atol(end + 1) : -1;
}
#else
static inline long share_stall(unsigned rank) { (void)rank; return 0; }
#endif

/* Naps up to ms milliseconds, in slices, returning early when *cancel turns true. */
static void nap(unsigned ms, const bool *cancel)
{
	for (unsigned left = ms; left && !(cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE));) {
		unsigned n = MIN(left, 20u);
		struct timespec ts = {0, (long)n * 1000000};
		nanosleep(&ts, NULL);
		left -= n;
	}
}

/* The packs of m that rank owns (its id range, store.h), into *ids. Returns the count or error. */
static long share_ids(const struct manifest *m, unsigned rank, uint32_t **ids)
{
	long n = tier_packs_of(m, ids);
	size_t k = 0;
	for (long i = 0; i < n; i++)
		if ((*ids)[i] >> STORE_PACK_RANGE_BITS == rank + 1)
			(*ids)[k++] = (*ids)[i];
	return n < 0 ? n : (long)k;
}

/* Rank's share of m: its packs the remote lacks, then (they are all there) its part. */
static int put_share(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m,
		     unsigned rank, ckpt_remote_stats *st, const bool *cancel)
{
	uint32_t *ids = NULL;
	long n = share_ids(m, rank, &ids);
	int rc = n < 0 ? (int)n : 0;
	long stall = share_stall(rank);
	while (!rc && stall < 0 && !(rc = cancel && *cancel ? -CKPT_E_CANCELED : 0))
		nap(50, cancel);
	if (stall > 0)
		nap((unsigned)stall, cancel);
	if (!rc)
		rc = tier_push_packs(s, t, ids, (size_t)n, st, NULL, NULL, cancel);
	if (!rc)
		rc = tier_check_present(t, ids, (size_t)n);
	if (!rc)
		rc = tier_put_part(s, t, m->step, rank);
	free(ids);
	return rc;
}

/* One sharing rank, as rank 0 waits for it. */
struct share_wait {
	unsigned rank;
	struct dist_part_sum sum; /* its part, as the global manifest records it */
	uint32_t *ids;            /* its packs */
	size_t n, seen;           /* seen: how many of them are on the remote already */
	bool done;
};

/* Whether w's part object is on the remote with the bytes the global manifest records (its
 * size and trailer checksum): 1, 0, or -CKPT_E_*. */
static int part_there(const struct tier_ref *t, uint64_t step, const struct share_wait *w)
{
	char key[256];
	uint64_t size;
	uint8_t tail[16];
	tier_key_part(t, step, w->rank, key, sizeof key);
	int rc = t->r->ops->stat(t->r, key, &size, NULL);
	if (rc == -CKPT_E_NOTFOUND || (!rc && size != w->sum.size))
		return 0;
	if (!rc && size >= sizeof tail)
		rc = t->r->ops->get(t->r, key, size - sizeof tail, sizeof tail, tail);
	return rc ? rc : !memcmp(tail, w->sum.digest, sizeof tail);
}

/* Looks once at every rank still awaited: its part there (done), or more of its packs (progress:
 * *moved set). Returns the ranks still awaited, or -CKPT_E_*. */
static long look(const struct tier_ref *t, uint64_t step, struct share_wait *v, size_t nv,
		 bool *moved)
{
	long left = 0;
	for (size_t i = 0; i < nv; i++) {
		struct share_wait *w = &v[i];
		int rc = w->done ? 1 : part_there(t, step, w);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			*moved |= !w->done;
			w->done = true;
			continue;
		}
		left++;
		char key[256];
		uint64_t size;
		while (w->seen < w->n) {
			tier_key_pack(t, w->ids[w->seen], key, sizeof key);
			if ((rc = t->r->ops->stat(t->r, key, &size, NULL)) == -CKPT_E_NOTFOUND)
				break;
			if (rc)
				return rc;
			w->seen++;
			*moved = true;
		}
	}
	return left;
}

/* The ranks of m that share (sharing[r], r < world, r > 0), with their parts' sums and packs. */
static int wait_list(const struct manifest *m, unsigned world, const bool *sharing,
		     unsigned nshare, struct share_wait **out, size_t *nout)
{
	struct share_wait *v = calloc(world + 1, sizeof *v);
	size_t nv = 0;
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (unsigned r = 1; r < world && r < nshare && sharing; r++) {
		if (!sharing[r])
			continue;
		char key[64];
		snprintf(key, sizeof key, DIST_PART "%u", r);
		struct share_wait *w = &v[nv];
		for (uint32_t i = 0; i < m->n_meta; i++)
			if (!strcmp(m->meta[i].key, key) && !dist_parse_sum(m->meta[i].value, &w->sum))
				w->rank = r;
		long n = w->rank ? share_ids(m, r, &w->ids) : 0;
		if (n < 0) {
			*out = v, *nout = nv;
			return (int)n;
		}
		w->n = (size_t)n;
		nv += w->rank == r; /* a part record that does not parse: rank 0 sends that share */
	}
	*out = v;
	*nout = nv;
	return 0;
}

/* Rank 0: waits until every sharing rank's part is on the remote, or until none made progress
 * for wait_ms (a rank that died after the commit: the push that follows sends its share). */
static int wait_shares(const struct tier_ref *t, const struct manifest *m, const bool *sharing,
		       unsigned nshare, int64_t wait_ms, const bool *cancel)
{
	struct share_wait *v = NULL;
	size_t nv = 0;
	int rc = wait_list(m, tier_world(m), sharing, nshare, &v, &nv);
	double deadline = ckpt_now() + (double)wait_ms / 1e3;
	for (unsigned ms = 5; !rc;) {
		bool moved = false;
		long left = look(t, m->step, v, nv, &moved);
		if (left <= 0) {
			rc = (int)left;
			break;
		}
		if (moved) {
			deadline = ckpt_now() + (double)wait_ms / 1e3;
			ms = 5;
		}
		if (ckpt_now() >= deadline)
			break;
		if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
			rc = ckpt_fail(CKPT_E_CANCELED, "canceled");
		nap(ms, cancel);
		ms = MIN(ms * 2, 1000u);
	}
	for (size_t i = 0; i < nv; i++)
		free(v[i].ids);
	free(v);
	return rc;
}

static void add_stats(ckpt_remote_stats *to, const ckpt_remote_stats *from)
{
	to->packs_sent += from->packs_sent;
	to->bytes_sent += from->bytes_sent;
	to->packs_present += from->packs_present;
	to->bytes_present += from->bytes_present;
}

int tier_push_dist(struct ckpt_store *s, const struct tier_ref *t, uint64_t step, unsigned rank,
		   const bool *sharing, unsigned nshare, int64_t wait_ms, ckpt_remote_stats *st,
		   const bool *cancel)
{
	*st = (ckpt_remote_stats){0};
	struct manifest m;
	int rc = store_load_manifest(s, step, &m);
	if (rc)
		return rc;
	unsigned world = tier_world(&m);
	char mark[256] = "";
	if (!world) { /* not a multi-rank checkpoint: one push of everything */
		manifest_free(&m);
		return tier_push(s, t, step, st, NULL, NULL, cancel);
	}
	if (rank && rank >= world) { /* a resumed step of a smaller job: nothing of ours */
		manifest_free(&m);
		return 0;
	}
	/* The header is rank 0's to put (before the manifest): no object is put by two ranks. */
	if (!(rc = rank ? 0 : tier_ensure_hdr(s, t)) && !(rc = tier_mark_upload(t, mark, sizeof mark)))
		rc = put_share(s, t, &m, rank, st, cancel);
	if (!rc && rank == 0)
		rc = wait_shares(t, &m, sharing, nshare, wait_ms, cancel);
	if (!rc && rank == 0) {
		ckpt_remote_stats rest;
		rc = tier_push(s, t, step, &rest, NULL, NULL, cancel);
		add_stats(st, &rest);
	}
	tier_unmark_keep_error(t, mark, rc);
	if (rc && rank)
		ckpt_fail_prefix("upload of rank %u's share of checkpoint %" PRIu64 " to %s", rank,
				 step, t->r->url);
	manifest_free(&m);
	return rc;
}
