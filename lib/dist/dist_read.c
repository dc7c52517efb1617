/* Restoring boxes of global tensors: from any checkpoint (multi-rank or not) onto any layout, into
 * host or CUDA memory. A global tensor is a list of shards (a tensor of the manifest and the
 * offsets of its box); a box is assembled from the shards it overlaps, the overlap with each cut
 * into its rows here and handed to the reader (rd_restore_runs, read/runs.h), which reads each
 * chunk those rows touch once and no other. The layout (world, shard tables, and that the shards
 * tile each global tensor) is dist_layout.c's. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "dist/dist.h"
#include "dist/dist_layout.h"
#include "read/runs.h"

struct dreader {
	ckpt_store *s;
	reader1 *r;
	struct manifest view;   /* r's metadata and tensors as a manifest, for dist_layout_parse */
	struct dist_layout l;
};

/* The reader's metadata and tensors as the manifest dist_layout_parse reads (pointers into r),
 * through the public reader (besides it this file uses read/runs.h only); the layout parser also
 * serves the fuzz target, which has no store. */
static int view_of(reader1 *r, struct manifest *m)
{
	ckpt_info info;
	reader1_info(r, &info);
	size_t nm = reader1_meta_count(r), nt = reader1_tensor_count(r);
	*m = (struct manifest){.step = info.step, .n_meta = (uint32_t)nm, .n_tensors = (uint32_t)nt,
			       .meta = calloc(nm + 1, sizeof *m->meta),
			       .tensors = calloc(nt + 1, sizeof *m->tensors)};
	if (!m->meta || !m->tensors)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	int rc = 0;
	for (size_t i = 0; i < nm && !rc; i++) {
		struct mf_meta *e = &m->meta[i];
		rc = reader1_meta(r, i, &e->key, &e->value);
	}
	for (size_t i = 0; i < nt && !rc; i++) {
		ckpt_tensor_info ti;
		if (!(rc = reader1_tensor(r, i, &ti)))
			m->tensors[i] = (struct mf_tensor){.name = ti.name, .dtype = (uint8_t)ti.dtype,
							   .ndim = (uint8_t)ti.ndim,
							   .shape = (uint64_t *)ti.shape,
							   .nbytes = ti.nbytes};
	}
	return rc;
}

int dreader_open(ckpt_store *s, uint64_t step, dreader **out)
{
	*out = NULL;
	dreader *d = calloc(1, sizeof *d);
	if (!d)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	d->s = s;
	int rc = reader1_open(s, step, &d->r);
	if (!rc)
		rc = view_of(d->r, &d->view);
	if (!rc)
		rc = dist_layout_parse(&d->view, &d->l);
	if (rc) {
		dreader_close(d);
		return rc;
	}
	*out = d;
	return 0;
}

void dreader_close(dreader *d)
{
	if (!d)
		return;
	dist_layout_free(&d->l);
	free(d->view.meta);
	free(d->view.tensors);
	reader1_close(d->r);
	free(d);
}

unsigned dreader_world_size(const dreader *d)
{
	return d ? d->l.world : 0;
}

size_t dreader_tensor_count(const dreader *d)
{
	return d ? d->l.ng : 0;
}

int dreader_tensor(const dreader *d, size_t i, ckpt_tensor_info *info)
{
	if (!d || i >= d->l.ng || !info)
		return ckpt_fail(CKPT_E_INVAL, "global tensor %zu: no such tensor", i);
	const struct dist_global *g = &d->l.g[i];
	*info = (ckpt_tensor_info){.name = g->name, .dtype = g->dtype, .ndim = g->ndim,
				   .shape = g->shape, .nbytes = g->nbytes};
	return 0;
}

long dreader_shard_count(const dreader *d, size_t i)
{
	if (!d || i >= d->l.ng)
		return ckpt_fail(CKPT_E_INVAL, "global tensor %zu: no such tensor", i);
	return (long)d->l.g[i].nsh;
}

int dreader_shard(const dreader *d, size_t i, size_t j,
				    ckpt_shard *out)
{
	if (!d || i >= d->l.ng || j >= d->l.g[i].nsh || !out)
		return ckpt_fail(CKPT_E_INVAL, "global tensor %zu: no shard %zu", i, j);
	const struct dist_shard *sh = &d->l.g[i].sh[j];
	*out = (ckpt_shard){.tensor = sh->tensor, .rank = sh->rank, .ndim = d->l.g[i].ndim,
				 .offsets = sh->off, .lengths = sh->len};
	return 0;
}

int dreader_replicated(const dreader *d, size_t i)
{
	if (!d || i >= d->l.ng)
		return ckpt_fail(CKPT_E_INVAL, "global tensor %zu: no such tensor", i);
	return d->l.g[i].replicated;
}

long dreader_verify_parts(dreader *d, ckpt_damage_fn on_damage,
					   void *arg)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "verify parts: NULL reader");
	if (!d->l.v2)
		return 0;
	ckpt_info info;
	reader1_info(d->r, &info);
	return dist_verify_parts(d->s, info.step, d->l.world, d->r, on_damage, arg);
}

long dreader_find(const dreader *d, const char *name)
{
	for (size_t i = 0; d && name && i < d->l.ng; i++)
		if (!strcmp(d->l.g[i].name, name))
			return (long)i;
	return ckpt_fail(CKPT_E_NOTFOUND, "no global tensor %s in the checkpoint", name ? name : "");
}

/* The rows of a box's overlap [lo, hi) with shard sh, as the runs the reader restores (each run
 * contiguous in the shard, at one stride in the destination): an odometer over the dimensions
 * above the run's. The run takes in the inner dimensions the overlap spans whole in the shard
 * when the destination is at one stride across them too: a row box of row shards is one run per
 * shard, read in place; a column box is one run per row. */
struct box_runs {
	const struct dist_shard *sh;
	unsigned nd, m;            /* runs span dimensions m .. nd - 1 */
	uint64_t es, n;            /* element size, elements per run */
	uint64_t lo[32], hi[32], idx[32], sst[33];
	const uint64_t *off, *dstr; /* the box's offsets, the destination's strides (elements) */
	uint8_t *dst;
	bool done;
};

static void box_runs_init(struct box_runs *b, const struct dist_global *g,
			  const struct dist_shard *sh, const uint64_t *lo, const uint64_t *hi,
			  const uint64_t *off, const uint64_t *dstr, uint8_t *dst)
{
	unsigned nd = g->ndim;
	*b = (struct box_runs){.sh = sh, .nd = nd, .m = nd ? nd - 1 : 0,
			       .es = ckpt_dtype_size(g->dtype), .n = 1, .off = off, .dstr = dstr,
			       .dst = dst};
	b->sst[nd] = 1;
	for (unsigned i = nd; i-- > 0;) {
		b->sst[i] = b->sst[i + 1] * sh->len[i];
		b->lo[i] = b->idx[i] = lo[i];
		b->hi[i] = hi[i];
	}
	if (!nd)
		return;
	b->n = hi[b->m] - lo[b->m];
	uint64_t span;
	while (b->m > 0 && lo[b->m] == sh->off[b->m] && hi[b->m] == sh->off[b->m] + sh->len[b->m] &&
	       !__builtin_mul_overflow(dstr[b->m], hi[b->m] - lo[b->m], &span) &&
	       dstr[b->m - 1] == span) {
		b->m--;
		b->n *= hi[b->m] - lo[b->m];
	}
}

static bool box_runs_next(void *arg, struct rd_run *u)
{
	struct box_runs *b = arg;
	if (b->done)
		return false;
	uint64_t so = 0, dofs = 0;
	for (unsigned i = 0; i < b->nd; i++) {
		so += (b->idx[i] - b->sh->off[i]) * b->sst[i + 1];
		dofs += (b->idx[i] - b->off[i]) * b->dstr[i];
	}
	uint64_t step = b->nd && b->n > 1 ? b->dstr[b->nd - 1] * b->es : b->es;
	*u = (struct rd_run){.off = so * b->es, .n = b->n, .dst = b->dst + dofs * b->es,
			     .step = step};
	/* Next run: the dimensions above the run's, odometer-style. */
	unsigned i = b->m;
	while (i-- > 0 && ++b->idx[i] == b->hi[i])
		b->idx[i] = b->lo[i];
	b->done = i == (unsigned)-1;
	return true;
}

/* The bytes a strided box of g spans in its destination (the end of its last element) into
 * *want. Every product and sum is checked: a stride near 2^64 used to wrap the extent into a
 * small number that passed the size check, and the copy then wrote at the wrapped offsets. */
static int box_extent(const struct dist_global *g, const uint64_t *len, const uint64_t *strides,
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

/* Checks the box against g's extent and the destination against size; sets *empty for a box
 * of no element. strides NULL: row-major and contiguous, size exactly the box's bytes (the
 * packed strides in st). */
static int box_check(const struct dist_global *g, const uint64_t *off, const uint64_t *len,
		     const uint64_t **strides, uint64_t *st, uint64_t size, bool *empty)
{
	*empty = false;
	if (g->ndim && (!off || !len))
		return ckpt_fail(CKPT_E_INVAL, "restore box of %s: NULL offsets or lengths", g->name);
	for (unsigned i = 0; i < g->ndim; i++) {
		if (off[i] > g->shape[i] || len[i] > g->shape[i] - off[i])
			return ckpt_fail(CKPT_E_INVAL, "restore box of %s: dimension %u, %" PRIu64
					 " at %" PRIu64 " is outside its extent %" PRIu64, g->name,
					 i, len[i], off[i], g->shape[i]);
		*empty |= len[i] == 0;
	}
	uint64_t want = ckpt_dtype_size(g->dtype), acc = 1;
	if (!*strides) {
		for (unsigned i = g->ndim; i-- > 0;) {
			st[i] = acc;
			acc *= len[i];
		}
		for (unsigned i = 0; i < g->ndim; i++)
			want *= len[i];
		*strides = st;
		if (size != want)
			return ckpt_fail(CKPT_E_INVAL, "restore box of %s: buffer of %" PRIu64 " bytes, "
					 "the box has %" PRIu64, g->name, size, want);
		return 0;
	}
	if (*empty)
		return 0;
	int rc = box_extent(g, len, *strides, &want);
	if (!rc && size < want)
		return ckpt_fail(CKPT_E_INVAL, "restore box of %s: buffer of %" PRIu64 " bytes, the "
				 "box's last element ends at %" PRIu64, g->name, size, want);
	return rc;
}

int dreader_restore_box_mem(dreader *d, size_t index,
					      const uint64_t *off, const uint64_t *len, int mem,
					      void *dst, const uint64_t *strides, uint64_t size)
{
	if (!d || index >= d->l.ng || !dst)
		return ckpt_fail(CKPT_E_INVAL, "restore box: no global tensor %zu, or NULL dst", index);
	const struct dist_global *g = &d->l.g[index];
	uint64_t st[32];
	bool empty;
	int rc = box_check(g, off, len, &strides, st, size, &empty);
	if (!rc)
		rc = rd_check_mem(g->name, mem, empty ? NULL : dst);
	if (rc || empty)
		return rc;
	for (size_t s = 0; s < g->nsh; s++) {
		const struct dist_shard *sh = &g->sh[s];
		uint64_t lo[32], hi[32];
		bool none = false;
		for (unsigned i = 0; i < g->ndim; i++) {
			lo[i] = MAX(off[i], sh->off[i]);
			hi[i] = MIN(off[i] + len[i], sh->off[i] + sh->len[i]);
			none |= lo[i] >= hi[i];
		}
		if (none)
			continue;
		struct box_runs b;
		box_runs_init(&b, g, sh, lo, hi, off, strides, dst);
		if ((rc = rd_restore_runs(d->r, sh->tensor, (unsigned)b.es, mem, box_runs_next, &b))) {
			ckpt_fail_prefix("restore box of %s", g->name);
			return rc;
		}
	}
	return 0;
}

int dreader_restore_box_strided(dreader *d, size_t index,
						  const uint64_t *off, const uint64_t *len,
						  void *dst, const uint64_t *strides, uint64_t size)
{
	if (!strides)
		return ckpt_fail(CKPT_E_INVAL, "restore box: NULL strides");
	return dreader_restore_box_mem(d, index, off, len, CKPT_MEM_HOST, dst, strides,
						size);
}

int dreader_restore_box(dreader *d, size_t index, const uint64_t *off,
					  const uint64_t *len, void *dst, uint64_t size)
{
	return dreader_restore_box_mem(d, index, off, len, CKPT_MEM_HOST, dst, NULL, size);
}

int dreader_restore_range(dreader *d, size_t index, uint64_t offset,
					    uint64_t count, int mem, void *dst, uint64_t size)
{
	if (!d || index >= d->l.ng || (!dst && count))
		return ckpt_fail(CKPT_E_INVAL, "restore range: no global tensor %zu, or NULL dst",
				 index);
	const struct dist_global *g = &d->l.g[index];
	size_t es = ckpt_dtype_size(g->dtype), nb;
	struct dist_range_box b[DIST_RANGE_MAX_BOXES];
	char what[160];
	snprintf(what, sizeof what, "restore range of %.100s", g->name);
	int rc = dist_range_boxes(what, g->ndim, g->shape, offset, count, b, &nb);
	if (!rc && size != count * es)
		return ckpt_fail(CKPT_E_INVAL, "%s: buffer of %" PRIu64 " bytes, the range has %"
				 PRIu64, what, size, count * es);
	for (size_t i = 0; i < nb && !rc; i++) {
		uint64_t n = 1;
		for (unsigned k = 0; k < g->ndim; k++)
			n *= b[i].len[k];
		rc = dreader_restore_box_mem(d, index, b[i].off, b[i].len, mem,
						      (uint8_t *)dst + b[i].elem * es, NULL, n * es);
	}
	return rc;
}

/* dreader_restore_shared's pieces: at most this many bytes per broadcast (MPI counts
 * are ints). */
#define SHARED_PIECE ((uint64_t)64 << 20)

/* This rank's check of a shared restore: 0, or the error (its message set). */
static int shared_check(dreader *d, const ckpt_comm *c, size_t index, int root,
			const void *dst, uint64_t size)
{
	ckpt_tensor_info ti;
	if (root < 0 || root >= c->size)
		return ckpt_fail(CKPT_E_INVAL, "shared restore: root %d of %d ranks", root, c->size);
	int rc = dreader_tensor(d, index, &ti);
	if (rc)
		return rc;
	if (ti.nbytes != size || (!dst && size))
		return ckpt_fail(CKPT_E_INVAL, "shared restore of %s: buffer of %" PRIu64 " bytes "
				 "at %p, the tensor has %" PRIu64, ti.name, size, dst, ti.nbytes);
	return 0;
}

/* The failure the ranks agreed on (all[k]: rank k's code): root's read, or a rank's check. */
static int shared_failure(const ckpt_comm *c, const int32_t *all, int root, const char *rmsg,
			  size_t index)
{
	if (all[root] && c->rank != root)
		return ckpt_fail(-all[root], "shared restore of global tensor %zu: rank %d, which reads "
				 "it for every rank, failed: %s", index, root, rmsg);
	if (all[c->rank])
		return all[c->rank]; /* ours, its message set */
	for (int k = 0; k < c->size; k++)
		if (all[k])
			return ckpt_fail(CKPT_E_INVAL, "shared restore of global tensor %zu: rank %d "
					 "refused its arguments", index, k);
	return 0;
}

int dreader_restore_shared(dreader *d, const ckpt_comm *c,
					     size_t index, int root, void *dst, uint64_t size)
{
	if (!d || !c || !c->allgather || !c->broadcast || c->size < 1)
		return ckpt_fail(CKPT_E_INVAL, "shared restore: NULL reader or communicator");
	int rc = shared_check(d, c, index, root, dst, size);
	/* root reads before the exchange, so that its failure reaches every rank before any rank
	 * waits for data */
	if (!rc && c->rank == root) {
		const struct dist_global *g = &d->l.g[index];
		uint64_t n = 1;
		for (unsigned k = 0; k < g->ndim; k++)
			n *= g->shape[k];
		rc = dreader_restore_range(d, index, 0, n, CKPT_MEM_HOST, dst, size);
	}
	char rmsg[512] = "";
	int32_t mine = rc, *all = calloc((size_t)c->size, sizeof *all);
	if (!all)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (rc)
		snprintf(rmsg, sizeof rmsg, "%s", ckpt_errmsg());
	int e = c->allgather(c->ctx, &mine, sizeof mine, all);
	if (!e && all[root])
		e = c->broadcast(c->ctx, rmsg, sizeof rmsg, root); /* its message, for the others */
	rmsg[sizeof rmsg - 1] = 0;
	rc = e ? 0 : shared_failure(c, all, root, rmsg, index);
	free(all);
	for (uint64_t off = 0; !e && !rc && off < size; off += SHARED_PIECE) {
		uint64_t len = size - off < SHARED_PIECE ? size - off : SHARED_PIECE;
		e = c->broadcast(c->ctx, (uint8_t *)dst + off, (size_t)len, root);
	}
	if (e) {
		const char *m = c->errmsg ? c->errmsg(c->ctx) : NULL;
		return ckpt_fail(e < 0 ? -e : CKPT_E_IO, "shared restore of global tensor %zu, rank "
				 "%d: the communicator failed: %s", index, c->rank,
				 m ? m : ckpt_strerror(e));
	}
	return rc;
}

reader1 *dreader_checkpoint(const dreader *d)
{
	return d ? d->r : NULL;
}
