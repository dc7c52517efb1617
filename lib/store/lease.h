/* Reader leases (lease.c): which packs open readers may still read, for gc and prune. */
#ifndef CKPT_LEASE_H
#define CKPT_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "format/format.h"
#include "store/store.h"

struct lease;

/* Announces a reader: creates and share-locks STORE/leases/<random>.lease in the "pending" state
 * (gc then defers every pack removal). Call before loading the manifest. Sets *out (NULL where
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
};

/* Reads every lease of the store; removes those whose reader is gone (their lock is free).
 * Call after the manifests no longer name what is about to be removed. Returns 0 or
 * -CKPT_E_*. */
int lease_scan(struct ckpt_store *s, struct lease_set *ls);

/* Whether a live reader may still read pack_id. */
bool lease_needs(const struct lease_set *ls, uint32_t pack_id);

void lease_set_free(struct lease_set *ls);

#endif
