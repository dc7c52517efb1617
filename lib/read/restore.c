/* Restoring one tensor: reader1_restore (host tensors of several groups through the reader's
 * pipe, rpipe.c; others one group at a time, stage.c) and reader1_restore_range (a slice,
 * decoded a chunk at a time). Also the destination checks and tensor counts restore_all shares.
 * Uses reader.c, rpipe.c, stage.c and pack.c. */
#include <stdlib.h>

#include <pthread.h>

#include "common/common.h"
#include "gpu/gpu.h"
#include "read/read_int.h"
#include "read/runs.h"
#include "store/store.h"

int rd_check_mem(const char *name, int mem, const void *dst)
{
	if (mem != CKPT_MEM_HOST && (mem < 0 || mem >= 16))
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': invalid memory type %d", name, mem);
	if (mem != CKPT_MEM_HOST && !ckpt_gpu_cuda())
		return ckpt_fail(CKPT_E_UNSUPPORTED, "restore '%s' to CUDA device %d: %s", name,
				 mem, ckpt_gpu_cuda_error());
	return dst ? ckpt_gpu_check_mem(mem, dst, "restore", name) : 0;
}

int rd_check_dst(const reader1 *r, size_t i, int mem, const void *dst, uint64_t size)
{
	const struct mf_tensor *t = &r->m.tensors[i];
	int rc = rd_check_mem(t->name, mem, NULL);
	if (rc)
		return rc;
	if (size != t->nbytes)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': buffer of %llu bytes, tensor has %llu",
				 t->name, (unsigned long long)size, (unsigned long long)t->nbytes);
	if (t->nbytes && !dst)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': NULL destination", t->name);
	if (t->nbytes)
		return ckpt_gpu_check_mem(mem, dst, "restore", t->name);
	return 0;
}

void rd_count_restored(struct reader1 *r, const struct mf_tensor *t)
{
	pthread_mutex_lock(&r->mu);
	r->st.tensors++;
	r->st.logical_bytes += t->nbytes;
	r->st.chunks += t->nrefs;
	r->st.bytes_hashed += t->nbytes;
	pthread_mutex_unlock(&r->mu);
}

int rd_restore_begin(struct reader1 *r)
{
	/* The staging buffer, streams and read slots live as long as the reader: no pinned
	 * allocation, stream creation or buffer allocation per call. */
	if (!r->res && !(r->res = calloc(1, sizeof *r->res)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	r->res->buf = r->buf;
	r->res->codec = r->codec;
	r->gen++;
	return 0;
}

int rd_reader_pipe(struct reader1 *r)
{
	if (!r->pipe && !(r->pipe = rpipe_create(r, rd_restore_slots(r), r->codec, NULL)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	return 0;
}

/* reader1_restore's jobs: the read groups of one tensor in order. */
struct tensor_jobs {
	struct reader1 *r;
	size_t ti;
	uint64_t j;
	uint8_t *dst;
};

static bool tensor_next(void *arg, struct rjob *out)
{
	struct tensor_jobs *tj = arg;
	const struct mf_tensor *t = &tj->r->m.tensors[tj->ti];
	if (tj->j >= t->nrefs)
		return false;
	uint64_t len, k = rd_group_end(tj->r, t, tj->j, &len);
	*out = (struct rjob){.ti = tj->ti, .j0 = tj->j, .j1 = k, .len = len, .mem = CKPT_MEM_HOST,
			     .dst = tj->dst, .last = k == t->nrefs};
	tj->j = k;
	return true;
}

int reader1_restore(reader1 *r, size_t i, int mem, void *dst, uint64_t size)
{
	if (!r || i >= r->m.n_tensors)
		return ckpt_fail(CKPT_E_INVAL, "restore: tensor index %zu out of range", i);
	int rc = rd_check_dst(r, i, mem, dst, size);
	if (rc)
		return rc;
	const struct mf_tensor *t = &r->m.tensors[i];
	double t0 = ckpt_now();
	if ((rc = rd_restore_begin(r)))
		return rc;
	if (mem == CKPT_MEM_HOST && t->nrefs > 1) {
		/* Host: the tensor's next groups are read while one is hashed. */
		if ((rc = rd_reader_pipe(r)))
			return rc;
		struct tensor_jobs tj = {.r = r, .ti = i, .dst = dst};
		rc = rpipe_run(r->pipe, tensor_next, &tj);
	} else {
		for (uint64_t j = 0; j < t->nrefs && !rc;) {
			uint64_t len, k = rd_group_end(r, t, j, &len);
			rc = rd_restore_group(r, r->res, t, j, k, len, mem, dst);
			j = k;
		}
		int drc = rd_restore_drain(r->res); /* CUDA copies: on the device before return */
		rc = rc ? rc : drc;
	}
	if (rc)
		return rc;
	rd_count_restored(r, t);
	/* One restore runs on the caller's thread: stats.threads counts the threads that read. */
	r->st.threads = MAX(r->st.threads, 1u);
	r->st.seconds += ckpt_now() - t0;
	return 0;
}

/* ---- ranged restore (a slice of a tensor) ------------------------------------------------- */
/* Reads references [j0, j1) of tensor t (one read group, len bytes on disk) and copies the part
 * of each decoded chunk that falls in [offset, offset + size) to dst + (its offset - offset).
 * Each chunk is decoded into tmp (one chunk's worth), so memory stays one chunk whatever the
 * range. */
static int range_group(struct reader1 *r, const struct mf_tensor *t, uint64_t j0,
		       uint64_t j1, uint64_t len, uint64_t offset, uint64_t size, uint8_t *tmp,
		       uint8_t *dst)
{
	const uint64_t cs = r->m.chunk_size;
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j0]];
	struct pack_fd *p;
	int prc = rd_group_pack(r, t, j0, c, &p);
	if (prc)
		return prc;
	struct rres x = {.buf = r->buf, .codec = r->codec};
	int rc = rd_read_group(r, &x, p, c->offset, (size_t)len);
	if (rc) {
		rd_tensor_error(r, t, j0);
		return rc;
	}
	uint64_t at = 0;
	for (uint64_t q = j0; q < j1; q++) {
		const struct mf_chunk *cq = &r->m.chunks[r->m.refs[t->first_ref + q]];
		char path[4096];
		rd_pack_name(r, p, cq->pack_id, path, sizeof path);
		if ((rc = rd_check_record(r, x.codec, x.buf + at, cq, tmp, path))) {
			rd_tensor_error(r, t, q);
			return rc;
		}
		at += rec_span(cq->stored_len);
		uint64_t lo = MAX(q * cs, offset), hi = MIN(q * cs + cq->raw_len, offset + size);
		if (lo < hi)
			memcpy(dst + (lo - offset), tmp + (lo - q * cs), hi - lo);
	}
	return 0;
}

int reader1_restore_range(reader1 *r, size_t i, uint64_t offset, void *dst,
				       uint64_t size)
{
	if (!r || i >= r->m.n_tensors)
		return ckpt_fail(CKPT_E_INVAL, "restore: tensor index %zu out of range", i);
	const struct mf_tensor *t = &r->m.tensors[i];
	if (offset > t->nbytes || size > t->nbytes - offset)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': bytes %llu..%llu are outside its %llu bytes",
				 t->name, (unsigned long long)offset,
				 (unsigned long long)(offset + size), (unsigned long long)t->nbytes);
	if (!size)
		return 0;
	if (!dst)
		return ckpt_fail(CKPT_E_INVAL, "restore '%s': NULL destination", t->name);
	const uint64_t cs = r->m.chunk_size;
	uint64_t j = offset / cs, j1 = (offset + size + cs - 1) / cs;
	uint8_t *tmp = malloc(cs);
	if (!tmp)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	double t0 = ckpt_now();
	int rc = 0;
	while (j < j1 && !rc) {
		/* A group that runs past the range is read only up to j1. */
		uint64_t len, k = rd_group_end_before(r, t, j, j1, &len);
		rc = range_group(r, t, j, k, len, offset, size, tmp, dst);
		j = k;
	}
	free(tmp);
	if (!rc) {
		r->st.logical_bytes += size;
		r->st.chunks += j1 - offset / cs;
		r->st.threads = MAX(r->st.threads, 1u);
		r->st.seconds += ckpt_now() - t0;
	}
	return rc;
}
