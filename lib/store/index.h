/* The dedup index: chunk digest -> where the store holds that chunk. Rebuilt from the manifests
 * (it is never the only copy of anything), open addressing on the digest's first 8 bytes. */
#ifndef CKPT_INDEX_H
#define CKPT_INDEX_H

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

#endif
