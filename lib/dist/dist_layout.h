/* The multi-rank layout of a checkpoint, read from its (global) manifest: the world size, the
 * part records and the shard tables, each table checked to tile its global tensor exactly
 * (docs/format.md, "Format version 2"). Internal to lib/dist: dist_read.c builds the box reader on
 * it, and tests/fuzz/fuzz-dist.c feeds it decoded manifests, so it needs no store. dist_merge.c
 * checks the parts' shards with its overlap sweep (dist_find_overlap). */
#ifndef CKPT_DIST_LAYOUT_H
#define CKPT_DIST_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "format/format.h"

struct dist_shard {
	size_t tensor;           /* its tensor's index in the manifest */
	int rank;                /* R of the tensor's name NAME@R; -1 for a global tensor of one piece */
	uint64_t off[CKPT_MAX_DIMS];
	const uint64_t *len;     /* the box's extent: its tensor's shape (the manifest's memory) */
};

struct dist_global {
	const char *name;        /* the manifest's memory */
	ckpt_dtype dtype;
	unsigned ndim;
	uint64_t shape[CKPT_MAX_DIMS];
	uint64_t nbytes;
	struct dist_shard *sh;
	size_t nsh;
	bool replicated;         /* a v2 checkpoint's tensor that no shard table names */
};

struct dist_layout {
	unsigned world;          /* 1 without DIST_WORLD */
	bool v2;                 /* the manifest has DIST_WORLD: saved by a multi-rank save */
	struct dist_global *g;
	size_t ng;
};

/* A box of a global tensor: offsets and extents, one per dimension (the caller's memory). */
struct dist_box {
	const uint64_t *off, *len;
};

/* Whether two of the n boxes b (of nd dimensions each) overlap: the one check of rank 0's merge
 * and of this layout, a sweep along the dimension that separates the boxes best, O(n log n) when
 * they are split along one dimension (dist_layout.c says the general cost). Empty boxes overlap
 * nothing; two scalars (nd 0) overlap. Returns 0 (none), 1 with *x and *y the indices of an
 * overlapping pair (*x the one with the lower offset along the sweep), or -CKPT_E_NOMEM. */
int dist_find_overlap(unsigned nd, const struct dist_box *b, size_t n, size_t *x, size_t *y);

/* A flattened range (elements [start, start + count) of a row-major tensor of shape g: an FSDP1
 * flat parameter's piece, a Megatron distributed-optimizer shard) as the boxes it is made of, in
 * order: each box spans whole inner dimensions below one dimension j and a single index above
 * it, so its elements are contiguous in row-major order and box i starts at element elem[i] of
 * the range. At most DIST_RANGE_MAX_BOXES (2 * ndim - 1) boxes; none for count 0. */
#define DIST_RANGE_MAX_BOXES (2 * CKPT_MAX_DIMS)
struct dist_range_box {
	uint64_t off[CKPT_MAX_DIMS], len[CKPT_MAX_DIMS];
	uint64_t elem;           /* the box's first element, counted from the range's start */
};
/* Fills b (DIST_RANGE_MAX_BOXES entries) and *n. Returns 0, or -CKPT_E_INVAL when the range
 * does not lie inside the tensor (the message names what, start, count and the volume). */
int dist_range_boxes(const char *what, unsigned nd, const uint64_t *g, uint64_t start,
		     uint64_t count, struct dist_range_box *b, size_t *n);

/* Reads the layout of manifest m into *out (free with dist_layout_free, also after a failure):
 * every tensor of m is a shard of one global tensor (a tensor no shard table names is a global
 * tensor of its own). Its pointers point into m, which must outlive it. Returns 0, or
 * -CKPT_E_CORRUPT with a message naming the key and the problem (a number that is not plain
 * decimal, a world out of bounds or not one part record per rank, a shard outside its global
 * tensor, two shards that overlap, shards that leave part of it uncovered, a shard tensor whose
 * name, dtype or rank differs from its table's), or -CKPT_E_NOMEM. */
int dist_layout_parse(const struct manifest *m, struct dist_layout *out);
void dist_layout_free(struct dist_layout *l);

#endif
