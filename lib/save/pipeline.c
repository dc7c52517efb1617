/* The save pipeline (the interface, struct pipe_save and its ops, is in pipeline.h).
 *
 *   submit ─(slab granted in order)─► worker: COPY (snapshot) ─► worker: PROCESS
 *             hash, dedup, encode, compact records ─► engine: WRITE ─► last job ─► worker: COMMIT
 *
 * A slab job is one pool slab's worth of chunks laid out as records. Nobody blocks on the pool: a
 * job waits in the grant queue until a slab is free, and whoever frees one (the write's
 * completion) grants it to the next job in order, so workers always make progress; saves are
 * processed (hashed against the dedup
 * index, written, committed) strictly in submission order, so a save only ever references chunks
 * that are committed or its own, and a failed save cannot leave a later one dangling. A slab goes
 * back to the pool only when its write completed (never reused while in flight). */
#include "save/pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "format/codec.h"
#include "common/common.h"
#include "io/engine.h"
#include "gpu/gpu.h"
#include "save/pool.h"
#include "common/workers.h"

struct pipe {
	struct ckpt_store *s;
	struct workers *w;
	struct ckpt_pool pool;
	struct io_engine **eng;
	unsigned ndirs;
	const struct ckpt_gpu_ops *gpu;  /* provider of the pool's memory */
	pthread_mutex_t mu;
	struct slabjob *dq_head, *dq_tail;  /* jobs waiting for a slab, in grant order */
	double starved_since;               /* when dq_head found the pool empty (0: it did not) */
	unsigned granted_queued;            /* jobs granted a slab whose copy has not started */
	struct pipe_save *fifo_head, *fifo_tail;
	/* What the pipeline learned of each tensor (by name hash), to choose how to snapshot it:
	 * 1 saved before and mostly unchanged, 2 saved before and mostly changed. Under hint_mu. */
	pthread_mutex_t hint_mu;
	struct tensor_hint { uint64_t key; uint8_t state; } *hints;
	size_t nhints, caphints;
	/* CUDA saves: the pool registered with the provider (pinned), and a pinned page of fence
	 * flags, one slot per save in turn; both made by the first CUDA save (issue 12, defects 2
	 * and 5), so that a host-only first save does not decide the pool's memory kind. */
	bool cuda_ready;
	uint32_t *flags;
	uint32_t fence_next;
};

#define FENCE_SLOTS 1024u

struct slabjob {
	struct task task;       /* first: tasks are cast back to jobs */
	struct pipe_save *ps;
	size_t tensor;          /* first chunk: tensor index and byte offset */
	uint64_t offset;
	uint64_t first_chunk, nchunks;
	unsigned slab;
	int pack;               /* index in ps->packs */
	ckpt_digest *dig;       /* per chunk, valid where flags has J_HASHED */
	uint8_t *skip;          /* per chunk flags: J_SKIP, J_HASHED */
	struct io_req io;
	struct slabjob *next;
};

/* Per-chunk flags of a slab job, set by the copy. */
#define J_SKIP 1u   /* already committed in the store: not copied */
#define J_HASHED 2u /* digest in j->dig (hashed at copy time, or by process_chunks) */
#define J_NEW 4u    /* process_chunks: not in the store, laid out as a record */

struct spack {
	uint32_t id;
	unsigned dir;
	int fd;
	bool direct;
	uint64_t end;
};

struct save_task {
	struct task task;
	struct pipe_save *ps;
};

/* ---- errors ------------------------------------------------------------------------------ */
void pipe_set_error(struct pipe_save *ps, int err)
{
	struct pipe *p = ps->p;
	pthread_mutex_lock(&p->mu);
	if (!ps->err) {
		__atomic_store_n(&ps->err, err, __ATOMIC_RELEASE);
		snprintf(ps->errmsg, sizeof ps->errmsg, "saving checkpoint %llu: %s",
			 (unsigned long long)ps->step, ckpt_errmsg());
	}
	pthread_mutex_unlock(&p->mu);
}

static int save_failed(struct pipe_save *ps)
{
	return __atomic_load_n(&ps->err, __ATOMIC_ACQUIRE) != 0;
}

/* ---- per-thread codec context --------------------------------------------------------------- */
static pthread_key_t codec_key;
static pthread_once_t codec_once = PTHREAD_ONCE_INIT;
struct tl_codec {
	ckpt_codec_ctx *ctx;
	size_t chunk;
	uint8_t *out;
};
static void tl_free(void *v)
{
	struct tl_codec *c = v;
	ckpt_codec_ctx_free(c->ctx);
	free(c->out);
	free(c);
}
static void codec_key_init(void) { pthread_key_create(&codec_key, tl_free); }

static struct tl_codec *thread_codec(size_t chunk)
{
	pthread_once(&codec_once, codec_key_init);
	struct tl_codec *c = pthread_getspecific(codec_key);
	if (c && c->chunk >= chunk)
		return c;
	if (c)
		tl_free(c);
	c = calloc(1, sizeof *c);
	if (c) {
		c->chunk = chunk;
		c->ctx = ckpt_codec_ctx_create(chunk);
		c->out = malloc(ckpt_codec_bound(chunk));
		if (!c->ctx || !c->out) {
			tl_free(c);
			c = NULL;
		}
	}
	pthread_setspecific(codec_key, c);
	return c;
}

/* ---- job bookkeeping ---------------------------------------------------------------------- */
static void finalize_task(struct task *t);
static void process_task(struct task *t);

static void queue_finalize(struct pipe *p, struct pipe_save *ps)
{
	/* With p->mu held. */
	ps->finalizing = true;
	struct save_task *ft = calloc(1, sizeof *ft);
	if (!ft) {
		/* Cannot even queue the commit: fail the save in place. */
		if (!ps->err) {
			ps->err = -CKPT_E_NOMEM;
			snprintf(ps->errmsg, sizeof ps->errmsg, "saving checkpoint %llu: out of memory",
				 (unsigned long long)ps->step);
		}
		ft = NULL;
	}
	if (ft) {
		ft->task.fn = finalize_task;
		ft->ps = ps;
		workers_submit(p->w, &ft->task);
	}
}

static void become_head(struct pipe *p, struct pipe_save *ps)
{
	ps->is_head = true;
	while (ps->ready) {
		struct slabjob *j = ps->ready;
		ps->ready = j->next;
		j->task.fn = process_task;
		workers_submit(p->w, &j->task);
	}
	if (ps->jobs_done == ps->njobs && !ps->finalizing)
		queue_finalize(p, ps);
}

static void copy_task(struct task *t);

/* Grants free slabs to the jobs waiting in the grant queue, in order, and queues their copies.
 * With p->mu held, by whoever may have made a grant possible: the submit that queued jobs, every
 * release of a slab and every start of a copy. A dispatcher thread used to do this, blocked in the
 * pool and woken for each released slab: two thread handoffs (release -> dispatcher -> worker) on
 * the path of every slab once the pool is full, one voluntary context switch per slab (issue 13).
 * At most one copy per worker waits granted: more would not copy sooner, and granting the whole
 * pool ahead made the copies cycle through all of it, so that with a fast disk every copy wrote
 * to memory out of the caches (the slab released last, the one the pool hands out, is warm). */
static void grant_slabs(struct pipe *p)
{
	unsigned slab;
	while (p->dq_head && p->granted_queued < workers_count(p->w)) {
		if (!pool_try_acquire(&p->pool, &slab)) {
			if (!p->starved_since)
				p->starved_since = ckpt_now();
			return;
		}
		struct slabjob *j = p->dq_head;
		p->dq_head = j->next;
		if (!p->dq_head)
			p->dq_tail = NULL;
		j->slab = slab;
		if (p->starved_since) {
			/* Backpressure: the time this job waited at the head for a free slab. */
			j->ps->st.wait_seconds += ckpt_now() - p->starved_since;
			p->starved_since = 0;
		}
		j->task.fn = copy_task;
		p->granted_queued++;
		workers_submit_urgent(p->w, &j->task);
	}
}

/* A job is over (written, or abandoned): its slab goes back and may be granted to the next job
 * at once; written bytes are counted in the same critical section. */
static void job_finished(struct slabjob *j, uint64_t written)
{
	struct pipe_save *ps = j->ps;
	struct pipe *p = ps->p;
	pool_release(&p->pool, j->slab);
	pthread_mutex_lock(&p->mu);
	grant_slabs(p);
	ps->st.bytes_written += written;
	ps->jobs_done++;
	if (ps->jobs_done == ps->njobs && ps->is_head && !ps->finalizing)
		queue_finalize(p, ps);
	pthread_mutex_unlock(&p->mu);
}

/* Walks the chunks of a job in order: tensor index, offset in the tensor, length. */
struct chunk_it {
	const struct pipe_save *ps;
	size_t ti;
	uint64_t off, left;
};

static void chunk_it_init(struct chunk_it *it, const struct pipe_save *ps, const struct slabjob *j)
{
	*it = (struct chunk_it){ps, j->tensor, j->offset, j->nchunks};
}

static bool chunk_next(struct chunk_it *it, size_t *ti, uint64_t *off, size_t *len)
{
	if (!it->left)
		return false;
	while (it->ps->t[it->ti].nbytes <= it->off) {
		it->ti++;
		it->off = 0;
	}
	*ti = it->ti;
	*off = it->off;
	*len = (size_t)MIN((uint64_t)it->ps->chunk_size, it->ps->t[it->ti].nbytes - it->off);
	it->off += *len;
	it->left--;
	return true;
}

/* The save's copies are done (or it finished, failed or not): trainer streams waiting in a fence
 * may run. Lock held. */
static void fence_release(struct pipe *p, struct pipe_save *ps)
{
	if (ps->fence_val)
		__atomic_store_n(&p->flags[ps->fence_slot], ps->fence_val, __ATOMIC_RELEASE);
}

/* ---- COPY: the snapshot ---------------------------------------------------------------------- */
/* One host chunk into the slab at dst. hash_first: hashed in the caller's memory first, and a
 * chunk the store already holds (committed) is not copied at all, which makes an incremental
 * snapshot cost a hash, not a copy. fuse_hash: hashed during the copy, while each block is still
 * in the CPU's cache; hashing it later from the slab reads it back from memory once more (issue
 * 13: the pipeline at a third of one thread's copy + hash). Without compression that copy is
 * ckpt_copy_digest: non-temporal stores into the slab, which nothing reads again before the
 * write (a plain memcpy into it moves half as much traffic again: the read for ownership of
 * each line); with compression, the encoder reads the slab right after, so a memcpy that leaves
 * it in the cache and a hash of it. */
/* Hash first only while it pays. The hint says how the tensor changed last time; a dense update
 * after sparse ones (every chunk new) would otherwise hash each chunk on the snapshot path, find
 * nothing, copy it anyway and, every chunk being hashed, write it inline, also on the snapshot
 * path: the snapshot of a dense save after sparse ones took 4-5 times a fresh one (issue 13). So a
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

static void copy_task(struct task *t)
{
	struct slabjob *j = (struct slabjob *)t;
	struct pipe_save *ps = j->ps;
	struct pipe *p = ps->p;
	uint8_t *slab = p->pool.slabs[j->slab];
	uint64_t pos = 0;
	unsigned used_dev = 0; /* bit per device whose stream got copies */
	struct chunk_it it;
	size_t ti, len;
	uint64_t off;
	pthread_mutex_lock(&p->mu);
	p->granted_queued--;
	grant_slabs(p);
	pthread_mutex_unlock(&p->mu);
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
			used_dev |= 1u << st->mem;
		}
		cheap &= (j->skip[q] & J_HASHED) != 0;
		pos += rec_span((uint32_t)len);
	}
	/* Waits for this job's copies only (an event after them, not the whole shared stream), with
	 * a blocking wait rather than the runtime's default spin (issue 12, defect 8). */
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
	pthread_mutex_lock(&p->mu);
	if (++ps->jobs_copied == ps->njobs) {
		ps->snapshot_done = true;
		ps->t_snapshot = ckpt_now();
		fence_release(p, ps);
		pthread_cond_broadcast(&ps->cv);
	}
	if (ps->is_head && cheap) {
		/* Hashed already and nothing to compress: what is left is bookkeeping and queueing
		 * the write, so do it now and let the disk overlap the rest of the snapshot. */
		pthread_mutex_unlock(&p->mu);
		process_task(t);
		return;
	}
	if (ps->is_head) {
		/* Hashing waits behind every pending copy: the snapshot comes first. */
		j->task.fn = process_task;
		workers_submit(p->w, &j->task);
		pthread_mutex_unlock(&p->mu);
		return;
	}
	j->next = ps->ready;
	ps->ready = j;
	pthread_mutex_unlock(&p->mu);
}

/* ---- packs -------------------------------------------------------------------------------- */
/* Opens a new pack in directory dir and writes its header, probing O_DIRECT on the way. */
static int open_pack(struct pipe_save *ps, unsigned dir, int *out)
{
	struct ckpt_store *s = ps->p->s;
	if (ps->npacks == ps->cappacks) {
		size_t n = ps->cappacks ? ps->cappacks * 2 : 8;
		struct spack *np = realloc(ps->packs, n * sizeof *np);
		if (!np)
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		ps->packs = np;
		ps->cappacks = n;
	}
	uint32_t id = store_new_pack_id(s);
	char path[4096];
	store_pack_path(s, dir, id, path, sizeof path);
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
	bool direct = store_direct_io(s);
	int fd = open(path, flags | (direct ? O_DIRECT : 0), 0644);
	if (fd < 0 && direct && errno == EINVAL) {
		/* tmpfs refuses O_DIRECT with EINVAL after creating the file: the id is ours (we
		 * hold the lock), so take the empty file over. */
		direct = false;
		store_refuse_direct(s);
		fd = open(path, (flags & ~O_EXCL) | O_TRUNC | O_NOFOLLOW, 0644);
	}
	if (fd < 0) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "create pack %s: %s", path, strerror(e));
	}
	struct spack *pk = &ps->packs[ps->npacks];
	*pk = (struct spack){.id = id, .dir = dir, .fd = fd, .direct = direct, .end = PACK_HDR_LEN};
	ps->npacks++;
	uint8_t *hdr = ckpt_aligned_alloc(PACK_HDR_LEN);
	if (!hdr)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	struct pack_hdr h = {.version = CKPT_FORMAT_VERSION, .pack_id = id,
			     .created = ckpt_wall_ns() / 1000000000};
	memcpy(h.uuid, s->hdr.uuid, 16);
	pack_hdr_encode(&h, hdr);
	/* Some file systems accept O_DIRECT at open and refuse it (EINVAL) at the first write: the
	 * header write is the probe. Any other error is the save's. */
	ssize_t n = s->io->pwrite(fd, hdr, PACK_HDR_LEN, 0);
	if (n < 0 && errno == EINVAL && direct) {
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0) {
			pk->direct = false;
			store_refuse_direct(s);
			n = s->io->pwrite(fd, hdr, PACK_HDR_LEN, 0);
		}
	}
	int rc = 0;
	if (n < 0) {
		int e = errno;
		rc = ckpt_fail(ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO,
			       "write %s: %s", path, strerror(e));
	} else if (n != PACK_HDR_LEN) {
		rc = io_write_all(s->io, fd, hdr + n, PACK_HDR_LEN - (size_t)n, (uint64_t)n, path);
	}
	free(hdr);
	if (rc)
		return rc;
	pthread_mutex_lock(&ps->p->mu);
	ps->st.bytes_written += PACK_HDR_LEN;
	pthread_mutex_unlock(&ps->p->mu);
	*out = (int)(ps->npacks - 1);
	return 0;
}

/* Picks the pack for a job and reserves w bytes at its end, in one critical section (so packs
 * stay near CKPT_OPT_PACK_SIZE however many workers write): round-robin over data directories, a
 * new pack when the directory's current one is full. */
static int pick_pack(struct pipe_save *ps, uint64_t w, int *out, uint32_t *id, uint64_t *base)
{
	struct ckpt_store *s = ps->p->s;
	pthread_mutex_lock(&ps->wmu);
	unsigned dir = ps->next_dir++ % s->ndirs;
	int cur = ps->cur_pack[dir], rc = 0;
	if (cur < 0 || ps->packs[cur].end >= s->opt.pack_size) {
		rc = open_pack(ps, dir, &cur);
		if (!rc)
			ps->cur_pack[dir] = cur;
	}
	if (!rc) {
		*id = ps->packs[cur].id;
		*base = ps->packs[cur].end;
		ps->packs[cur].end += w;
	}
	pthread_mutex_unlock(&ps->wmu);
	*out = cur;
	return rc;
}

/* ---- PROCESS: hash, dedup, encode, write ------------------------------------------------- */
static void write_done(struct io_req *r)
{
	struct slabjob *j = r->arg;
	struct pipe_save *ps = j->ps;
	struct pipe *p = ps->p;
	uint64_t written = 0;
	if (r->res < 0 || (size_t)r->res != r->len) {
		char path[4096];
		pthread_mutex_lock(&ps->wmu);
		store_pack_path(p->s, ps->packs[j->pack].dir, ps->packs[j->pack].id, path, sizeof path);
		pthread_mutex_unlock(&ps->wmu);
		int e = r->res < 0 ? (int)-r->res : EIO;
		int code = ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO;
		pipe_set_error(ps, ckpt_fail(code, "write %s at offset %llu: %s", path,
					     (unsigned long long)r->off,
					     r->res < 0 ? strerror(e) : "short write"));
	} else {
		written = r->len;
	}
	free(j->dig);
	free(j->skip);
	j->dig = NULL;
	j->skip = NULL;
	job_finished(j, written);
}

struct newrec {
	uint32_t slot;
	uint64_t at;        /* position in the slab */
	uint32_t stored_len;
	uint8_t codec;
};

/* What process_task carries from stage to stage for one slab job. */
struct proc {
	struct slabjob *j;
	uint8_t *slab;
	struct tl_codec *tc;  /* NULL without compression */
	struct newrec *nr;    /* the job's new chunks, in slab order */
	size_t nnew;
	uint64_t w;           /* write cursor: bytes of records laid out */
	uint64_t hashed, reused, stored;
};

/* Appends c to the chunk table (index lock held); sets *slot. */
static int chunk_append(struct pipe_save *ps, const struct mf_chunk *c, uint32_t *slot)
{
	if (ps->nchunks >= UINT32_MAX)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint has too many chunks");
	int rc = ckpt_grow((void **)&ps->chunks, &ps->capchunks, ps->nchunks + 1, sizeof *ps->chunks);
	if (rc)
		return rc;
	*slot = (uint32_t)ps->nchunks;
	ps->chunks[ps->nchunks++] = *c;
	return 0;
}

/* Stage 1, under the index lock (idx): a chunk known to the index (same digest and length) is
 * reused, else it joins the chunk table as new with a pending index entry. fl: its J_* flags.
 * Sets *is_new and the new slot. */
static int dedup_chunk(struct pipe_save *ps, struct ckpt_index *idx, uint8_t fl, uint64_t g,
		       struct mf_chunk *c, bool *is_new, uint32_t *slot)
{
	int rc = 0;
	*is_new = false;
	struct idx_entry *e = index_find(idx, &c->digest);
	bool known = e && e->c.raw_len == c->raw_len;
	if ((fl & J_SKIP) && !known) {
		/* Committed chunks only leave the index when the store is re-read, which never
		 * happens while a save of this handle is live. */
		rc = ckpt_fail(CKPT_E_CORRUPT, "dedup index lost a committed chunk");
	} else if (known) {
		if (e->gen != ps->gen) {
			struct mf_chunk ref = e->c;
			ref.flags = 0;
			rc = chunk_append(ps, &ref, &e->slot);
			e->gen = ps->gen;
		}
		ps->refs[g] = e->slot;
	} else {
		rc = chunk_append(ps, c, slot);
		if (!rc && !e) {
			e = index_put(idx, c);
			if (!e)
				rc = ckpt_fail(CKPT_E_NOMEM, "dedup index: out of memory");
			else {
				e->pending = 1;
				e->gen = ps->gen;
				e->slot = *slot;
			}
		}
		ps->refs[g] = *slot;
		*is_new = true;
	}
	return rc;
}

/* Stage 2, no lock: encodes a new chunk and lays its record out at the write cursor, compacted
 * over skipped and reused chunks and zero-padded to its span. */
static void lay_out_record(struct pipe_save *ps, struct proc *pr, size_t ti, uint8_t *rec,
			   size_t len)
{
	size_t sl = len;
	int codec = CKPT_CODEC_RAW;
	if (pr->tc)
		codec = ckpt_codec_encode(pr->tc->ctx, rec + REC_HDR_LEN, len,
					  ckpt_dtype_size(ps->t[ti].dtype), ps->level, pr->tc->out,
					  ckpt_codec_bound(len), &sl);
	uint8_t *dst = pr->slab + pr->w;
	if (codec != CKPT_CODEC_RAW)
		memcpy(dst + REC_HDR_LEN, pr->tc->out, sl);
	else if (dst != rec)
		memmove(dst + REC_HDR_LEN, rec + REC_HDR_LEN, len);
	uint64_t span = rec_span((uint32_t)sl);
	memset(dst + REC_HDR_LEN + sl, 0, span - REC_HDR_LEN - sl);
	struct newrec *n = &pr->nr[pr->nnew++];
	n->at = pr->w;
	n->codec = (uint8_t)codec;
	n->stored_len = (uint32_t)sl;
	pr->w += span;
	pr->stored += sl;
}

/* Stages 1 and 2 over every chunk of the job, in three passes: hash what the copy did not (no
 * lock), look every chunk up in one index lock section, lay the new ones out in order (no lock).
 * One lock section per job rather than one per chunk: with many workers the index lock was taken
 * nchunks + 1 times per slab (issue 13). Hashing every chunk before the layout is safe: a record
 * only ever moves down, over chunks already hashed. */
static int process_chunks(struct pipe_save *ps, struct proc *pr)
{
	struct slabjob *j = pr->j;
	struct ckpt_store *s = ps->p->s;
	struct chunk_it it;
	size_t ti, len;
	uint64_t off, pos = 0, q;
	chunk_it_init(&it, ps, j);
	for (q = 0; chunk_next(&it, &ti, &off, &len); q++) {
		if (!(j->skip[q] & J_HASHED)) {
			ckpt_digest_of(pr->slab + pos + REC_HDR_LEN, len, &j->dig[q]);
			j->skip[q] |= J_HASHED;
		}
		pr->hashed += len;
		pos += rec_span((uint32_t)len);
	}
	int rc = 0;
	size_t nnew = 0;
	struct ckpt_index *idx = store_index_lock(s);
	chunk_it_init(&it, ps, j);
	for (q = 0; !rc && chunk_next(&it, &ti, &off, &len); q++) {
		struct mf_chunk c = {.raw_len = (uint32_t)len, .flags = MF_CHUNK_NEW, .digest = j->dig[q]};
		bool is_new;
		uint32_t slot = 0;
		rc = dedup_chunk(ps, idx, j->skip[q], j->first_chunk + q, &c, &is_new, &slot);
		if (!rc && is_new) {
			j->skip[q] |= J_NEW;
			pr->nr[nnew++].slot = slot;
		}
	}
	store_index_unlock(s);
	if (rc)
		return rc;
	pos = 0;
	chunk_it_init(&it, ps, j);
	for (q = 0; chunk_next(&it, &ti, &off, &len); q++) {
		if (j->skip[q] & J_NEW)
			lay_out_record(ps, pr, ti, pr->slab + pos, len); /* takes pr->nr[pr->nnew] */
		else
			pr->reused++;
		pos += rec_span((uint32_t)len);
	}
	return 0;
}

/* Stage 3, one index lock section per job: the new chunks get their pack, offset, codec and length in
 * the chunk table and the pending index entries, their record headers are encoded into the slab,
 * and the job's counters are added. */
static void stamp_records(struct pipe_save *ps, struct proc *pr, uint32_t pack_id, uint64_t base)
{
	struct ckpt_store *s = ps->p->s;
	struct ckpt_index *idx = store_index_lock(s);
	for (size_t k = 0; k < pr->nnew; k++) {
		const struct newrec *n = &pr->nr[k];
		struct mf_chunk *c = &ps->chunks[n->slot];
		c->codec = n->codec;
		c->stored_len = n->stored_len;
		c->pack_id = pack_id;
		c->offset = base + n->at;
		struct rec_hdr h = {.codec = c->codec, .digest = c->digest, .raw_len = c->raw_len,
				    .stored_len = c->stored_len, .pack_id = pack_id};
		rec_hdr_encode(&h, pr->slab + n->at);
		struct idx_entry *e = index_find(idx, &c->digest);
		if (e && e->pending && e->gen == ps->gen && e->slot == n->slot) {
			e->c.pack_id = pack_id;
			e->c.offset = c->offset;
			e->c.codec = c->codec;
			e->c.stored_len = c->stored_len;
		}
	}
	ps->st.chunks += pr->j->nchunks;
	ps->st.chunks_new += pr->nnew;
	ps->st.chunks_reused += pr->reused;
	ps->st.bytes_hashed += pr->hashed;
	ps->st.bytes_stored += pr->stored;
	store_index_unlock(s);
}

/* Releases a job that writes nothing (or failed before its write). */
static void job_abandon(struct slabjob *j, int rc)
{
	struct pipe_save *ps = j->ps;
	free(j->dig);
	free(j->skip);
	j->dig = NULL;
	j->skip = NULL;
	if (rc)
		pipe_set_error(ps, rc);
	job_finished(j, 0);
}

/* PROCESS: hash (unless the copy did), dedup, encode and compact the records, then stage 4: pick
 * the pack and send one write for the job's records. */
static void process_task(struct task *t)
{
	struct slabjob *j = (struct slabjob *)t;
	struct pipe_save *ps = j->ps;
	struct pipe *p = ps->p;
	struct proc pr = {.j = j, .slab = p->pool.slabs[j->slab]};
	int rc = 0;
	if (save_failed(ps))
		goto out;
	if (!(pr.nr = malloc(j->nchunks * sizeof *pr.nr))) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	if (ps->compress && !(pr.tc = thread_codec(ps->chunk_size))) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory (codec)");
		goto out;
	}
	if ((rc = process_chunks(ps, &pr)))
		goto out;
	/* A pack is opened only when the job has something to write (a save that changes nothing
	 * writes nothing), and record headers get its id. */
	uint64_t base = 0;
	uint32_t pack_id = 0;
	if (pr.w && (rc = pick_pack(ps, pr.w, &j->pack, &pack_id, &base)))
		goto out;
	stamp_records(ps, &pr, pack_id, base);
	free(pr.nr);
	pr.nr = NULL;
	if (pr.w) {
		pthread_mutex_lock(&ps->wmu);
		int fd = ps->packs[j->pack].fd;
		unsigned dir = ps->packs[j->pack].dir;
		pthread_mutex_unlock(&ps->wmu);
		j->io = (struct io_req){.op = IO_WRITE, .fd = fd, .buf = pr.slab, .len = (size_t)pr.w,
					.off = base, .buf_index = (int)j->slab, .done = write_done,
					.arg = j};
		io_engine_submit(p->eng[dir], &j->io);
		return;
	}
out:
	free(pr.nr);
	job_abandon(j, rc);
}

/* ---- snapshot strategy ------------------------------------------------------------------- */
/* Hashing during the snapshot lets a chunk the store already holds skip the copy (an incremental
 * snapshot costs a hash instead of a copy), but costs a hash on top of the copy for a chunk that
 * changed. So: copy only, the first time the handle saves a tensor (nothing to dedup against) and
 * when most of its chunks changed last time (dense updates); hash first otherwise. */
/* Open addressing on the name hash (0 marks a free slot). */
static struct tensor_hint *hint_find(struct pipe *p, uint64_t key)
{
	if (!p->caphints)
		return NULL;
	for (size_t i = key & (p->caphints - 1);; i = (i + 1) & (p->caphints - 1)) {
		if (p->hints[i].key == key)
			return &p->hints[i];
		if (!p->hints[i].key)
			return NULL;
	}
}

static struct tensor_hint *hint_add(struct pipe *p, uint64_t key)
{
	if ((p->nhints + 1) * 2 > p->caphints) {
		size_t n = p->caphints ? p->caphints * 2 : 256;
		struct tensor_hint *nh = calloc(n, sizeof *nh), *old = p->hints;
		if (!nh)
			return NULL; /* only a hint */
		size_t ocap = p->caphints;
		p->hints = nh;
		p->caphints = n;
		for (size_t i = 0; i < ocap; i++)
			if (old[i].key)
				*hint_add(p, old[i].key) = old[i];
		free(old);
	}
	size_t i = key & (p->caphints - 1);
	while (p->hints[i].key)
		i = (i + 1) & (p->caphints - 1);
	p->hints[i].key = key;
	p->nhints++;
	return &p->hints[i];
}

static uint64_t hint_key(const struct pipe_tensor *t)
{
	uint64_t k = ckpt_checksum64(t->name, t->name_len);
	return k ? k : 1;
}

static void choose_snapshot(struct pipe *p, struct pipe_save *ps)
{
	pthread_mutex_lock(&p->hint_mu);
	for (size_t i = 0; i < ps->nt; i++) {
		struct pipe_tensor *t = &ps->t[i];
		struct tensor_hint *h = hint_find(p, hint_key(t));
		t->hash_first = h && h->state == 1;
		t->hf_hit = t->hf_miss = 0;
	}
	ps->hf_hit = ps->hf_miss = 0;
	pthread_mutex_unlock(&p->hint_mu);
}

static void learn_snapshot(struct pipe *p, struct pipe_save *ps)
{
	pthread_mutex_lock(&p->hint_mu);
	for (size_t i = 0; i < ps->nt; i++) {
		struct pipe_tensor *t = &ps->t[i];
		uint64_t key = hint_key(t), nrefs = 0, nnew = 0;
		for (uint64_t g = t->first_chunk; g < ps->nchunks_total && (i + 1 == ps->nt ||
		     g < ps->t[i + 1].first_chunk); g++, nrefs++)
			nnew += (ps->chunks[ps->refs[g]].flags & MF_CHUNK_NEW) != 0;
		struct tensor_hint *h = hint_find(p, key);
		if (!h) {
			if ((h = hint_add(p, key)))
				h->state = 1;
			continue;
		}
		h->state = 2 * nnew > nrefs ? 2 : 1;
	}
	pthread_mutex_unlock(&p->hint_mu);
}

/* ---- COMMIT ------------------------------------------------------------------------------- */
static int close_packs(struct pipe_save *ps, bool sync)
{
	struct ckpt_store *s = ps->p->s;
	int rc = 0;
	bool dirs[MAX_DATA_DIRS + 1] = {false};
	for (size_t i = 0; i < ps->npacks; i++) {
		struct spack *pk = &ps->packs[i];
		char path[4096];
		store_pack_path(s, pk->dir, pk->id, path, sizeof path);
		if (sync && !rc && s->io->fdatasync(pk->fd)) {
			int e = errno;
			rc = ckpt_fail(ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO,
				       "fdatasync %s: %s", path, strerror(e));
		}
		if (close(pk->fd) && sync && !rc) {
			int e = errno;
			rc = ckpt_fail(CKPT_E_IO, "close %s: %s", path, strerror(e));
		}
		pk->fd = -1;
		dirs[pk->dir] = true;
		if (!sync && !ps->keep_packs)
			unlink(path);
	}
	/* The packs' directory entries must be durable before a manifest names them. */
	for (unsigned d = 0; sync && !rc && d < s->ndirs; d++)
		if (dirs[d])
			rc = io_fsync_dir(s->pack_dirs[d]);
	return rc;
}

static void finalize_task(struct task *t)
{
	struct save_task *ft = (struct save_task *)t;
	struct pipe_save *ps = ft->ps;
	struct pipe *p = ps->p;
	struct ckpt_store *s = p->s;
	free(ft);
	/* Decided once: a cancel that arrives while the commit runs is too late (the checkpoint
	 * may already be visible), so it cannot make us remove packs a manifest names. */
	bool failed = save_failed(ps);
	int rc = failed ? 0 : close_packs(ps, true);
	if (!failed && !rc)
		rc = ps->ops->commit(ps, &ps->keep_packs);
	if (rc) {
		pipe_set_error(ps, rc);
		failed = true;
	}
	if (!failed) {
		pthread_mutex_lock(&p->mu);
		__atomic_store_n(&ps->err, 0, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&p->mu);
	}
	if (failed) {
		close_packs(ps, false);
		index_drop_pending(store_index_lock(s));
		store_index_unlock(s);
	} else {
		index_commit_pending(store_index_lock(s));
		store_index_resync(s);
		store_index_unlock(s);
		learn_snapshot(p, ps);
	}
	double t1 = ckpt_now();
	pthread_mutex_lock(&p->mu);
	ps->st.seconds = t1 - ps->t_submit;
	ps->st.snapshot_seconds = (ps->snapshot_done ? ps->t_snapshot : t1) - ps->t_submit;
	ps->st.persist_seconds = t1 - (ps->snapshot_done ? ps->t_snapshot : t1);
	ps->st.pool_peak = pool_take_peak(&p->pool);
	/* What this save did: O_DIRECT on every pack it wrote (a save that wrote nothing: what
	 * the handle would do). */
	bool direct = store_direct_io(s);
	if (ps->npacks) {
		direct = true;
		for (size_t i = 0; i < ps->npacks; i++)
			direct &= ps->packs[i].direct;
	}
	ps->st.direct_io = direct;
	fence_release(p, ps);
	ps->finished = true;
	pthread_cond_broadcast(&ps->cv);
	p->fifo_head = ps->next_fifo;
	if (!p->fifo_head)
		p->fifo_tail = NULL;
	if (p->fifo_head)
		become_head(p, p->fifo_head);
	pthread_mutex_unlock(&p->mu);
}

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
	p->eng = calloc(s->ndirs, sizeof *p->eng);
	if (!p->w || !p->eng) {
		rc = ckpt_fail(CKPT_E_NOMEM, "cannot start worker threads");
		goto fail;
	}
	for (unsigned d = 0; d < s->ndirs; d++) {
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

/* The fence: stream waits on the device until the save's copies are done (fence_release). */
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
		if (stream)
			break;
	}
	return rc;
}

/* Splits the save into slab jobs: records laid out back to back, a new job when a slab is full. */
static int plan(struct pipe_save *ps, size_t slab_size)
{
	/* A submit that failed may be retried: start from nothing (issue 12, defect 7). */
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

/* CUDA: the library's streams wait for the trainer's queued work before copying. */
static int make_streams(struct pipe *p, struct pipe_save *ps)
{
	int rc;
	for (size_t i = 0; i < ps->nt; i++) {
		int dev = ps->t[i].mem;
		if (dev < 0 || ps->streams[dev] || !ps->t[i].nbytes)
			continue;
		const struct ckpt_gpu_ops *g = ckpt_gpu_cuda();
		if ((rc = g->stream_create(dev, &ps->streams[dev])))
			return rc;
		if (!ps->n_user_streams && (rc = g->stream_after(ps->streams[dev], NULL)))
			return rc;
		for (unsigned u = 0; u < ps->n_user_streams; u++)
			if ((rc = g->stream_after(ps->streams[dev], ps->user_streams[u])))
				return rc;
	}
	return pipe_uses_cuda(ps) ? pipe_cuda_ready(p, ps) : 0;
}

/* Queues a planned save: joins the FIFO, its jobs the grant queue. */
static void enqueue(struct pipe *p, struct pipe_save *ps)
{
	pthread_mutex_lock(&p->mu);
	if (p->fifo_tail)
		p->fifo_tail->next_fifo = ps;
	else
		p->fifo_head = ps;
	p->fifo_tail = ps;
	if (!ps->njobs) {
		ps->snapshot_done = true;
		ps->t_snapshot = ps->t_submit;
		fence_release(p, ps);
	}
	for (size_t i = 0; i < ps->njobs; i++) {
		struct slabjob *j = &ps->jobs[i];
		j->next = NULL;
		if (p->dq_tail)
			p->dq_tail->next = j;
		else
			p->dq_head = j;
		p->dq_tail = j;
	}
	grant_slabs(p);
	if (p->fifo_head == ps)
		become_head(p, ps);
	pthread_mutex_unlock(&p->mu);
}

int pipe_submit(struct pipe *p, struct pipe_save *ps, double t_start)
{
	struct ckpt_store *s = p->s;
	ps->p = p;
	int rc;
	if ((rc = plan(ps, p->pool.slab_size)))
		return rc;
	choose_snapshot(p, ps);
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
	ps->cur_pack = malloc(s->ndirs * sizeof *ps->cur_pack);
	if (!ps->cur_pack)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	pthread_cond_init(&ps->cv, NULL);
	pthread_mutex_init(&ps->wmu, NULL);
	for (unsigned d = 0; d < s->ndirs; d++)
		ps->cur_pack[d] = -1;
	ps->t_submit = t_start;
	ps->submitted = true;
	snprintf(ps->st.engine, sizeof ps->st.engine, "%s", io_engine_name(p->eng[0]));
	snprintf(ps->st.gpu, sizeof ps->st.gpu, "%s", pipe_uses_cuda(ps) ? "cuda" : "host");
	ps->st.pool_bytes = pipe_pool_bytes(p);
	ps->st.threads = workers_count(p->w);
	ps->st.data_dirs = s->ndirs;
	enqueue(p, ps);
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
	 * module (nor, through it, the runtime and cuInit; issue 12, defect 9). */
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
