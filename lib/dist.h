/* Multi-rank checkpoints (dist.c: the save, dist_merge.c: rank 0's global manifest,
 * dist_read.c: restoring boxes). Internal to lib/. */
#ifndef CKPT_DIST_H
#define CKPT_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Reserved metadata keys. In a part: DIST_KEY NAME = "S ndim gshape... offsets..." for a shard,
 * "R ndim shape... byte_offset" for a replica's piece. In a global manifest: DIST_WORLD,
 * DIST_PART N = "size digest-hex" and DIST_SHARDS NAME = "dtype ndim gshape... nshards
 * (tensor-index offsets...)..." (docs/format.md, "Format version 2"). */
#define DIST_KEY "ckpt.dist."
#define DIST_WORLD "ckpt.dist.world"
#define DIST_PART "ckpt.dist.part."
#define DIST_SHARDS "ckpt.dist.shards."
#define DIST_VAL_MAX 1024

struct dist_part_sum {
	uint64_t size;
	uint8_t digest[16]; /* the part file's trailer */
};

/* Rank 0: reads the n parts of step, checks them against sums, merges them and commits the
 * global manifest. kill is the crash-test hook (called with rank at each point). */
int dist_write_global(struct ckpt_store *s, uint64_t step, unsigned n,
		      const struct dist_part_sum *sums, int rank, void (*kill)(int rank));

/* gc and du: the parts of steps that have no manifest file (saves that never committed, or
 * pruned checkpoints): their bytes, counting the files in *count; removed when remove. Call with
 * the store's lock held exclusively. */
uint64_t dist_part_leftovers(struct ckpt_store *s, bool remove, uint64_t *count);

#endif
