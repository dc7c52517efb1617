/* Internal to lib/gc: what its files share. Layers, each using only those above it:
 *   gc_scan.c    the store as gc sees it: manifests (mfset), this store's packs (pk), the chunk
 *                locations the manifests reference (loc), leftovers, the crash points
 *   gc_du.c      space accounting (ckpt_store_du)
 *   gc_compact.c pack compaction
 *   gc.c         the maintenance lock, dead pack removal, collection, retain_gc*
 *   gc_prune.c   removal of chosen manifests, then collection; retention (retain_prune*)
 *   gc_delete.c  removal of listed steps (retain_delete)
 *
 * Safety rests on one order: a pack is removed only when no manifest on disk references it, and
 * a manifest is only ever replaced atomically. prune removes manifests (durably) before packs;
 * compaction writes the new pack (durably) before rewriting manifests, and removes the old pack
 * last. A kill at any point leaves garbage at worst, never a dangling reference.
 *
 * A save in flight is the other exception to "no manifest references it": its new packs, the
 * packs it deduplicates against, its temporary files and parts. The writer lock keeps gc out
 * where flock is coherent; where it is node-local, the save's in-flight marker does: gc reads
 * the markers right before each removal (packs, leftovers, compaction's old packs) and removes
 * none of them while a live one exists (gc_save_in_flight). */
#ifndef CKPT_GC_INT_H
#define CKPT_GC_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/ckpt_int.h"
#include "store/store.h"

struct lease_set;

/* Crash testing, in test builds only (CKPT_TEST_HOOKS: the tests' archive and the tests' ckptctl,
 * never the release library): CKPT_GC_KILL_AT=N kills the process at the Nth point where the
 * store's state on disk changes (tests/unit/t-gc and tests/cli/t-ckptctl-crash kill at every point
 * in turn and check the store). One counter for all of lib/gc (in gc_scan.c), so the points keep
 * their numbers whichever file they sit in; every file that calls it is in the Makefile's
 * HOOK_SRC. */
#ifdef CKPT_TEST_HOOKS
void gc_kill_point(void);
#else
static inline void gc_kill_point(void) {}
#endif

/* Every manifest file of the store, decoded where possible. */
struct mfset {
	size_t n;
	uint64_t *steps;
	struct manifest *m;
	int *err;          /* 0, or why the manifest is invalid */
	uint64_t *size;    /* file size */
	size_t ninvalid;
};

struct pk {
	uint32_t id;
	unsigned dir;
	uint64_t size;
	uint64_t live;     /* record bytes referenced by valid manifests */
};

/* A chunk location referenced by a valid manifest. */
struct loc {
	uint32_t pack;
	uint64_t offset;
	uint64_t span;
	size_t mf;         /* index of the manifest in the mfset */
};

/* gc_scan.c */

/* Loads every manifest of s into ms (the invalid ones counted, with their error). Returns 0 or
 * -CKPT_E_* (nothing to free then). */
int gc_mfset_load(struct ckpt_store *s, struct mfset *ms);
void gc_mfset_free(struct mfset *ms);

/* This store's packs, sorted by id, in *out (free it). Everything else in the pack directories is
 * left alone (and counted in rep when given). Returns 0 or -CKPT_E_*. */
int gc_list_packs(struct ckpt_store *s, struct pk **out, size_t *nout, gc_report *rep);

/* Fails, naming it, when a pack directory cannot be listed (a data directory not mounted). */
int gc_pack_dirs_present(struct ckpt_store *s);

/* The pack of id in v (sorted by id), or NULL. */
struct pk *gc_find_pk(struct pk *v, size_t n, uint32_t id);

/* All locations referenced by the valid manifests (skip: manifests treated as removed), sorted by
 * pack, offset, manifest, in *out (free it). Returns 0 or -CKPT_E_NOMEM. */
int gc_collect_locs(const struct mfset *ms, const bool *skip, struct loc **out, size_t *nout);

/* Adds the live bytes of each pack (each location counted once). */
void gc_mark_live(struct pk *pv, size_t np, const struct loc *l, size_t nl);

/* Bytes of the temporary files of interrupted writers and of the parts of multi-rank checkpoints
 * that do not exist or are among gone; removes them when remove. Counts them in *count (the parts
 * also in *parts when given). */
uint64_t gc_leftovers(struct ckpt_store *s, bool remove, const uint64_t *gone, size_t ngone,
		      uint64_t *count, uint64_t *parts);

/* gc_compact.c */

/* Compaction under policy g after the dead packs are gone (pv, lv as gc_collect() made them);
 * dry: only counts in rep what it would do. Returns 0 or -CKPT_E_*. */
int gc_compact(struct ckpt_store *s, struct mfset *ms, const bool *skip, struct pk *pv, size_t np,
	       const struct loc *lv, size_t nl, const gc_rules *g, bool dry,
	       gc_report *rep);

/* gc.c */

/* Takes the lock for a maintenance operation (saves of this very handle refused too). Returns 0
 * or -CKPT_E_*. */
int gc_maint_lock(struct ckpt_store *s);
void gc_maint_unlock(struct ckpt_store *s);

/* Fails (CKPT_E_CORRUPT, naming the first few) when ms has damaged manifests, unless
 * CKPT_GC_FORCE is in flags. */
int gc_refuse_invalid(struct ckpt_store *s, const struct mfset *ms, int flags);

/* The common tail of prune and gc: dead packs, leftovers, compaction (g NULL: none). skip marks
 * manifests that prune removes (already gone from disk, or not in a dry run). */
int gc_collect(struct ckpt_store *s, struct mfset *ms, const bool *skip, const gc_rules *g,
	       bool dry, gc_report *rep);

gc_report *gc_new_report(void);

/* gc_scan.c: counts a pack deferred for an open reader of ls in rep, naming the first reader. */
void gc_defer(gc_report *rep, const struct lease_set *ls);

/* Whether a save is in flight: a live in-flight marker (store/marker.h) under the handle's
 * grace age; dead markers are removed unless dry. The first live one is named in
 * rep->in_flight. Sets *rc when the markers cannot be read, and answers true then too (nothing
 * is removed while saves are unknown). */
bool gc_save_in_flight(struct ckpt_store *s, bool dry, gc_report *rep, int *rc);

/* gc_prune.c */

/* Sets drop[k] for each manifest of ms to remove; returns 0, or an error (nothing is removed). */
typedef int (*gc_choose_fn)(struct ckpt_store *s, const struct mfset *ms, const void *ctx,
			    int flags, bool *drop);

/* Removes the manifests choose picks (durably, first), then collects under g. Damaged manifests
 * refuse everything unless CKPT_GC_FORCE. */
int gc_prune_run(struct ckpt_store *s, gc_choose_fn choose, const void *ctx,
		 const gc_rules *g, int flags, gc_report **report);

#endif
