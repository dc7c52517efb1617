/* What the files of the save pipeline share (pipeline.h is its interface to the save above it):
 * struct pipe and the slab job, and each stage's entry points. The files, from the bottom up:
 *
 *   pipe_sched.c    the grant queue and the save FIFO: who runs next (stages through p->stages)
 *   pipe_pack.c     pack files: open, reserve, write a job's records, close at the commit
 *   pipe_hint.c     the snapshot strategy learned per tensor (hash first or copy only)
 *   pipe_process.c  PROCESS: hash, dedup against the index, encode, lay out, hand to the pack
 *   pipe_commit.c   COMMIT: close the packs, the save's commit callback, the index, statistics
 *   pipe_copy.c     COPY: the snapshot into a slab, then PROCESS
 *   pipeline.c      the interface: create, submit (plan, streams), wait, fence, release
 *
 * Each file calls only files above it in this list; the scheduler reaches the stages through the
 * function pointers pipe_create puts in p->stages. */
#ifndef CKPT_PIPE_INT_H
#define CKPT_PIPE_INT_H

#include "common/common.h"
#include "common/workers.h"
#include "io/engine.h"
#include "gpu/gpu.h"
#include "save/pipeline.h"
#include "save/pool.h"

/* The task functions of the stages, which the scheduler queues. */
struct pipe_stages {
	void (*copy)(struct task *t);     /* a slabjob granted a slab */
	void (*process)(struct task *t);  /* a copied slabjob of the head save */
	void (*finalize)(struct task *t); /* a struct save_task: the commit of a save */
};

struct pipe {
	struct ckpt_store *s;
	struct workers *w;
	struct ckpt_pool pool;
	struct io_engine **eng;
	unsigned ndirs;
	const struct ckpt_gpu_ops *gpu;  /* provider of the pool's memory */
	const struct pipe_stages *stages;
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
	 * flags, one slot per save in turn; both made by the first CUDA save, so that a host-only
	 * first save does not decide the pool's memory kind. */
	bool cuda_ready;
	uint32_t *flags;
	uint32_t fence_next;
};

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

static inline int save_failed(struct pipe_save *ps)
{
	return __atomic_load_n(&ps->err, __ATOMIC_ACQUIRE) != 0;
}

/* Walks the chunks of a job in order: tensor index, offset in the tensor, length. */
struct chunk_it {
	const struct pipe_save *ps;
	size_t ti;
	uint64_t off, left;
};

static inline void chunk_it_init(struct chunk_it *it, const struct pipe_save *ps,
				 const struct slabjob *j)
{
	*it = (struct chunk_it){ps, j->tensor, j->offset, j->nchunks};
}

static inline bool chunk_next(struct chunk_it *it, size_t *ti, uint64_t *off, size_t *len)
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

/* ---- pipe_sched.c ---- */
/* Grants free slabs to the waiting jobs in order and queues their copies. With p->mu held. */
void pipe_grant_slabs(struct pipe *p);
/* A job is over (written, or abandoned): returns its slab, counts the bytes written. */
void pipe_job_finished(struct slabjob *j, uint64_t written);
/* The save's copies are done (or it finished): trainer streams in a fence may run. p->mu held. */
void pipe_fence_release(struct pipe *p, struct pipe_save *ps);
/* Queues a planned save: joins the FIFO, its jobs the grant queue. */
void pipe_enqueue(struct pipe *p, struct pipe_save *ps);
/* Marks ps (the FIFO's head, its commit over) finished and makes the next save the head. With
 * p->mu held. */
void pipe_finish_head(struct pipe *p, struct pipe_save *ps);

/* ---- pipe_pack.c ---- */
/* Picks the pack for a job and reserves w bytes at its end: sets *out (index in ps->packs), its
 * *id and the offset *base. Returns 0 or -CKPT_E_*. */
int pipe_pick_pack(struct pipe_save *ps, uint64_t w, int *out, uint32_t *id, uint64_t *base);
/* Sends one write of len bytes of j's slab at base in pack j->pack; its completion finishes j. */
void pipe_write_job(struct slabjob *j, uint64_t len, uint64_t base);
/* sync: makes the save's packs and their directory entries durable, then closes them; else closes
 * them and removes them unless ps->keep_packs. Returns 0 or -CKPT_E_*. */
int pipe_close_packs(struct pipe_save *ps, bool sync);

/* ---- pipe_hint.c ---- */
/* Sets each tensor's hash_first from what earlier saves learned, and clears the counters. */
void pipe_choose_snapshot(struct pipe *p, struct pipe_save *ps);
/* Learns from a committed save how much of each tensor changed. */
void pipe_learn_snapshot(struct pipe *p, struct pipe_save *ps);

/* ---- the stages' tasks (pipe_process.c, pipe_commit.c, pipe_copy.c) ---- */
void pipe_process_task(struct task *t);
void pipe_finalize_task(struct task *t);
void pipe_copy_task(struct task *t);

#endif
