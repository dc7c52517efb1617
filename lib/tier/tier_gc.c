/* Prune and gc of a store's objects on its remote (tier.h), and the upload markers that keep a
 * gc off the packs of a push in flight. Only keys under this store's id are listed, read or
 * deleted, so stores sharing a remote never touch each other's objects. The rules, as the local
 * gc's: manifests go first (then their part files); a pack goes only when no manifest on the
 * remote references it, no manifest is damaged (their references are unknown) unless forced, and
 * no upload is in flight (a live marker: its packs land before its manifest). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "format/format.h"
#include "gc/gc.h"
#include "tier/tier.h"

int tier_mark_upload(const struct tier_ref *t, char *key, size_t len)
{
	unsigned long long rnd = 0;
	if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
		rnd = (unsigned long long)ckpt_wall_ns() * 0x9e3779b97f4a7c15ull;
	snprintf(key, len, TIER_ROOT "/%s/uploads/%016llx.upload", t->id, rnd);
	char host[96], rec[256];
	store_host(host, sizeof host);
	int n = snprintf(rec, sizeof rec, "pid %d\nhost %s\nsince %lld\n", (int)getpid(), host,
			 (long long)time(NULL));
	struct rmt_src src = {.buf = rec, .len = (uint64_t)n};
	return t->r->ops->put(t->r, key, &src, 0, NULL, NULL);
}

void tier_unmark_upload(const struct tier_ref *t, const char *key)
{
	rmt_del_cleanup(t->r, key); /* bounded; a marker left behind ages out */
}

/* The keys under this store's id, by kind. */
struct keys {
	const struct tier_ref *t;
	int64_t now, grace;
	uint32_t *packs;      /* pack ids present */
	uint64_t *sizes;
	size_t npacks, cap;
	uint64_t *part_steps; /* steps of part objects (repeated per rank) */
	int64_t *part_mtimes;
	char (*parts)[128];
	size_t nparts, capparts;
	size_t live_uploads;  /* markers younger than the grace age */
	char stale[16][128];  /* dead markers, to remove */
	size_t nstale;
	int err;
};

/* Sorts one listed key of this store into k. */
static int on_key(void *arg, const struct rmt_obj *o)
{
	struct keys *k = arg;
	const char *rel = o->key + strlen(TIER_ROOT "/") + TIER_ID_LEN + 1;
	unsigned id;
	unsigned long long step;
	unsigned rank;
	char tail[8];
	if (sscanf(rel, "packs/%8u.pac%1[k]", &id, tail) == 2 && strlen(rel) == 19) {
		if (ckpt_grow((void **)&k->packs, &k->cap, k->npacks + 1, sizeof *k->packs) ||
		    !(k->sizes = realloc(k->sizes, k->cap * sizeof *k->sizes)))
			return k->err = -CKPT_E_NOMEM;
		k->sizes[k->npacks] = o->size;
		k->packs[k->npacks++] = id;
	} else if (sscanf(rel, "parts/%20llu/%u.par%1[t]", &step, &rank, tail) == 3) {
		if (ckpt_grow((void **)&k->parts, &k->capparts, k->nparts + 1, sizeof *k->parts) ||
		    !(k->part_steps = realloc(k->part_steps, k->capparts * sizeof *k->part_steps)) ||
		    !(k->part_mtimes = realloc(k->part_mtimes, k->capparts * sizeof *k->part_mtimes)))
			return k->err = -CKPT_E_NOMEM;
		k->part_mtimes[k->nparts] = o->mtime;
		k->part_steps[k->nparts] = step;
		snprintf(k->parts[k->nparts++], sizeof k->parts[0], "%s", o->key);
	} else if (!strncmp(rel, "gc/", 3)) { /* a killed gc's marker: removed as upload markers are */
		if (o->mtime && k->now - o->mtime >= k->grace && k->nstale < ARRAY_SIZE(k->stale))
			snprintf(k->stale[k->nstale++], sizeof k->stale[0], "%s", o->key);
	} else if (!strncmp(rel, "uploads/", 8)) {
		if (o->mtime && k->now - o->mtime >= k->grace) {
			if (k->nstale < ARRAY_SIZE(k->stale))
				snprintf(k->stale[k->nstale++], sizeof k->stale[0], "%s", o->key);
		} else {
			k->live_uploads++;
		}
	}
	return 0;
}

/* Marks in live[] the packs (by index into k->packs, sorted) that some valid manifest references;
 * counts the damaged manifests. */
static int mark_live(const struct tier_ref *t, const uint8_t uuid[16], const uint64_t *steps,
		     long n, const struct keys *k, bool *live, long *damaged, struct tier_gc_mark *g)
{
	*damaged = 0;
	for (long i = 0; i < n; i++) {
		int rr = g && tier_gc_due(g) ? tier_gc_refresh(t, g) : 0; /* a long look: it lives */
		if (rr)
			return rr;
		struct manifest m;
		uint8_t *raw;
		uint64_t len;
		int rc = tier_fetch_manifest(t, uuid, steps[i], &m, &raw, &len);
		if (rc == -CKPT_E_NOMEM || rc == -CKPT_E_IO)
			return rc;
		if (rc) {
			(*damaged)++;
			continue;
		}
		free(raw);
		for (uint32_t c = 0; c < m.n_chunks; c++)
			for (size_t p = 0; p < k->npacks; p++)
				if (k->packs[p] == m.chunks[c].pack_id)
					live[p] = true;
		manifest_free(&m);
	}
	return 0;
}

static bool has_step(const uint64_t *v, long n, uint64_t x)
{
	for (long i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

/* The multi-rank uploads in flight: steps without a manifest with a part younger than the grace
 * age (a rank's share is there, rank 0 has yet to finish: docs/format.md). Each such step counts
 * as a live upload (the first 64 told apart; more count as one each). */
static size_t shares_in_flight(const struct keys *k, const uint64_t *steps, long n)
{
	uint64_t seen[64];
	size_t live = 0, nseen = 0;
	for (size_t i = 0; i < k->nparts; i++) {
		uint64_t st = k->part_steps[i];
		bool young = !k->part_mtimes[i] || k->now - k->part_mtimes[i] < k->grace;
		if (!young || has_step(steps, n, st) || has_step((const uint64_t *)seen, (long)nseen, st))
			continue;
		if (nseen < ARRAY_SIZE(seen))
			seen[nseen++] = st;
		live++;
	}
	return live;
}

/* The upload markers live now, counted into k (the uploads of before are counted already). */
static int look_again(const struct tier_ref *t, struct keys *k)
{
	struct keys again = {.t = t, .now = (int64_t)time(NULL), .grace = k->grace};
	char up[160];
	snprintf(up, sizeof up, TIER_ROOT "/%s/uploads/", t->id);
	int rc = t->r->ops->list(t->r, up, on_key, &again);
	k->live_uploads += again.live_uploads;
	return rc;
}

/* The marker's refresh when due, and with it a look for uploads begun since: a push that put
 * its marker after the last look may have found a pack present that is next to go, and waits
 * for this gc (tier_fence.c) only while the marker changes. */
static int keep_fence(const struct tier_ref *t, struct tier_gc_mark *g, struct keys *k)
{
	if (!g || !tier_gc_due(g))
		return 0;
	int rc = tier_gc_refresh(t, g);
	if (!rc && g->lapsed) /* stalled past half the stale age: a push may have taken this gc
			       * for dead and trusted a pack it would delete */
		k->live_uploads++;
	return rc ? rc : look_again(t, k);
}

/* Deletes what is garbage in k: packs not live (unless an upload is in flight), parts of steps
 * without a manifest, dead upload markers. g: this gc's marker (NULL for a dry run). */
static int collect(const struct tier_ref *t, struct keys *k, const bool *live, const uint64_t *steps,
		   long n, struct tier_gc_mark *g, rgc_report *rep)
{
	bool dry = !g;
	int rc = 0;
	for (size_t p = 0; !rc && p < k->npacks; p++) {
		if (live[p])
			continue;
		if (!k->live_uploads)
			rc = keep_fence(t, g, k);
		if (!rc && k->live_uploads) {
			rep->packs_spared++;
			continue;
		}
		char key[256];
		tier_key_pack(t, k->packs[p], key, sizeof key);
#ifdef CKPT_TEST_HOOKS
		if (!rc && !dry && tier_test_hook)
			tier_test_hook("gc-pack-delete");
#endif
		rc = rc ? rc : dry ? 0 : t->r->ops->del(t->r, key);
		rep->packs_removed += !rc;
		rep->bytes_freed += rc ? 0 : k->sizes[p];
	}
	if (!rc && !k->live_uploads)
		rc = keep_fence(t, g, k);
	for (size_t i = 0; !rc && i < k->nparts; i++)
		if (!has_step(steps, n, k->part_steps[i]) && !k->live_uploads) {
			rc = dry ? 0 : t->r->ops->del(t->r, k->parts[i]);
			rep->parts_removed += !rc;
		}
	for (size_t i = 0; !rc && !dry && i < k->nstale; i++)
		rc = t->r->ops->del(t->r, k->stale[i]);
	rep->uploads_in_flight = k->live_uploads;
	return rc;
}

int tier_gc(const struct tier_ref *t, const uint8_t uuid[16], int64_t grace_s, int flags,
	    rgc_report *rep)
{
	memset(rep, 0, sizeof *rep);
	char prefix[128];
	snprintf(prefix, sizeof prefix, TIER_ROOT "/%s/", t->id);
	struct keys k = {.t = t, .now = (int64_t)time(NULL), .grace = grace_s};
	struct tier_gc_mark g, *gp = flags & CKPT_GC_DRY_RUN ? NULL : &g;
	int rc = gp ? tier_gc_mark(t, gp) : 0; /* first: a push that misses it is seen below */
	if (!rc)
		rc = t->r->ops->list(t->r, prefix, on_key, &k);
	uint64_t *steps = NULL;
	long n = rc ? 0 : tier_remote_steps(t, &steps);
	bool *live = calloc(k.npacks + 1, sizeof *live);
	long damaged = 0;
	if (!rc && n < 0)
		rc = (int)n;
	if (!rc && !live)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (!rc)
		rc = mark_live(t, uuid, steps, n, &k, live, &damaged, gp);
	if (!rc && damaged && !(flags & CKPT_GC_FORCE))
		rc = ckpt_fail(CKPT_E_CORRUPT, "remote %s: %ld damaged manifest%s of store %s: their "
			       "packs are unknown, nothing removed (force to proceed)", t->r->url,
			       damaged, damaged == 1 ? "" : "s", t->id);
	if (!rc) { /* an upload that began meanwhile: its marker is there now */
		k.live_uploads = shares_in_flight(&k, steps, n);
		rc = look_again(t, &k);
	}
	if (!rc)
		rc = collect(t, &k, live, steps, n, gp, rep);
	if (!rc && gp && t->r->ops->sweep) /* killed puts' leftovers, older than any put lasts */
		rc = t->r->ops->sweep(t->r, prefix, grace_s, &rep->leftovers_removed,
				      &rep->leftover_bytes);
	if (gp) {
		char msg[1024];
		snprintf(msg, sizeof msg, "%s", ckpt_errmsg());
		tier_gc_unmark(t, gp);
		if (rc)
			ckpt_fail(-rc, "%s", msg);
	}
	if (rc == -CKPT_E_NOMEM && !k.err)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	free(live);
	free(steps);
	free(k.packs);
	free(k.sizes);
	free(k.parts);
	free(k.part_steps);
	free(k.part_mtimes);
	return rc;
}

/* The remote's checkpoints of the store, each manifest fetched (err[k]: why it does not decode). */
struct remote_set {
	uint64_t *steps;
	struct manifest *m;
	int *err;
	long n;
};

static void remote_set_free(struct remote_set *rs)
{
	for (long i = 0; i < rs->n && rs->m && rs->err; i++)
		if (!rs->err[i])
			manifest_free(&rs->m[i]);
	free(rs->steps);
	free(rs->m);
	free(rs->err);
}

static int remote_set_load(const struct tier_ref *t, const uint8_t uuid[16], struct remote_set *rs)
{
	*rs = (struct remote_set){0};
	long n = tier_remote_steps(t, &rs->steps);
	if (n < 0)
		return (int)n;
	rs->m = calloc((size_t)n + 1, sizeof *rs->m);
	rs->err = calloc((size_t)n + 1, sizeof *rs->err);
	if (!rs->m || !rs->err)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (; rs->n < n; rs->n++) {
		uint8_t *raw;
		uint64_t len;
		int rc = tier_fetch_manifest(t, uuid, rs->steps[rs->n], &rs->m[rs->n], &raw, &len);
		if (rc == -CKPT_E_NOMEM || rc == -CKPT_E_IO)
			return rc;
		rs->err[rs->n] = rc; /* damaged: kept (what it references is unknown) */
		if (!rc)
			free(raw);
	}
	return 0;
}

/* A damaged remote manifest: what it references is unknown, so, as a local prune, nothing is
 * removed (not even the checkpoints the policy drops: the gc after them would refuse, leaving a
 * prune half done) unless forced. The message names the first damaged keys and why. */
static int remote_set_refuse(const struct tier_ref *t, const struct remote_set *rs, int flags)
{
	long bad = 0, shown = 0;
	char list[1024] = "";
	for (long i = 0; i < rs->n; i++) {
		if (!rs->err[i])
			continue;
		if (bad++ >= 3)
			continue;
		char key[256], one[320];
		tier_key_mf(t, rs->steps[i], key, sizeof key);
		snprintf(one, sizeof one, "%s%s (%s)", shown++ ? ", " : "", key,
			 ckpt_strerror(rs->err[i]));
		strncat(list, one, sizeof list - strlen(list) - 1);
	}
	if (!bad || (flags & CKPT_GC_FORCE))
		return 0;
	return ckpt_fail(CKPT_E_CORRUPT, "remote %s: store %s has %ld damaged manifest%s: %s%s; "
			 "their packs are unknown, so nothing is removed (use force to proceed anyway)",
			 t->r->url, t->id, bad, bad == 1 ? "" : "s", list, bad > shown ? ", ..." : "");
}

int tier_prune(const struct tier_ref *t, const uint8_t uuid[16], const retain_rules *r,
	       int flags, rgc_report *rep, uint64_t **removed)
{
	memset(rep, 0, sizeof *rep);
	*removed = NULL;
	struct remote_set rs;
	int rc = remote_set_load(t, uuid, &rs);
	if (!rc)
		rc = remote_set_refuse(t, &rs, flags);
	bool *drop = rc ? NULL : calloc((size_t)rs.n + 1, sizeof *drop);
	uint64_t *out = rc ? NULL : calloc((size_t)rs.n + 1, sizeof *out);
	if (!rc && (!drop || !out))
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (!rc)
		rc = gc_retention_choose(rs.steps, rs.m, rs.err, (size_t)rs.n, r, drop);
	for (long i = 0; !rc && i < rs.n; i++) {
		if (!drop[i])
			continue;
		char key[256];
		tier_key_mf(t, rs.steps[i], key, sizeof key);
		/* The manifest first: the part files and packs are garbage once it is gone. */
		rc = flags & CKPT_GC_DRY_RUN ? 0 : t->r->ops->del(t->r, key);
		if (!rc)
			out[rep->manifests_removed++] = rs.steps[i];
	}
	remote_set_free(&rs);
	free(drop);
	if (rc)
		free(out);
	else
		*removed = out;
	return rc;
}
