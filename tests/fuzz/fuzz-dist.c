/* libFuzzer target: the multi-rank (format version 2) metadata, lib/dist.
 *
 * Every input is decoded as a manifest, as it is and with its length field and XXH3-128 trailer
 * recomputed (as fuzz-manifest.c does), and what decodes goes through what the multi-rank
 * readers parse: dist_layout_parse (a global manifest's world, part records and shard tables,
 * the parser behind dreader_open), dist_parse_piece on every tensor's ckpt.dist.NAME
 * description (a part file's, as rank 0's merge reads it) and dist_parse_sum on every part record.
 * Each must fail cleanly (a negative CKPT_E_* code with a message; -1 for the piece and record
 * parsers) or give what the format promises: one global tensor per tensor, shards inside their
 * global tensor and of its dtype, no two overlapping and their volumes adding up to it, pieces
 * inside theirs. Anything else aborts.
 *
 * Build and run it as tests/fuzz/README.md describes (`make fuzz`). The corpus
 * (tests/fuzz/corpus/dist/) is replayed by tests/unit/format/t-fuzz-replay.c, which includes
 * this file with FUZZ_ENTRY renamed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/hash.h"
#include "fuzz-common.h"
#include "dist/dist.h"
#include "dist/dist_layout.h"
#include "format/format.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);

static void fd_die(const char *why)
{
	fprintf(stderr, "fuzz-dist: %s (last message: %s)\n", why, ckpt_errmsg());
	abort();
}

static int fd_overlap(unsigned nd, const struct dist_shard *a, const struct dist_shard *b)
{
	for (unsigned i = 0; i < nd; i++)
		if (!a->len[i] || !b->len[i] || a->off[i] >= b->off[i] + b->len[i] ||
		    b->off[i] >= a->off[i] + a->len[i])
			return 0;
	return 1;
}

/* A global tensor from a shard table: every promise of the format, checked the slow way. */
static void fd_check_table(const struct manifest *m, const struct dist_layout *l,
			   const struct dist_global *g)
{
	uint64_t want = 1, sum = 0;
	for (unsigned i = 0; i < g->ndim; i++)
		if (__builtin_mul_overflow(want, g->shape[i], &want))
			fd_die("accepted a global shape that overflows");
	if (!g->nsh || g->nsh > l->world || g->ndim > CKPT_MAX_DIMS)
		fd_die("accepted a shard count out of bounds");
	for (size_t s = 0; s < g->nsh; s++) {
		const struct dist_shard *a = &g->sh[s];
		if (a->tensor >= m->n_tensors)
			fd_die("accepted a shard of no tensor");
		const struct mf_tensor *t = &m->tensors[a->tensor];
		uint64_t v = 1;
		if (t->dtype != g->dtype || t->ndim != g->ndim || a->len != t->shape || a->rank < 0 ||
		    (unsigned)a->rank >= l->world)
			fd_die("accepted a shard whose tensor or rank does not match its table");
		for (unsigned i = 0; i < g->ndim; i++) {
			if (a->off[i] > g->shape[i] || a->len[i] > g->shape[i] - a->off[i])
				fd_die("accepted a shard outside its global tensor");
			v *= a->len[i];
		}
		sum += v;
		for (size_t j = 0; j < s; j++)
			if (fd_overlap(g->ndim, a, &g->sh[j]))
				fd_die("accepted two shards that overlap");
	}
	if (sum != want)
		fd_die("accepted shards whose volumes do not add up to their tensor's");
}

static void fd_check_layout(const struct manifest *m, const struct dist_layout *l)
{
	if (l->world < 1 || l->world > DIST_MAX_RANKS)
		fd_die("accepted a world out of bounds");
	uint32_t *seen = calloc((size_t)m->n_tensors + 1, sizeof *seen);
	if (!seen)
		return;
	for (size_t i = 0; i < l->ng; i++) {
		const struct dist_global *g = &l->g[i];
		for (size_t s = 0; s < g->nsh; s++)
			if (g->sh[s].tensor >= m->n_tensors || seen[g->sh[s].tensor]++)
				fd_die("a tensor is in no or two global tensors");
		if (g->nsh == 1 && g->sh[0].rank == -1)
			continue; /* a tensor of its own */
		fd_check_table(m, l, g);
	}
	for (uint32_t t = 0; t < m->n_tensors; t++)
		if (!seen[t])
			fd_die("a tensor is in no global tensor");
	free(seen);
}

/* Every tensor's piece description and every part record, as a part's reader parses them. */
static void fd_pieces(const struct manifest *m)
{
	size_t kl = strlen(DIST_KEY), pl = strlen(DIST_PART);
	for (uint32_t i = 0; i < m->n_meta; i++) {
		const struct mf_meta *e = &m->meta[i];
		struct dist_part_sum sum;
		if (!strncmp(e->key, DIST_PART, pl))
			(void)dist_parse_sum(e->value, &sum);
		if (strncmp(e->key, DIST_KEY, kl))
			continue;
		for (uint32_t t = 0; t < m->n_tensors; t++) {
			const struct mf_tensor *x = &m->tensors[t];
			struct dist_piece p;
			if (strcmp(e->key + kl, x->name) || dist_parse_piece(e->value, x, &p))
				continue;
			if (p.ndim > 32 || (p.kind != 'S' && p.kind != 'R'))
				fd_die("accepted a piece of an unknown kind or rank");
			uint64_t gb = ckpt_dtype_size((ckpt_dtype)x->dtype);
			for (unsigned d = 0; d < p.ndim; d++)
				if (__builtin_mul_overflow(gb, p.gshape[d], &gb))
					fd_die("accepted a piece whose global size overflows");
			if (p.kind == 'R' && (x->ndim != 1 || p.off[0] > gb || x->nbytes > gb - p.off[0]))
				fd_die("accepted a replica's piece outside its tensor");
			for (unsigned d = 0; p.kind == 'S' && d < p.ndim; d++)
				if (x->ndim != p.ndim || p.off[d] > p.gshape[d] ||
				    x->shape[d] > p.gshape[d] - p.off[d])
					fd_die("accepted a shard's box outside its global tensor");
		}
	}
}

static void fd_one(const uint8_t *data, size_t size)
{
	struct manifest m;
	if (fuzz_decode_copy(data, size, "fuzz-dist-input", &m))
		return; /* fuzz-manifest checks the decoder's failures */
	struct dist_layout l;
	int rc = dist_layout_parse(&m, &l);
	if (rc && rc != -CKPT_E_CORRUPT && rc != -CKPT_E_NOMEM)
		fd_die("layout failure with an unexpected code");
	if (rc && !*ckpt_errmsg())
		fd_die("layout failure without a message");
	if (!rc)
		fd_check_layout(&m, &l);
	dist_layout_free(&l);
	fd_pieces(&m);
	manifest_free(&m);
}

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
	fuzz_manifest_twice(data, size, fd_one);
	return 0;
}
