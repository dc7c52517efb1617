/* The save pipeline's interface (pipeline.h; the stages are in the pipe_*.c files, pipe_int.h
 * lists them): creates and stops a pipe (its pool, workers and I/O engines, the CUDA fence page),
 * submits a save (splits it into slab jobs, makes its CUDA streams, chooses its snapshot and
 * queues it), and waits, polls, fences and releases it. The top of the pipeline's files: it puts
 * the stages' tasks in p->stages for the scheduler. */
#include "save/pipe_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FENCE_SLOTS 1024u

static const struct pipe_stages stages = {
	.copy = pipe_copy_task,
	.process = pipe_process_task,
	.finalize = pipe_finalize_task,
};

/* ---- setup -------------------------------------------------------------------------------- */
static unsigned online_cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

/* The pool that pool_bytes makes: slabs of a whole number of full-chunk records (a chunk of 1 MiB
 * is a record of 1 MiB + 4 KiB: an 8 MiB I/O size makes slabs of 8 records, not 7 and a hole),
 * 2 to 65536 of them. */
static void pool_geometry(const struct ckpt_store *s, uint64_t pool_bytes, size_t *slab,
			  unsigned *nslabs)
{
	uint32_t cs = s->opt.chunk_size ? (uint32_t)s->opt.chunk_size : s->hdr.chunk_size;
	uint64_t rec = rec_span(cs);
	*slab = (size_t)(MAX(1, (s->opt.io_size + rec / 2) / rec) * rec);
	uint64_t n = pool_bytes / *slab;
	*nslabs = (unsigned)MIN(MAX(n, 2), 65536);
}

uint64_t pipe_pool_bytes_for(const struct ckpt_store *s, uint64_t pool_bytes)
{
	size_t slab;
	unsigned nslabs;
	pool_geometry(s, pool_bytes ? pool_bytes : s->opt.pool_size, &slab, &nslabs);
	return (uint64_t)slab * nslabs;
}

uint64_t pipe_pool_bytes(const struct pipe *p)
{
	return (uint64_t)p->pool.slab_size * p->pool.nslabs;
}

int pipe_create(struct ckpt_store *s, uint64_t pool_bytes, struct pipe **out)
{
	*out = NULL;
	struct pipe *p = calloc(1, sizeof *p);
	if (!p)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	p->s = s;
	p->stages = &stages;
	/* Host memory; the first CUDA save registers it with CUDA (pipe_cuda_ready): a CPU-only
	 * process never creates a CUDA context, and a host-only first save does not leave later
	 * CUDA saves copying into pageable memory. */
	p->gpu = ckpt_gpu_host();
	size_t slab;
	unsigned nslabs;
	pool_geometry(s, pool_bytes ? pool_bytes : s->opt.pool_size, &slab, &nslabs);
	int rc = pool_init(&p->pool, p->gpu, slab, nslabs);
	if (rc) {
		free(p);
		return rc;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_mutex_init(&p->hint_mu, NULL);
	unsigned threads = s->opt.threads ? s->opt.threads : online_cores();
	p->w = workers_create(threads);
	p->eng = calloc(s->layout.ndirs, sizeof *p->eng);
	if (!p->w || !p->eng) {
		rc = ckpt_fail(CKPT_E_NOMEM, "cannot start worker threads");
		goto fail;
	}
	for (unsigned d = 0; d < s->layout.ndirs; d++) {
		rc = io_engine_create(s->opt.engine, s->opt.queue_depth, p->pool.slabs,
				      p->pool.slab_size, p->pool.nslabs, &p->eng[d]);
		if (rc)
			goto fail;
		p->ndirs = d + 1;
	}
	*out = p;
	return 0;
fail:
	workers_destroy(p->w);
	for (unsigned d = 0; d < p->ndirs; d++)
		io_engine_destroy(p->eng[d]);
	free(p->eng);
	pool_fini(&p->pool);
	pthread_mutex_destroy(&p->mu);
	pthread_mutex_destroy(&p->hint_mu);
	free(p);
	return rc;
}

void pipe_destroy(struct pipe *p)
{
	if (!p)
		return;
	workers_destroy(p->w);
	for (unsigned d = 0; d < p->ndirs; d++)
		io_engine_destroy(p->eng[d]);
	free(p->eng);
	if (p->cuda_ready) {
		ckpt_gpu_cuda()->host_unregister(p->pool.base);
		ckpt_gpu_cuda()->free_pinned(p->flags, FENCE_SLOTS * sizeof *p->flags);
	}
	pool_fini(&p->pool);
	pthread_mutex_destroy(&p->mu);
	pthread_mutex_destroy(&p->hint_mu);
	free(p->hints);
	free(p);
}

int pipe_replace(struct ckpt_store *s, struct pipe **pp, uint64_t pool_bytes)
{
	struct tensor_hint *hints = NULL;
	size_t nhints = 0, caphints = 0;
	if (*pp) {
		hints = (*pp)->hints;
		nhints = (*pp)->nhints;
		caphints = (*pp)->caphints;
		(*pp)->hints = NULL;
		pipe_destroy(*pp);
		*pp = NULL;
	}
	int rc = pipe_create(s, pool_bytes, pp);
	if (rc) {
		free(hints);
		return rc;
	}
	(*pp)->hints = hints;
	(*pp)->nhints = nhints;
	(*pp)->caphints = caphints;
	return 0;
}

/* First CUDA save of the pipe, after its streams exist (so the provider works on their device's
 * context): registers the pool and allocates the fence flags. Then gives ps its fence slot. */
static int pipe_cuda_ready(struct pipe *p, struct pipe_save *ps)
{
	const struct ckpt_gpu_ops *g = ckpt_gpu_cuda();
	int rc = 0;
	pthread_mutex_lock(&p->mu);
	if (!p->cuda_ready) {
		void *f = NULL;
		rc = g->alloc_pinned(FENCE_SLOTS * sizeof *p->flags, &f);
		if (!rc && (rc = g->host_register(p->pool.base, p->pool.slab_size * p->pool.nslabs)))
			g->free_pinned(f, FENCE_SLOTS * sizeof *p->flags);
		if (!rc) {
			memset(f, 0, FENCE_SLOTS * sizeof *p->flags);
			p->flags = f;
			p->cuda_ready = true;
		}
	}
	if (!rc) {
		uint32_t n = p->fence_next++;
		ps->fence_slot = n % FENCE_SLOTS;
		ps->fence_val = n / FENCE_SLOTS + 1;
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

bool pipe_uses_cuda(const struct pipe_save *ps)
{
	for (int d = 0; d < 16; d++)
		if (ps->streams[d])
			return true;
	return false;
}

/* The fence: stream waits on the device until the save's copies are done (pipe_fence_release). */
int pipe_fence(struct pipe_save *ps, void *stream)
{
	struct pipe *p = ps->p;
	const struct ckpt_gpu_ops *g = ckpt_gpu_cuda();
	int rc = 0;
	for (int d = 0; !rc && d < 16; d++) {
		if (!ps->streams[d])
			continue;
		/* NULL names the legacy stream of each device the save copies from; a real stream
		 * needs the wait only once. */
		rc = g->wait_flag(stream, d, &p->flags[ps->fence_slot], ps->fence_val);
		if (rc == -CKPT_E_UNSUPPORTED) /* no stream memory operations: the CPU waits */
			return pipe_wait_snapshot(ps);
		if (stream)
			break;
	}
	return rc;
}

/* Splits the save into slab jobs: records laid out back to back, a new job when a slab is full. */
static int plan(struct pipe_save *ps, size_t slab_size)
{
	/* A submit that failed may be retried: start from nothing, not from its half-made tables. */
	free(ps->jobs);
	free(ps->refs);
	ps->jobs = NULL;
	ps->refs = NULL;
	ps->njobs = 0;
	ps->st.logical_bytes = 0;
	size_t cap = 16;
	ps->jobs = calloc(cap, sizeof *ps->jobs);
	if (!ps->jobs)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	uint64_t g = 0, used = 0;
	struct slabjob *cur = NULL;
	for (size_t i = 0; i < ps->nt; i++) {
		struct pipe_tensor *t = &ps->t[i];
		t->first_chunk = g;
		for (uint64_t off = 0; off < t->nbytes; off += ps->chunk_size, g++) {
			uint64_t len = MIN((uint64_t)ps->chunk_size, t->nbytes - off);
			uint64_t span = rec_span((uint32_t)len);
			if (!cur || used + span > slab_size) {
				if (ps->njobs == cap) {
					struct slabjob *n = realloc(ps->jobs, 2 * cap * sizeof *n);
					if (!n)
						return ckpt_fail(CKPT_E_NOMEM, "out of memory");
					ps->jobs = n;
					memset(n + cap, 0, cap * sizeof *n);
					cap *= 2;
				}
				cur = &ps->jobs[ps->njobs++];
				cur->ps = ps;
				cur->tensor = i;
				cur->offset = off;
				cur->first_chunk = g;
				used = 0;
			}
			cur->nchunks++;
			used += span;
		}
		ps->st.logical_bytes += t->nbytes;
	}
	ps->nchunks_total = g;
	ps->refs = malloc((g ? g : 1) * sizeof *ps->refs);
	if (!ps->refs)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	return 0;
}

/* CUDA: the library's streams wait for the trainer's queued work before copying. The ordering
 * is made again at every submit, also on a stream an earlier, failed submit created: a retry
 * must follow what the trainer queued up to the retry (a retry that skipped an existing stream
 * would copy the tensors before the trainer's last writes). */
static int make_streams(struct pipe *p, struct pipe_save *ps)
{
	int rc;
	bool ordered[sizeof ps->streams / sizeof ps->streams[0]] = {false};
	for (size_t i = 0; i < ps->nt; i++) {
		int dev = ps->t[i].mem;
		if (dev < 0 || ordered[dev] || !ps->t[i].nbytes)
			continue;
		const struct ckpt_gpu_ops *g = ckpt_gpu_cuda();
		if (!ps->streams[dev] && (rc = g->stream_create(dev, &ps->streams[dev])))
			return rc;
		if (!ps->n_user_streams && (rc = g->stream_after(ps->streams[dev], NULL)))
			return rc;
		for (unsigned u = 0; u < ps->n_user_streams; u++)
			if ((rc = g->stream_after(ps->streams[dev], ps->user_streams[u])))
				return rc;
		ordered[dev] = true;
	}
	return pipe_uses_cuda(ps) ? pipe_cuda_ready(p, ps) : 0;
}

int pipe_submit(struct pipe *p, struct pipe_save *ps, double t_start)
{
	struct ckpt_store *s = p->s;
	ps->p = p;
	int rc;
	if ((rc = plan(ps, p->pool.slab_size)))
		return rc;
	pipe_choose_snapshot(p, ps);
	/* Copy first and hash later keeps the snapshot at memcpy speed, which only pays when the
	 * caller gets its tensors back before the save is written: an asynchronous save that fits
	 * in the pool. Otherwise hash each chunk while the copy left it in the cache. Fusing there
	 * too, now that the fused copy is faster than a memcpy, was measured and is a loss: every
	 * chunk hashed makes each job `cheap`, processed and written inline on the copy threads, so
	 * the snapshot waits for most of the save (ckpt-bench, 1 GiB on tmpfs, 4 interleaved runs:
	 * snapshot 0.64 s against 0.14 s deferred, 4.3 x memcpy against 1.09 x). */
	ps->fuse_hash = ps->sync || ps->st.logical_bytes > pipe_pool_bytes(p);
	if ((rc = make_streams(p, ps)))
		return rc;
	free(ps->cur_pack);
	ps->cur_pack = malloc(s->layout.ndirs * sizeof *ps->cur_pack);
	if (!ps->cur_pack)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	pthread_cond_init(&ps->cv, NULL);
	pthread_mutex_init(&ps->wmu, NULL);
	for (unsigned d = 0; d < s->layout.ndirs; d++)
		ps->cur_pack[d] = -1;
	ps->t_submit = t_start;
	ps->submitted = true;
	snprintf(ps->st.engine, sizeof ps->st.engine, "%s", io_engine_name(p->eng[0]));
	snprintf(ps->st.gpu, sizeof ps->st.gpu, "%s", pipe_uses_cuda(ps) ? "cuda" : "host");
	ps->st.pool_bytes = pipe_pool_bytes(p);
	ps->st.threads = workers_count(p->w);
	ps->st.data_dirs = s->layout.ndirs;
	pipe_enqueue(p, ps);
	return 0;
}

int pipe_wait_snapshot(struct pipe_save *ps)
{
	struct pipe *p = ps->p;
	pthread_mutex_lock(&p->mu);
	while (!ps->snapshot_done && !ps->finished)
		pthread_cond_wait(&ps->cv, &p->mu);
	int rc = ps->err;
	pthread_mutex_unlock(&p->mu);
	return rc;
}

int pipe_wait(struct pipe_save *ps)
{
	struct pipe *p = ps->p;
	pthread_mutex_lock(&p->mu);
	while (!ps->finished)
		pthread_cond_wait(&ps->cv, &p->mu);
	int rc = ps->err;
	pthread_mutex_unlock(&p->mu);
	return rc;
}

int pipe_poll(const struct pipe_save *ps)
{
	struct pipe *p = ps->p;
	pthread_mutex_lock(&p->mu);
	int done = ps->finished;
	pthread_mutex_unlock(&p->mu);
	return done;
}

/* The digest stage adds to bytes_hashed under the store's index lock. */
uint64_t pipe_progress(const struct pipe_save *ps)
{
	if (!ps->p)
		return ps->st.bytes_hashed;
	store_index_lock(ps->p->s);
	uint64_t done = ps->st.bytes_hashed;
	store_index_unlock(ps->p->s);
	return done;
}

void pipe_save_release(struct pipe_save *ps)
{
	/* Only a save that made streams touches the provider: a host-only save never loads the CUDA
	 * module (nor, through it, the runtime and cuInit). */
	for (int d = 0; d < 16; d++)
		if (ps->streams[d])
			ckpt_gpu_cuda()->stream_destroy(ps->streams[d]);
	if (ps->submitted) {
		pthread_cond_destroy(&ps->cv);
		pthread_mutex_destroy(&ps->wmu);
	}
	free(ps->chunks);
	free(ps->refs);
	free(ps->jobs);
	free(ps->packs);
	free(ps->cur_pack);
}
