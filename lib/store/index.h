/* The dedup index: chunk digest -> where the store holds that chunk. Rebuilt from the manifests
 * (it is never the only copy of anything), open addressing on the digest's first 8 bytes; and the
 * store's index object (struct store_index), kept current by index_sync.c. */
#ifndef CKPT_INDEX_H
#define CKPT_INDEX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/format.h"

struct idx_entry {
	struct mf_chunk c;
	uint32_t gen;   /* save generation that last referenced it */
	uint32_t slot;  /* its index in that save's chunk table */
	uint8_t used;
	uint8_t pending; /* written by the save in progress, not yet committed */
};

struct ckpt_index {
	struct idx_entry *tab;
	size_t cap, count;
};

void index_init(struct ckpt_index *ix);
void index_free(struct ckpt_index *ix);
/* Returns the entry for d, or NULL. */
struct idx_entry *index_find(struct ckpt_index *ix, const ckpt_digest *d);
/* Inserts c (or returns the existing entry for its digest). Returns NULL when out of memory. */
struct idx_entry *index_put(struct ckpt_index *ix, const struct mf_chunk *c);
/* Removes every pending entry (a save that failed). */
void index_drop_pending(struct ckpt_index *ix);
/* Marks every pending entry committed. */
void index_commit_pending(struct ckpt_index *ix);

struct ckpt_store;
struct mf_seen;

/* The dedup index of a store handle and the manifest files it was built from (index_sync.c). */
struct store_index {
	pthread_mutex_t mu;        /* the index while saves are processed */
	struct ckpt_index idx;
	struct mf_seen *seen;
	size_t nseen;
	bool valid;
};

void store_index_init(struct store_index *x);
void store_index_fini(struct store_index *x);

/* The dedup index: store_index_lock takes the index lock and returns the index, valid until
 * store_index_unlock. */
struct ckpt_index *store_index_lock(struct ckpt_store *s);
void store_index_unlock(struct ckpt_store *s);

/* Brings the dedup index up to date with the manifests on disk (call under the lock): reads only
 * the manifests added since it was built, or all of them when one it was built from changed
 * (index_sync.c). */
int store_refresh_index(struct ckpt_store *s);

/* After this process committed a manifest under the lock: the index is current, record the
 * directory's files so the next save does not read its own manifest again. */
int store_index_resync(struct ckpt_store *s);

#endif
