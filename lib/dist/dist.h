/* Multi-rank checkpoints (dsave.c and its phases dsave_*.c: the save, dist_merge.c: rank 0's
 * global manifest, dist_parts.c: the step claim and gc of parts/, dist_read.c: restoring boxes).
 * Internal to lib/. */
#ifndef CKPT_DIST_H
#define CKPT_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ckpt_int.h"
#include "store/store.h"

/* Reserved metadata keys. In a part: DIST_KEY NAME = "S ndim gshape... offsets..." for a shard,
 * "R ndim shape... byte_offset" for a replica's piece. In a global manifest: DIST_WORLD (1 to
 * DIST_MAX_RANKS, the most ranks a save accepts, and one DIST_PART record per rank),
 * DIST_PART N = "size digest-hex" and DIST_SHARDS NAME = "dtype ndim gshape... nshards
 * (tensor-index offsets...)..." (docs/format.md, "Format version 2"). */
#define DIST_KEY "ckpt.dist."
#define DIST_WORLD MF_DIST_WORLD
#define DIST_PART "ckpt.dist.part."
#define DIST_SHARDS "ckpt.dist.shards."
#define DIST_VAL_MAX 1024

/* Parses the decimal number at *p strictly, for numbers read back from a manifest: digits only (no
 * sign, blank or 0x), at most max, followed by the end of the string or by one blank and more
 * text (the blank is skipped: *p then points at the next field). Returns 0 and moves *p, or -1.
 * A crafted value fails here instead of wrapping (a world of "-1" was 4 billion ranks). */
int dist_parse_u64(const char **p, uint64_t max, uint64_t *out);

struct dist_part_sum {
	uint64_t size;
	uint8_t digest[16]; /* the part file's trailer */
};

/* Parses a DIST_PART value "size hex32" into *out. Returns 0 or -1. */
int dist_parse_sum(const char *v, struct dist_part_sum *out);

/* A part's description of one of its tensors (DIST_KEY NAME). */
struct dist_piece {
	char kind;                   /* 'S' a shard, 'R' a piece of a replicated tensor */
	unsigned piece;              /* S: 0, or k of a "P k" box of a flattened range (tensor NAME#k) */
	unsigned ndim;               /* of the global tensor */
	uint64_t gshape[32];
	uint64_t off[32];            /* S: the box's offsets; R: off[0] is the piece's byte offset */
};

/* Parses v, the description of part tensor t: "S ndim gshape... offsets...", "P k ndim gshape...
 * offsets..." (box k >= 1 of a flattened range: a shard whose tensor is named NAME#k, with k
 * written as printf's %u writes it) or "R ndim gshape... byte_offset", every number strictly (dist_parse_u64) and nothing after the last, and checks it
 * against t: a shard has t's ndim and its box (extent t's shape) lies inside gshape; a replica's
 * piece is 1-dimensional, of t's dtype size, and its bytes lie inside the global tensor's (whose
 * byte size does not overflow). Returns 0 and fills *out, or -1. */
int dist_parse_piece(const char *v, const struct mf_tensor *t, struct dist_piece *out);
/* Boxes of one flattened range: at most 2 * CKPT_MAX_DIMS - 1, numbered from 0. */
#define DIST_RANGE_PIECES (2 * CKPT_MAX_DIMS)
/* The length of name without its suffix "#k" (k >= 1 as %u writes it), or 0 when name does not
 * end so (or would be empty without it). */
size_t dist_piece_suffix(const char *name, unsigned k);

/* Rank 0: reads the n parts of step, checks them against sums, merges them and commits the
 * global manifest. late: nlate strings, key, value, ...: metadata set after a deferred submit,
 * which replaces rank 0's entries of the same keys. kill is the crash-test hook (called with rank at each point). */
int dist_write_global(struct ckpt_store *s, uint64_t step, unsigned n,
		      const struct dist_part_sum *sums, const char *const *late, size_t nlate,
		      int rank, void (*kill)(int rank));

/* Rank 0 at a multi-rank save's begin (dist_parts.c): claims step for this job, holding an
 * exclusive flock on STORE/parts/<step>/CLAIM (fd in *out), then checks that the checkpoint does
 * not exist and removes what an earlier, dead save of the step left in parts/<step>. Returns 0,
 * -CKPT_E_BUSY (another job holds the claim: the message says who), -CKPT_E_EXISTS (committed
 * meanwhile) or an I/O error. */
int dist_claim_step(struct ckpt_store *s, uint64_t step, unsigned world, int *out);

/* Ends the claim (fd from dist_claim_step; -1 is ignored); committed: the checkpoint is visible,
 * so the claim file goes too. */
void dist_claim_release(struct ckpt_store *s, uint64_t step, int fd, bool committed);

/* gc and du: the parts of steps that have no manifest file (saves that never committed, or
 * pruned checkpoints; also the steps of gone, which a dry-run prune would remove), and the files
 * of a committed step that are not its world's parts (a dead save of more ranks left them):
 * their bytes, counting the files in *count; removed when remove. Call with the store's lock
 * held exclusively to remove. */
uint64_t dist_part_leftovers(struct ckpt_store *s, bool remove, const uint64_t *gone, size_t ngone,
			     uint64_t *count);

/* du: the bytes of the parts of existing checkpoints, counting the files in *count. */
uint64_t dist_part_live(struct ckpt_store *s, uint64_t *count);

/* Checks the world part files of checkpoint step (open as r) against the records of its global
 * manifest; each damaged or missing part is reported to on_damage (tensor NULL, file the part,
 * error a positive CKPT_E_* code, the message naming the rank). Returns how many. */
long dist_verify_parts(struct ckpt_store *s, uint64_t step, unsigned world, reader1 *r,
		       ckpt_damage_fn on_damage, void *arg);

#endif
