/* Restoring boxes of global tensors: from any checkpoint (multi-rank or not) onto any layout.
 * Built on the public reader: a global tensor is a list of shards (a tensor of the manifest and
 * the offsets of its box); a box is assembled from the shards it overlaps, each read with
 * ckpt_reader_restore_range() over the byte span of the overlap only. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "dist/dist.h"

struct dshard {
	size_t tensor;
	int rank;         /* from the tensor's name NAME@R; -1 for a global tensor of one piece */
	uint64_t off[32];
};

struct dglobal {
	const char *name;
	ckpt_dtype dtype;
	unsigned ndim;
	uint64_t shape[32];
	uint64_t nbytes;
	struct dshard *sh;
	size_t nsh;
	bool replicated;  /* a v2 checkpoint's tensor that no shard table names */
};

struct ckpt_dist_reader {
	ckpt_store *s;
	ckpt_reader *r;
	unsigned world;
	bool v2;          /* the checkpoint has DIST_WORLD: saved by ckpt_dist_save_* */
	struct dglobal *g;
	size_t ng;
};

/* The rank R of shard tensor NAME@R: -1 for a name without '@', -2 when R is not a rank of this
 * world. */
static int shard_rank(const ckpt_dist_reader *d, const char *name)
{
	const char *at = strrchr(name, '@');
	uint64_t r;
	if (!at)
		return -1;
	at++;
	return dist_parse_u64(&at, d->world - 1, &r) || *at ? -2 : (int)r;
}

/* Parses "dtype ndim gshape... nshards (tensor offsets...)..." (DIST_SHARDS). */
static int parse_shards(ckpt_dist_reader *d, const char *key, const char *v, struct dglobal *g,
			bool *used, size_t nt)
{
	const char *p = v;
	uint64_t dt, nd, nsh;
	g->name = key + strlen(DIST_SHARDS);
	if (dist_parse_u64(&p, UINT8_MAX, &dt) || dist_parse_u64(&p, 32, &nd) ||
	    !ckpt_dtype_size((ckpt_dtype)dt))
		goto bad;
	g->dtype = (ckpt_dtype)dt;
	g->ndim = (unsigned)nd;
	g->nbytes = ckpt_dtype_size(g->dtype);
	for (unsigned i = 0; i < g->ndim; i++)
		if (dist_parse_u64(&p, UINT64_MAX, &g->shape[i]) ||
		    __builtin_mul_overflow(g->nbytes, g->shape[i], &g->nbytes))
			goto bad;
	if (dist_parse_u64(&p, nt, &nsh) || nsh == 0 || !(g->sh = calloc(nsh, sizeof *g->sh)))
		goto bad;
	for (size_t s = 0; s < nsh; s++) {
		struct dshard *sh = &g->sh[g->nsh++];
		uint64_t t;
		ckpt_tensor_info ti;
		if (dist_parse_u64(&p, nt - 1, &t) || ckpt_reader_tensor(d->r, t, &ti) ||
		    ti.ndim != g->ndim || (sh->rank = shard_rank(d, ti.name)) == -2)
			goto bad;
		sh->tensor = t;
		used[t] = true;
		for (unsigned i = 0; i < g->ndim; i++)
			if (dist_parse_u64(&p, g->shape[i], &sh->off[i]) ||
			    ti.shape[i] > g->shape[i] - sh->off[i])
				goto bad;
	}
	if (!*p)
		return 0;
bad:
	return ckpt_fail(CKPT_E_CORRUPT, "checkpoint: shard table of tensor %s is invalid "
			 "(%s = \"%.200s\")", g->name, key, v);
}

/* DIST_WORLD = w: the number of ranks, within what a save accepts and one per part record. */
static int parse_world(ckpt_dist_reader *d, const char *w, size_t nparts)
{
	const char *p = w;
	uint64_t n;
	if (dist_parse_u64(&p, DIST_MAX_RANKS, &n) || *p || n == 0)
		return ckpt_fail(CKPT_E_CORRUPT, "checkpoint: %s = \"%.64s\" is not a number of "
				 "ranks (1 to %u)", DIST_WORLD, w, DIST_MAX_RANKS);
	if (n != nparts)
		return ckpt_fail(CKPT_E_CORRUPT, "checkpoint: %s = \"%s\" but the manifest records "
				 "%zu parts (%sN)", DIST_WORLD, w, nparts, DIST_PART);
	d->world = (unsigned)n;
	return 0;
}

static int load(ckpt_dist_reader *d)
{
	size_t nt = ckpt_reader_tensor_count(d->r), nm = ckpt_reader_meta_count(d->r), nparts = 0;
	bool *used = calloc(nt + 1, 1);
	if (!used || !(d->g = calloc(nt + nm + 1, sizeof *d->g))) {
		free(used);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	const char *w = ckpt_reader_get_meta(d->r, DIST_WORLD);
	for (size_t i = 0; i < nm; i++) {
		const char *k, *v;
		nparts += ckpt_reader_meta(d->r, i, &k, &v) == 0 &&
			  !strncmp(k, DIST_PART, strlen(DIST_PART));
	}
	d->world = 1;
	d->v2 = w != NULL;
	int rc = w ? parse_world(d, w, nparts) : 0;
	for (size_t i = 0; i < nm && !rc; i++) {
		const char *k, *v;
		if (ckpt_reader_meta(d->r, i, &k, &v) == 0 &&
		    !strncmp(k, DIST_SHARDS, strlen(DIST_SHARDS)))
			rc = parse_shards(d, k, v, &d->g[d->ng++], used, nt);
	}
	/* Every other tensor is a global tensor of one shard (replicated, or a v1 checkpoint). */
	for (size_t i = 0; i < nt && !rc; i++) {
		ckpt_tensor_info ti;
		if (used[i] || (rc = ckpt_reader_tensor(d->r, i, &ti)))
			continue;
		struct dglobal *g = &d->g[d->ng++];
		*g = (struct dglobal){.name = ti.name, .dtype = ti.dtype, .ndim = ti.ndim,
				      .nbytes = ti.nbytes, .nsh = 1, .replicated = d->v2};
		memcpy(g->shape, ti.shape, ti.ndim * sizeof *ti.shape);
		if (!(g->sh = calloc(1, sizeof *g->sh)))
			rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		else {
			g->sh->tensor = i;
			g->sh->rank = -1;
		}
	}
	free(used);
	return rc;
}

CKPT_API int ckpt_dist_reader_open(ckpt_store *s, uint64_t step, ckpt_dist_reader **out)
{
	*out = NULL;
	ckpt_dist_reader *d = calloc(1, sizeof *d);
	if (!d)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	d->s = s;
	int rc = ckpt_reader_open(s, step, &d->r);
	if (!rc)
		rc = load(d);
	if (rc) {
		ckpt_dist_reader_close(d);
		return rc;
	}
	*out = d;
	return 0;
}

CKPT_API void ckpt_dist_reader_close(ckpt_dist_reader *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->ng; i++)
		free(d->g[i].sh);
	free(d->g);
	ckpt_reader_close(d->r);
	free(d);
}

CKPT_API unsigned ckpt_dist_reader_world_size(const ckpt_dist_reader *d)
{
	return d ? d->world : 0;
}

CKPT_API size_t ckpt_dist_reader_tensor_count(const ckpt_dist_reader *d)
{
	return d ? d->ng : 0;
}

CKPT_API int ckpt_dist_reader_tensor(const ckpt_dist_reader *d, size_t i, ckpt_tensor_info *info)
{
	if (!d || i >= d->ng || !info)
		return ckpt_fail(CKPT_E_INVAL, "global tensor %zu: no such tensor", i);
	const struct dglobal *g = &d->g[i];
	*info = (ckpt_tensor_info){.name = g->name, .dtype = g->dtype, .ndim = g->ndim,
				   .shape = g->shape, .nbytes = g->nbytes};
	return 0;
}

CKPT_API long ckpt_dist_reader_shard_count(const ckpt_dist_reader *d, size_t i)
{
	if (!d || i >= d->ng)
		return ckpt_fail(CKPT_E_INVAL, "global tensor %zu: no such tensor", i);
	return (long)d->g[i].nsh;
}

CKPT_API int ckpt_dist_reader_shard(const ckpt_dist_reader *d, size_t i, size_t j,
				    ckpt_dist_shard *out)
{
	if (!d || i >= d->ng || j >= d->g[i].nsh || !out)
		return ckpt_fail(CKPT_E_INVAL, "global tensor %zu: no shard %zu", i, j);
	const struct dshard *sh = &d->g[i].sh[j];
	ckpt_tensor_info ti;
	int rc = ckpt_reader_tensor(d->r, sh->tensor, &ti);
	if (rc)
		return rc;
	*out = (ckpt_dist_shard){.tensor = sh->tensor, .rank = sh->rank, .ndim = d->g[i].ndim,
				 .offsets = sh->off, .lengths = ti.shape};
	return 0;
}

CKPT_API int ckpt_dist_reader_replicated(const ckpt_dist_reader *d, size_t i)
{
	if (!d || i >= d->ng)
		return ckpt_fail(CKPT_E_INVAL, "global tensor %zu: no such tensor", i);
	return d->g[i].replicated;
}

CKPT_API long ckpt_dist_reader_verify_parts(ckpt_dist_reader *d, ckpt_damage_fn on_damage,
					   void *arg)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "verify parts: NULL reader");
	if (!d->v2)
		return 0;
	ckpt_info info;
	ckpt_reader_info(d->r, &info);
	return dist_verify_parts(d->s, info.step, d->world, d->r, on_damage, arg);
}

CKPT_API long ckpt_dist_reader_find(const ckpt_dist_reader *d, const char *name)
{
	for (size_t i = 0; d && name && i < d->ng; i++)
		if (!strcmp(d->g[i].name, name))
			return (long)i;
	return ckpt_fail(CKPT_E_NOTFOUND, "no global tensor %s in the checkpoint", name ? name : "");
}

/* Copies the overlap [lo, hi) of shard sh (extent ext) into the box at off, whose element
 * (i_0, ..) lives at dst + sum((i_k - off_k) * dstr[k]) elements. */
static int copy_overlap(ckpt_dist_reader *d, const struct dglobal *g, const struct dshard *sh,
			const uint64_t *ext, const uint64_t *lo, const uint64_t *hi,
			const uint64_t *off, const uint64_t *dstr, uint8_t *dst)
{
	unsigned nd = g->ndim;
	uint64_t es = ckpt_dtype_size(g->dtype), sst[33], first = 0, last = 0;
	sst[nd] = 1;
	for (unsigned i = nd; i-- > 0;)
		sst[i] = sst[i + 1] * ext[i];
	for (unsigned i = 0; i < nd; i++) {
		first += (lo[i] - sh->off[i]) * sst[i + 1];
		last += (hi[i] - 1 - sh->off[i]) * sst[i + 1];
	}
	/* The byte span of the overlap in the shard: only the chunks under it are read. */
	uint64_t span = (last - first + 1) * es;
	uint8_t *tmp = malloc(span ? span : 1);
	if (!tmp)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (%" PRIu64 " bytes)", span);
	int rc = ckpt_reader_restore_range(d->r, sh->tensor, first * es, tmp, span);
	uint64_t n = nd ? hi[nd - 1] - lo[nd - 1] : 1, idx[32];
	bool packed = !nd || dstr[nd - 1] == 1;
	for (unsigned i = 0; i < nd; i++)
		idx[i] = lo[i];
	while (!rc) {
		uint64_t so = 0, dofs = 0;
		for (unsigned i = 0; i < nd; i++) {
			so += (idx[i] - sh->off[i]) * sst[i + 1];
			dofs += (idx[i] - off[i]) * dstr[i];
		}
		if (packed)
			memcpy(dst + dofs * es, tmp + (so - first) * es, n * es);
		else
			for (uint64_t k = 0; k < n; k++)
				memcpy(dst + (dofs + k * dstr[nd - 1]) * es, tmp + (so - first + k) * es, es);
		/* Next run: the dimensions above the innermost, odometer-style. */
		unsigned i = nd ? nd - 1 : 0;
		while (i-- > 0 && ++idx[i] == hi[i])
			idx[i] = lo[i];
		if (i == (unsigned)-1)
			break;
	}
	free(tmp);
	return rc;
}

/* The bytes a strided box of g spans in its destination (the end of its last element) into
 * *want. Every product and sum is checked: a stride near 2^64 used to wrap the extent into a
 * small number that passed the size check, and the copy then wrote at the wrapped offsets. */
static int box_extent(const struct dglobal *g, const uint64_t *len, const uint64_t *strides,
		      uint64_t *want)
{
	uint64_t lastel = 0, span;
	for (unsigned i = 0; i < g->ndim; i++) {
		if (__builtin_mul_overflow(len[i] - 1, strides[i], &span))
			return ckpt_fail(CKPT_E_INVAL, "restore box of %s: strides[%u] = %" PRIu64
					 " times lengths[%u] - 1 = %" PRIu64 " overflows 64 bits",
					 g->name, i, strides[i], i, len[i] - 1);
		if (__builtin_add_overflow(lastel, span, &lastel))
			return ckpt_fail(CKPT_E_INVAL, "restore box of %s: the destination's extent "
					 "overflows 64 bits (strides[0..%u])", g->name, i);
	}
	if (__builtin_add_overflow(lastel, 1, want) ||
	    __builtin_mul_overflow(*want, ckpt_dtype_size(g->dtype), want))
		return ckpt_fail(CKPT_E_INVAL, "restore box of %s: the destination's extent "
				 "overflows 64 bits (its last element is element %" PRIu64 ")",
				 g->name, lastel);
	return 0;
}

CKPT_API int ckpt_dist_reader_restore_box_strided(ckpt_dist_reader *d, size_t index,
						  const uint64_t *off, const uint64_t *len,
						  void *dst, const uint64_t *strides, uint64_t size)
{
	if (!d || index >= d->ng || !dst)
		return ckpt_fail(CKPT_E_INVAL, "restore box: no global tensor %zu, or NULL dst", index);
	const struct dglobal *g = &d->g[index];
	uint64_t want = 0;
	bool empty = false;
	for (unsigned i = 0; i < g->ndim; i++) {
		if (off[i] > g->shape[i] || len[i] > g->shape[i] - off[i])
			return ckpt_fail(CKPT_E_INVAL, "restore box of %s: dimension %u, %" PRIu64
					 " at %" PRIu64 " is outside its extent %" PRIu64, g->name,
					 i, len[i], off[i], g->shape[i]);
		empty |= len[i] == 0;
	}
	if (empty)
		return 0;
	int rc = box_extent(g, len, strides, &want);
	if (rc)
		return rc;
	if (size < want)
		return ckpt_fail(CKPT_E_INVAL, "restore box of %s: buffer of %" PRIu64 " bytes, the "
				 "box's last element ends at %" PRIu64, g->name, size, want);
	for (size_t s = 0; s < g->nsh; s++) {
		const struct dshard *sh = &g->sh[s];
		ckpt_tensor_info ti;
		rc = ckpt_reader_tensor(d->r, sh->tensor, &ti);
		uint64_t lo[32], hi[32];
		bool none = false;
		for (unsigned i = 0; i < g->ndim && !rc; i++) {
			lo[i] = MAX(off[i], sh->off[i]);
			hi[i] = MIN(off[i] + len[i], sh->off[i] + ti.shape[i]);
			none |= lo[i] >= hi[i];
		}
		if (!rc && !none)
			rc = copy_overlap(d, g, sh, ti.shape, lo, hi, off, strides, dst);
		if (rc) {
			ckpt_fail_prefix("restore box of %s: ", g->name);
			return rc;
		}
	}
	return 0;
}

CKPT_API int ckpt_dist_reader_restore_box(ckpt_dist_reader *d, size_t index, const uint64_t *off,
					  const uint64_t *len, void *dst, uint64_t size)
{
	if (!d || index >= d->ng)
		return ckpt_fail(CKPT_E_INVAL, "restore box: no global tensor %zu", index);
	const struct dglobal *g = &d->g[index];
	uint64_t st[32], want = ckpt_dtype_size(g->dtype), acc = 1;
	for (unsigned i = g->ndim; i-- > 0;) {
		st[i] = acc;
		acc *= len[i];
	}
	for (unsigned i = 0; i < g->ndim; i++)
		want *= len[i];
	if (size != want)
		return ckpt_fail(CKPT_E_INVAL, "restore box of %s: buffer of %" PRIu64 " bytes, the "
				 "box has %" PRIu64, g->name, size, want);
	return ckpt_dist_reader_restore_box_strided(d, index, off, len, dst, st, size);
}

CKPT_API ckpt_reader *ckpt_dist_reader_checkpoint(const ckpt_dist_reader *d)
{
	return d ? d->r : NULL;
}
