/* Garbage collection (retain_gc, retain_gc_with) and what prune and delete share with it:
 * the maintenance lock, the refusal on damaged manifests, and the collection itself (packs no
 * manifest references, leftovers, then compaction through gc_compact.c). The order that keeps a
 * kill safe is in gc_int.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "gc/gc_int.h"
#include "store/lease.h"
#include "store/store.h"

void gc_report_free(gc_report *r)
{
	if (!r)
		return;
	free(r->steps_removed);
	free(r->left_alone);
	free(r->in_flight);
	free(r->reader);
	free(r);
}

/* Takes the lock for a maintenance operation. Saves of this very handle would share the lock, so
 * they are refused too. */
int gc_maint_lock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->lock.mu);
	int rc = 0;
	if (s->lock.users)
		rc = ckpt_fail(CKPT_E_BUSY, "store %s is busy: a save is in flight on this handle",
			       s->path);
	else
		rc = store_lock_maint(s, "prune, delete or gc");
	if (!rc)
		s->lock.users++;
	pthread_mutex_unlock(&s->lock.mu);
	return rc;
}

void gc_maint_unlock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->lock.mu);
	/* Manifests and packs changed: the next save rebuilds its dedup index. */
	pthread_mutex_lock(&s->index.mu);
	s->index.valid = false;
	pthread_mutex_unlock(&s->index.mu);
	if (--s->lock.users == 0)
		store_unlock(s);
	pthread_mutex_unlock(&s->lock.mu);
}

int gc_refuse_invalid(struct ckpt_store *s, const struct mfset *ms, int flags)
{
	if (!ms->ninvalid || (flags & CKPT_GC_FORCE))
		return 0;
	char list[512] = "";
	size_t shown = 0;
	for (size_t i = 0; i < ms->n && shown < 3; i++)
		if (ms->err[i]) {
			char one[64];
			snprintf(one, sizeof one, "%s%020llu.ckpt (%s)", shown ? ", " : "",
				 (unsigned long long)ms->steps[i], ckpt_strerror(ms->err[i]));
			strncat(list, one, sizeof list - strlen(list) - 1);
			shown++;
		}
	return ckpt_fail(CKPT_E_CORRUPT,
			 "store %s has %zu damaged manifest(s): %s%s; their chunks are unknown, so no pack "
			 "is removed (use force to proceed anyway)",
			 s->path, ms->ninvalid, list, ms->ninvalid > shown ? ", ..." : "");
}

/* Removes packs without live records; fsyncs the directories touched. */
static int remove_dead_packs(struct ckpt_store *s, struct pk *pv, size_t np, bool dry,
			     gc_report *rep)
{
	bool touched[MAX_DATA_DIRS + 1] = {false};
	/* Open readers may need packs no manifest names any more (prune removed theirs). */
	struct lease_set ls = {0};
	int rc = dry ? 0 : lease_scan(s, &ls);
	if (rc)
		return rc;
	/* A save in flight (on any node) may reference any unreferenced pack when it commits. */
	bool saving = gc_save_in_flight(s, dry, rep, &rc);
	if (rc) {
		lease_set_free(&ls);
		return rc;
	}
	for (size_t i = 0; i < np; i++) {
		if (pv[i].live)
			continue;
		if (saving) {
			rep->packs_spared++;
			continue;
		}
		if (!dry && lease_needs(&ls, pv[i].id)) {
			gc_defer(rep, &ls);
			continue;
		}
		rep->packs_removed++;
		rep->bytes_freed += pv[i].size;
		if (dry)
			continue;
		char p[4096];
		store_pack_path(s, pv[i].dir, pv[i].id, p, sizeof p);
		if (unlink(p) && errno != ENOENT) {
			int e = errno;
			lease_set_free(&ls);
			return ckpt_fail(ckpt_errno_code(e), "remove %s: %s", p, strerror(e));
		}
		gc_kill_point();
		touched[pv[i].dir] = true;
	}
	lease_set_free(&ls);
	for (unsigned d = 0; d < s->layout.ndirs; d++)
		if (touched[d] && (rc = io_fsync_dir(s->layout.pack_dirs[d])))
			return rc;
	return 0;
}

/* Before any pack goes (removed dead, or compacted away): its id must never name another pack,
 * since a remote copy of the store holds packs by id (store/packids.c). One mark per id range,
 * raised to the highest pack present. */
static int retire_pack_ids(struct ckpt_store *s, const struct pk *pv, size_t np)
{
	uint32_t *ids = malloc((np ? np : 1) * sizeof *ids);
	if (!ids)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; i < np; i++)
		ids[i] = pv[i].id;
	int rc = store_packids_raise(s->path, ids, np);
	free(ids);
	return rc;
}

/* The common tail of prune and gc: dead packs, leftovers, compaction (g NULL: none). skip marks
 * manifests that prune removes (already gone from disk, or not in a dry run). */
int gc_collect(struct ckpt_store *s, struct mfset *ms, const bool *skip,
	       const gc_rules *g, bool dry, gc_report *rep)
{
	struct pk *pv = NULL;
	struct loc *lv = NULL;
	size_t np = 0, nl = 0;
	int rc = gc_list_packs(s, &pv, &np, rep);
	if (!rc && !dry)
		rc = retire_pack_ids(s, pv, np);
	if (!rc)
		rc = gc_collect_locs(ms, skip, &lv, &nl);
	if (!rc) {
		gc_mark_live(pv, np, lv, nl);
		rc = remove_dead_packs(s, pv, np, dry, rep);
	}
	/* A save in flight owns its temporary files and parts, and may dedup against any pack:
	 * no leftover goes and nothing is compacted while one is. */
	bool saving = !rc && gc_save_in_flight(s, dry, rep, &rc);
	if (!rc && !saving)
		rep->bytes_freed += gc_leftovers(s, !dry, rep->steps_removed, rep->n_steps_removed,
						 &rep->leftovers_removed, &rep->parts_removed);
	if (!rc && g && !saving)
		rc = gc_compact(s, ms, skip, pv, np, lv, nl, g, dry, rep);
	free(pv);
	free(lv);
	return rc;
}

gc_report *gc_new_report(void)
{
	return calloc(1, sizeof(gc_report));
}

int retain_gc_with(ckpt_store *s, const gc_rules *g, int flags,
				gc_report **report)
{
	gc_rules def = {.max_unused = CKPT_GC_MAX_UNUSED_DEFAULT};
	if (report)
		*report = NULL;
	if (!g)
		g = &def;
	if (!s || !(g->compact_below >= 0 && g->compact_below <= 1) ||
	    !(g->max_unused >= 0 && g->max_unused <= 1))
		return ckpt_fail(CKPT_E_INVAL, "gc: compact_below and max_unused must be 0 to 1");
	int rc = gc_maint_lock(s);
	if (rc)
		return rc;
	gc_report *rep = gc_new_report();
	struct mfset ms;
	if (!rep)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	else if (!(rc = gc_mfset_load(s, &ms))) {
		if (!(rc = gc_refuse_invalid(s, &ms, flags)))
			rc = gc_collect(s, &ms, NULL, g, flags & CKPT_GC_DRY_RUN, rep);
		gc_mfset_free(&ms);
	}
	gc_maint_unlock(s);
	if (rc || !report)
		gc_report_free(rep);
	else
		*report = rep;
	return rc;
}

int retain_gc(ckpt_store *s, double compact_below, int flags, gc_report **report)
{
	if (report)
		*report = NULL;
	if (!s || !(compact_below >= 0 && compact_below <= 1))
		return ckpt_fail(CKPT_E_INVAL, "gc: compaction threshold must be 0 to 1");
	gc_rules g = {.compact_below = compact_below, .max_unused = 1};
	return retain_gc_with(s, &g, flags, report);
}
