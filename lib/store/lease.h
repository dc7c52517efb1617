/* Reader leases (lease.c): which packs open readers may still read, for gc and prune. */
#ifndef CKPT_LEASE_H
#define CKPT_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "format/format.h"
#include "store/store.h"

struct lease;

/* Announces a reader: creates and share-locks STORE/leases/<random>.lease in the "pending" state
 * (gc then defers every pack removal), with the reader's record (pid, host, node), refreshed
 * every MARKER_REFRESH_S by the process's refresh thread. Call before loading the manifest. Sets *out (NULL where
 * the store cannot be written: read-only file system, no permission). Returns 0 or -CKPT_E_*. */
int lease_take(struct ckpt_store *s, struct lease **out);

/* Records the packs the reader's manifest references. Returns 0 or -CKPT_E_*. */
int lease_publish(struct lease *l, const struct manifest *m);

/* Ends the lease (removes the file, releases the lock). NULL is accepted. */
void lease_drop(struct lease *l);

/* What the live leases need. */
struct lease_set {
	bool all;          /* a lease is pending or unreadable: every pack may be needed */
	uint32_t *ids;     /* pack ids named by live leases (duplicates possible) */
	size_t n;
	unsigned live, stale;
	char who[256];     /* the first live reader: "process P on host H (reader of step S since T)" */
};

/* Reads every lease of the store; removes those whose reader is gone: a lease of this node (its
 * record names our boot id) or without a record, whose lock is free; one of another node, older
 * than the handle's grace age (CKPT_OPT_GC_GRACE_S; its reader refreshes it every
 * MARKER_REFRESH_S). Call after the manifests no longer name what is about to be removed.
 * Returns 0 or -CKPT_E_*. */
int lease_scan(struct ckpt_store *s, struct lease_set *ls);

/* Whether a live reader may still read pack_id. */
bool lease_needs(const struct lease_set *ls, uint32_t pack_id);

void lease_set_free(struct lease_set *ls);

#endif
