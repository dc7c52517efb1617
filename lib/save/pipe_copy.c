/* The save pipeline's COPY stage, the snapshot, on a worker for each slab job granted a slab:
 * copies the job's chunks from the caller's memory (host, or CUDA through the library's streams)
 * into the slab, hashing them on the way where that pays, then hands the job to PROCESS
 * (pipe_process.c), at once when it is cheap. The top of the stages: it calls PROCESS and the
 * scheduler. */
#include "save/pipe_int.h"

#include <stdlib.h>

/* Hash first only while it pays. The hint says how the tensor changed last time; a dense update
 * after sparse ones (every chunk new) would otherwise hash each chunk on the snapshot path, find
 * nothing, copy it anyway and, every chunk being hashed, write it inline, also on the snapshot
 * path: the snapshot of a dense save after sparse ones took 4-5 times a fresh one. So a
 * tensor stops after 2 misses without a hit, and every tensor without a hit yet once the save
 * has missed 16 times without any. A wrong guess costs a hash later, never a wrong dedup. */
static bool hash_first_pays(struct pipe_save *ps, struct pipe_tensor *st)
{
	if (!st->hash_first || __atomic_load_n(&st->hf_hit, __ATOMIC_RELAXED))
		return st->hash_first;
	if (__atomic_load_n(&st->hf_miss, __ATOMIC_RELAXED) >= 2)
		return false;
	return __atomic_load_n(&ps->hf_hit, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&ps->hf_miss, __ATOMIC_RELAXED) < 16;
}

/* One host chunk into the slab at dst. hash_first: hashed in the caller's memory first, and a
 * chunk the store already holds (committed) is not copied at all, which makes an incremental
 * snapshot cost a hash, not a copy. fuse_hash: hashed during the copy, while each block is still
 * in the CPU's cache; hashing it later from the slab reads it back from memory once more (the
 * pipeline ran at a third of one thread's copy + hash that way). Without compression that copy is
 * ckpt_copy_digest: non-temporal stores into the slab, which nothing reads again before the
 * write (a plain memcpy into it moves half as much traffic again: the read for ownership of
 * each line); with compression, the encoder reads the slab right after, so a memcpy that leaves
 * it in the cache and a hash of it. */
static void copy_host_chunk(struct pipe_save *ps, struct pipe_tensor *st, uint64_t off,
			    size_t len, uint8_t *dst, ckpt_digest *d, uint8_t *fl)
{
	struct ckpt_store *s = ps->p->s;
	if (hash_first_pays(ps, st)) {
		ckpt_digest_of(st->data + off, len, d);
		struct idx_entry *e = index_find(store_index_lock(s), d);
		bool skip = e && !e->pending && e->c.raw_len == len;
		store_index_unlock(s);
		__atomic_add_fetch(skip ? &st->hf_hit : &st->hf_miss, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(skip ? &ps->hf_hit : &ps->hf_miss, 1, __ATOMIC_RELAXED);
		*fl = J_HASHED | (skip ? J_SKIP : 0);
		/* A miss is hashed again by the copy, which costs less than the read for ownership
		 * it saves, and makes the digest that of the bytes stored even if the caller broke
		 * the snapshot contract between the lookup and the copy. */
		if (!skip && ps->compress)
			memcpy(dst, st->data + off, len);
		else if (!skip)
			ckpt_copy_digest(dst, st->data + off, len, d);
		return;
	}
	if (ps->fuse_hash && !ps->compress) {
		ckpt_copy_digest(dst, st->data + off, len, d);
		*fl = J_HASHED;
		return;
	}
	if (!ps->compress) {
		ckpt_copy_stream(dst, st->data + off, len); /* hashed later, from memory anyway */
		return;
	}
	memcpy(dst, st->data + off, len);
	if (ps->fuse_hash) {
		ckpt_digest_of(dst, len, d);
		*fl = J_HASHED;
	}
}

/* Copies the chunks of j into its slab, each at its record's place; sets the bit of each device
 * whose stream got copies in *used_dev. Returns whether the job is cheap to process: every chunk
 * hashed already and nothing to compress. */
static bool copy_chunks(struct slabjob *j, unsigned *used_dev)
{
	struct pipe_save *ps = j->ps;
	uint8_t *slab = ps->p->pool.slabs[j->slab];
	uint64_t pos = 0;
	struct chunk_it it;
	size_t ti, len;
	uint64_t off;
	chunk_it_init(&it, ps, j);
	j->dig = malloc(j->nchunks * sizeof *j->dig);
	j->skip = calloc(j->nchunks, 1);
	if (!j->dig || !j->skip)
		pipe_set_error(ps, ckpt_fail(CKPT_E_NOMEM, "out of memory"));
	bool cheap = !ps->compress;
	for (uint64_t q = 0; !save_failed(ps) && chunk_next(&it, &ti, &off, &len); q++) {
		struct pipe_tensor *st = &ps->t[ti];
		uint8_t *dst = slab + pos + REC_HDR_LEN;
		if (st->mem == CKPT_MEM_HOST) {
			copy_host_chunk(ps, st, off, len, dst, &j->dig[q], &j->skip[q]);
		} else {
			const struct ckpt_gpu_ops *g = ckpt_gpu_cuda();
			int rc = g->copy_d2h(dst, st->data + off, len, ps->streams[st->mem]);
			if (rc) {
				pipe_set_error(ps, rc);
				break;
			}
			*used_dev |= 1u << st->mem;
		}
		cheap &= (j->skip[q] & J_HASHED) != 0;
		pos += rec_span((uint32_t)len);
	}
	return cheap;
}

/* Waits for this job's copies only (an event after them, not the whole shared stream), with a
 * blocking wait rather than the runtime's default spin, which keeps a core busy. */
static void wait_copies(struct pipe_save *ps, unsigned used_dev)
{
	void *marks[16] = { NULL };
	for (unsigned d = 0; used_dev && d < 16; d++) {
		int rc = used_dev & (1u << d) ? ckpt_gpu_cuda()->mark(ps->streams[d], &marks[d]) : 0;
		if (rc)
			pipe_set_error(ps, rc);
	}
	for (unsigned d = 0; used_dev && d < 16; d++) {
		int rc = marks[d] ? ckpt_gpu_cuda()->mark_wait(marks[d]) : 0;
		if (rc)
			pipe_set_error(ps, rc);
	}
}

void pipe_copy_task(struct task *t)
{
	struct slabjob *j = (struct slabjob *)t;
	struct pipe_save *ps = j->ps;
	struct pipe *p = ps->p;
	unsigned used_dev = 0; /* bit per device whose stream got copies */
	pthread_mutex_lock(&p->mu);
	p->granted_queued--;
	pipe_grant_slabs(p);
	pthread_mutex_unlock(&p->mu);
	bool cheap = copy_chunks(j, &used_dev);
	wait_copies(ps, used_dev);
	pthread_mutex_lock(&p->mu);
	if (++ps->jobs_copied == ps->njobs) {
		ps->snapshot_done = true;
		ps->t_snapshot = ckpt_now();
		pipe_fence_release(p, ps);
		pthread_cond_broadcast(&ps->cv);
	}
	if (ps->is_head && cheap) {
		/* Hashed already and nothing to compress: what is left is bookkeeping and queueing
		 * the write, so do it now and let the disk overlap the rest of the snapshot. */
		pthread_mutex_unlock(&p->mu);
		pipe_process_task(t);
		return;
	}
	if (ps->is_head) {
		/* Hashing waits behind every pending copy: the snapshot comes first. */
		j->task.fn = pipe_process_task;
		workers_submit(p->w, &j->task);
		pthread_mutex_unlock(&p->mu);
		return;
	}
	j->next = ps->ready;
	ps->ready = j;
	pthread_mutex_unlock(&p->mu);
}
