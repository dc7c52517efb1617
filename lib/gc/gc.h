/* What gc/ offers the folders above it (lib/tier): the retention rules of retain_prune_gc(),
 * so that a remote prune keeps exactly what a local one would. Internal to lib/. */
#ifndef CKPT_GC_H
#define CKPT_GC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "common/ckpt_int.h"
#include "format/format.h"

/* Checks a retention's arguments (keep_within not negative, every keep_tags entry a valid tag).
 * Returns 0 or -CKPT_E_INVAL naming the problem. */
int gc_retention_check(const retain_rules *r);
/* Chooses, among n checkpoints (steps ascending, m[k] their decoded manifests, err[k] non-zero
 * for one that did not decode: never dropped), those r does not keep: drop[k]. The newest valid
 * checkpoint is always kept. Returns 0 or -CKPT_E_NOMEM. */
int gc_retention_choose(const uint64_t *steps, const struct manifest *m, const int *err, size_t n,
			const retain_rules *r, bool *drop);

#endif
