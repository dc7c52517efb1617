/* The verify cache: what reader1_verify_cached() learned about each chunk record, so that a
 * record several checkpoints share is read and hashed once per run. */
#ifndef CKPT_VCACHE_H
#define CKPT_VCACHE_H

#include <stdint.h>

#include "ckpt.h"
#include "common/hash.h"

/* The state of the record at (pack, offset) with digest d: 0 unknown, 1 intact, else a negative
 * CKPT_E_* code, with its message in *msg (owned by the cache). */
int vcache_get(const ckpt_verify_cache *c, uint32_t pack, uint64_t offset,
	       const ckpt_digest *d, const char **msg);
/* Records a state (msg copied; NULL for none) and bytes read for it. Returns 0 or -CKPT_E_NOMEM. */
int vcache_put(ckpt_verify_cache *c, uint32_t pack, uint64_t offset, const ckpt_digest *d,
	       int state, const char *msg, uint64_t bytes_read);

#endif
