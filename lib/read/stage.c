/* One read group restored and waited for (reader1_restore of a one-group tensor or a CUDA
 * destination, and the CUDA groups of restore_all): host groups in place or through the read
 * buffer (group.c), CUDA groups decoded into a pinned staging buffer and copied on the device's
 * stream, ordered after the caller's stream (reader1_after_stream). Owns the lifetime of a
 * struct rres (its staging and streams). Uses group.c and pack.c. */
#include <stdlib.h>

#include <pthread.h>

#include "format/codec.h"
#include "common/common.h"
#include "gpu/gpu.h"
#include "read/read_int.h"
#include "store/store.h"

/* Pinned staging of size bytes: from the store's cache, else a new allocation. */
static int staging_take(struct ckpt_store *s, const struct ckpt_gpu_ops *g, size_t size,
			uint8_t **out, size_t *got)
{
	void *p;
	if (store_pinned_take(s, size, &p, got)) {
		*out = p;
		return 0;
	}
	*got = size;
	return g->alloc_pinned(size, (void **)out);
}

int rd_restore_drain(struct rres *x)
{
	int rc = 0;
	const struct ckpt_gpu_ops *g = NULL;
	for (unsigned k = 0; k < RD_RING; k++) {
		if (!x->ring[k].mark)
			continue;
		if (!g)
			g = ckpt_gpu_cuda(); /* a mark exists: the provider is loaded */
		int mrc = g->mark_wait(x->ring[k].mark);
		x->ring[k].mark = NULL;
		if (!rc)
			rc = mrc;
	}
	return rc;
}

void rres_free(struct rres *x)
{
	bool cuda = x->staging != NULL;
	for (int d = 0; d < 16; d++)
		cuda |= x->stream[d] != NULL;
	/* Only touch the CUDA provider when it was used (loading it sets messages). */
	const struct ckpt_gpu_ops *g = cuda ? ckpt_gpu_cuda() : NULL;
	(void)rd_restore_drain(x); /* no copy may still read a buffer given back */
	free(x->buf);
	free(x->iov);
	free(x->iov_work);
	ckpt_codec_ctx_free(x->codec);
	/* The staging goes back to the store's cache, never freed here: freeing pinned memory
	 * synchronizes the device under a trainer running beside the restore. */
	if (x->staging && g)
		store_pinned_give(x->s, x->staging, x->staging_size, g->free_pinned);
	for (unsigned k = 0; k < RD_RING; k++)
		if (x->ring[k].buf && g)
			store_pinned_give(x->s, x->ring[k].buf, x->ring[k].size, g->free_pinned);
	for (int d = 0; d < 16; d++)
		if (x->stream[d] && g)
			g->stream_destroy(x->stream[d]);
	memset(x, 0, sizeof *x);
}

int rd_order_on_caller(struct reader1 *r, const bool *devs)
{
	const struct ckpt_gpu_ops *g = NULL;
	pthread_mutex_lock(&r->mu);
	uint32_t gen = r->gen;
	void *user = r->user_stream;
	pthread_mutex_unlock(&r->mu);
	int rc = 0;
	for (int d = 0; d < 16 && !rc; d++) {
		if (!devs[d] || (!g && !(g = ckpt_gpu_cuda())))
			continue; /* no provider: the restore threads report it */
		if (!r->ord[d])
			rc = g->stream_create(d, &r->ord[d]);
		if (!rc)
			rc = g->stream_after(r->ord[d], user);
	}
	pthread_mutex_lock(&r->mu);
	r->ord_gen = rc ? 0 : gen;
	pthread_mutex_unlock(&r->mu);
	return rc;
}

void reader_res_free(struct reader1 *r)
{
	bool any = false;
	for (int d = 0; d < 16; d++)
		any |= r->ord[d] != NULL;
	const struct ckpt_gpu_ops *g = any ? ckpt_gpu_cuda() : NULL;
	for (int d = 0; d < 16 && g; d++)
		if (r->ord[d])
			g->stream_destroy(r->ord[d]);
	memset(r->ord, 0, sizeof r->ord);
	if (!r->res)
		return;
	r->res->buf = NULL; /* the reader's own, freed by reader1_close() */
	r->res->codec = NULL;
	rres_free(r->res);
	free(r->res);
	r->res = NULL;
}

/* CUDA destinations: the stream of device mem, created before the staging buffer so that the
 * pinned allocation runs on that device's context, never on device 0 of a process that does not
 * use it; and ordered once per restore call after the caller's stream. */
int rd_restore_prepare(struct reader1 *r, struct rres *x, const struct ckpt_gpu_ops *g,
		       int mem)
{
	if (!g)
		return 0;
	int rc;
	x->s = r->s;
	if (!x->stream[mem] && (rc = g->stream_create(mem, &x->stream[mem])))
		return rc;
	if (!x->staging &&
	    (rc = staging_take(r->s, g, r->buf_cap, &x->staging, &x->staging_size)))
		return rc;
	pthread_mutex_lock(&r->mu);
	uint32_t gen = r->gen;
	void *user = r->user_stream, *ord = r->ord_gen == gen ? r->ord[mem] : NULL;
	pthread_mutex_unlock(&r->mu);
	if (x->ordered[mem] != gen) {
		rc = ord ? g->stream_join(x->stream[mem], ord) : g->stream_after(x->stream[mem], user);
		if (rc)
			return rc;
		x->ordered[mem] = gen;
	}
	return 0;
}

/* The ring slot for the next CUDA group of x: its previous copy waited for, its buffer taken
 * on first use. */
static int ring_slot(struct reader1 *r, struct rres *x, const struct ckpt_gpu_ops *g,
		     struct rring **out)
{
	struct rring *sl = &x->ring[x->ring_next++ % RD_RING];
	int rc = 0;
	if (sl->mark) {
		rc = g->mark_wait(sl->mark);
		sl->mark = NULL;
	}
	if (!rc && !sl->buf)
		rc = staging_take(r->s, g, r->buf_cap, &sl->buf, &sl->size);
	*out = sl;
	return rc;
}

/* Restores references [j0, j1) of tensor t (one read group) into dst, waiting for its read; a
 * CUDA group's copy is left in flight (rd_restore_drain). */
int rd_restore_group(struct reader1 *r, struct rres *x, const struct mf_tensor *t,
		     uint64_t j0, uint64_t j1, uint64_t len, int mem, uint8_t *dst)
{
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j0]];
	struct pack_fd *p;
	int rc = rd_group_pack(r, t, j0, c, &p);
	if (rc)
		return rc;
	const struct ckpt_gpu_ops *g = mem == CKPT_MEM_HOST ? NULL : ckpt_gpu_cuda();
	if (!g) {
		/* Host destinations of raw chunks: read in place. */
		int niov = rd_direct_plan(r, x, p, t, j0, j1, dst);
		struct io_req q = rd_read_req(x, p, c->offset, (size_t)len, niov);
		ssize_t n = io_engine_run(r->eng, &q);
		return rd_group_finish(r, x, p, t, j0, j1, len, dst, niov, n);
	}
	/* CUDA: decode into the next ring slot, one copy, a mark; not waited for here, so that
	 * the next groups are read and decoded while it runs (rd_restore_drain waits). */
	struct rring *sl;
	if ((rc = rd_restore_prepare(r, x, g, mem)) || (rc = ring_slot(r, x, g, &sl)))
		return rc;
	if ((rc = rd_read_group(r, x, p, c->offset, (size_t)len))) {
		rd_tensor_error(r, t, j0);
		return rc;
	}
	if ((rc = rd_group_decode(r, x, p, t, j0, j1, sl->buf)))
		return rc;
	uint64_t raw = 0;
	for (uint64_t q = j0; q < j1; q++)
		raw += r->m.chunks[r->m.refs[t->first_ref + q]].raw_len;
	if ((rc = g->copy_h2d(dst + j0 * r->m.chunk_size, sl->buf, raw, x->stream[mem])))
		return rc;
	return g->mark(x->stream[mem], &sl->mark);
}

int reader1_after_stream(reader1 *r, void *stream)
{
	if (!r)
		return ckpt_fail(CKPT_E_INVAL, "restore: NULL reader");
	pthread_mutex_lock(&r->mu);
	r->user_stream = stream;
	pthread_mutex_unlock(&r->mu);
	return 0;
}
