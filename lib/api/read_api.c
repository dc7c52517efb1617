/* Reading through the public reader: a region of a tensor (whole, elements, a box, strided, or
 * collectively over a communicator), every tensor through a callback, and verification. Each
 * picks the one-process reader's path where the tensor is one piece saved whole (in place by
 * O_DIRECT, parallel), else the global tensors' (dist/dist_read.c). */
#include <inttypes.h>
#include <stdlib.h>

#include "api/api.h"
#include "dist/dist.h"

static int region_of(const ckpt_region *in, ckpt_region *out)
{
	*out = (ckpt_region){.struct_size = sizeof *out};
	if (!in)
		return 0;
	int rc = api_size_ok(in->struct_size, sizeof *in, "ckpt_region");
	if (rc)
		return rc;
	*out = *in;
	if (out->offsets && !out->lengths)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_region: offsets without lengths");
	if (out->offsets && out->count)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_region: both a box and an element range");
	if (out->comm && (out->offsets || out->count))
		return ckpt_fail(CKPT_E_INVAL, "ckpt_region: a collective read is of whole tensors");
	if (out->comm)
		return api_size_ok(out->comm->struct_size, sizeof *out->comm, "ckpt_comm");
	return 0;
}

/* Reads as saved: whole tensors, or a byte range of host memory. */
static int read_saved(ckpt_reader *rd, size_t i, const ckpt_region *g, int mem, void *dst,
		      uint64_t size)
{
	if (g->offsets || g->comm)
		return ckpt_fail(CKPT_E_INVAL, "a box or a collective read needs the global tensors "
				 "(a reader opened without CKPT_READ_AS_SAVED)");
	if (!g->count)
		return reader1_restore(rd->r, i, mem, dst, size);
	ckpt_tensor_info ti;
	int rc = reader1_tensor(rd->r, i, &ti);
	if (rc)
		return rc;
	size_t es = ckpt_dtype_size(ti.dtype);
	if (mem != CKPT_MEM_HOST)
		return ckpt_fail(CKPT_E_UNSUPPORTED, "an element range of a tensor as saved is read "
				 "into host memory only");
	if (g->offset > ti.nbytes / es || g->count > ti.nbytes / es - g->offset ||
	    size != g->count * es)
		return ckpt_fail(CKPT_E_INVAL, "tensor %s: elements [%" PRIu64 ", +%" PRIu64
				 ") into %" PRIu64 " bytes: outside the tensor or a wrong size",
				 ti.name, g->offset, g->count, size);
	return reader1_restore_range(rd->r, i, g->offset * es, dst, size);
}

CKPT_API int ckpt_reader_read(ckpt_reader *rd, size_t i, const ckpt_region *region, int mem,
			      void *dst, uint64_t size)
{
	if (!rd || !dst)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_reader_read: NULL reader or destination");
	ckpt_region g;
	int rc = region_of(region, &g);
	if (rc)
		return rc;
	if (!rd->d)
		return read_saved(rd, i, &g, mem, dst, size);
	if (g.comm) {
		if (mem != CKPT_MEM_HOST)
			return ckpt_fail(CKPT_E_UNSUPPORTED, "a collective read is into host memory");
		return dreader_restore_shared(rd->d, g.comm, i, g.root, dst, size);
	}
	if (g.offsets)
		return dreader_restore_box_mem(rd->d, i, g.offsets, g.lengths, mem, dst, g.strides,
					       size);
	if (rd->identity)
		return read_saved(rd, i, &g, mem, dst, size);
	if (g.count)
		return dreader_restore_range(rd->d, i, g.offset, g.count, mem, dst, size);
	ckpt_tensor_info ti;
	if ((rc = dreader_tensor(rd->d, i, &ti)))
		return rc;
	uint64_t zero[CKPT_MAX_DIMS] = {0};
	return dreader_restore_box_mem(rd->d, i, zero, ti.shape, mem, dst, NULL, size);
}

CKPT_API int ckpt_reader_read_all(ckpt_reader *rd, ckpt_dst_fn dst_for, void *arg)
{
	if (!rd || !dst_for)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_reader_read_all: NULL argument");
	if (!rd->d || rd->identity)
		return reader1_restore_all(rd->r, dst_for, arg);
	/* Global tensors of several pieces: one after the other, each read in parallel. */
	size_t n = dreader_tensor_count(rd->d);
	for (size_t i = 0; i < n; i++) {
		ckpt_tensor_info ti = {.struct_size = sizeof ti};
		int rc = ckpt_reader_tensor(rd, i, &ti), mem = CKPT_MEM_HOST;
		if (rc)
			return rc;
		void *dst = dst_for(i, &ti, &mem, arg);
		if (dst && (rc = ckpt_reader_read(rd, i, NULL, mem, dst, ti.nbytes)))
			return rc;
	}
	return 0;
}

/* The public callbacks behind the internal verify's (the caller's arg is theirs). */
struct verify_cb {
	ckpt_damage_fn on_damage;
	ckpt_progress_fn on_progress;
	void *arg;
};

static void damage_cb(const ckpt_damage *d, void *arg)
{
	struct verify_cb *v = arg;
	if (v->on_damage)
		v->on_damage(d, v->arg);
}

static void progress_cb(uint64_t done, uint64_t total, void *arg)
{
	struct verify_cb *v = arg;
	if (v->on_progress)
		(void)v->on_progress(v->arg, done, total);
}

/* A layout the library refuses is one damage of the checkpoint; the chunks are still checked. */
static long layout_damage(ckpt_reader *rd, struct verify_cb *v, int rc)
{
	if (rc == -CKPT_E_NOMEM || rc == -CKPT_E_IO)
		return rc;
	ckpt_damage d = {.step = rd->step, .file = NULL, .error = -rc, .message = ckpt_errmsg()};
	damage_cb(&d, v);
	return 1;
}

/* A multi-rank checkpoint's part files, through the global reader (one is opened for a reader
 * as saved). A checkpoint read from the remote has its parts there: pull checks them. */
static long verify_parts(ckpt_reader *rd, struct verify_cb *v)
{
	if (reader1_from_remote(rd->r))
		return 0;
	if (rd->d)
		return dreader_verify_parts(rd->d, damage_cb, v);
	if (!reader1_get_meta(rd->r, DIST_WORLD))
		return 0;
	dreader *d;
	long n = dreader_open(rd->s, rd->step, &d);
	if (n)
		return layout_damage(rd, v, (int)n);
	n = dreader_verify_parts(d, damage_cb, v);
	dreader_close(d);
	return n;
}

CKPT_API long ckpt_reader_verify(ckpt_reader *rd, ckpt_verify_cache *cache,
				 ckpt_damage_fn on_damage, ckpt_progress_fn on_progress, void *arg)
{
	if (!rd)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_reader_verify: NULL reader");
	struct verify_cb v = {on_damage, on_progress, arg};
	long parts = verify_parts(rd, &v);
	if (parts < 0)
		return parts;
	long n = cache ? reader1_verify_cached(rd->r, cache, damage_cb, progress_cb, &v)
		       : reader1_verify(rd->r, damage_cb, progress_cb, &v);
	return n < 0 ? n : n + parts;
}
