/* In-flight markers (marker.c): which saves are running, for gc and prune, seen through the
 * shared file system whatever its locks do. */
#ifndef CKPT_MARKER_H
#define CKPT_MARKER_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

/* Default of CKPT_OPT_GC_GRACE_S, and how often a live save refreshes its marker. */
#define MARKER_GRACE_DEFAULT_S (6 * 3600)
#define MARKER_REFRESH_S 60

/* Creates s's marker STORE/writers/<random>.writer (its writer record, share-locked, refreshed
 * every MARKER_REFRESH_S by a thread) unless s has one, which is refreshed instead. Call under
 * the writer lock, before the save reads the manifests. Returns 0 or -CKPT_E_*. */
int marker_begin(struct ckpt_store *s, const char *what);

/* Removes s's marker (none: nothing). */
void marker_end(struct ckpt_store *s);

/* The live markers gc saw. */
struct marker_set {
	unsigned live, dead;
	char who[256]; /* the first live one: "host H pid P (W since T)" */
};

/* Reads every marker of the store. A marker of this node (its record names our boot id) is live
 * while its flock is held; any other (another node's, or no complete record yet) while it was
 * refreshed less than grace_s seconds ago. When remove, dead ones are removed. Returns 0 or
 * -CKPT_E_IO (the directory cannot be read: gc then removes nothing). */
int marker_scan(struct ckpt_store *s, int64_t grace_s, bool remove, struct marker_set *ms);

#endif
