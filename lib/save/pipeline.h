/* The save pipeline: an executor of saves. Pool slabs are granted to jobs in order, worker threads
 * copy (snapshot), hash, deduplicate, compress and lay out records, one I/O engine per data
 * directory writes them, and a commit step runs per save, in submission order.
 *
 * The pipeline knows nothing of the save API above it (save.c): a save hands it a struct
 * pipe_save (what to write, and an ops table with the commit callback) and reads back the chunk
 * table, the references and the statistics the pipeline filled. Below it is only the store
 * (paths, the dedup index, pack ids), reached through store.h's functions. */
#ifndef CKPT_PIPELINE_H
#define CKPT_PIPELINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "format/format.h"
#include "store/store.h"

struct pipe;
struct slabjob;
struct spack;

/* One tensor to save. The owner fills name .. mem; the pipeline the rest. */
struct pipe_tensor {
	char *name;
	uint32_t name_len;
	uint8_t dtype, ndim;
	uint64_t *shape;
	uint64_t nbytes;
	const uint8_t *data;
	int mem;               /* CKPT_MEM_HOST or a CUDA device */
	uint64_t first_chunk;  /* index of its first chunk in the save's chunk order */
	bool hash_first;       /* snapshot hashes it and copies only chunks the store lacks */
	uint32_t hf_hit, hf_miss; /* this save's hash-first lookups so far (atomics) */
};

struct pipe_save;

/* What the pipeline calls back in the save that owns a pipe_save. */
struct pipe_save_ops {
	/* COMMIT, on a worker, after every record is written and every pack and pack directory
	 * entry is durable: makes the checkpoint visible from ps's chunk table and references (the
	 * manifest). Returns 0 or -CKPT_E_*; on failure sets *keep_packs when a manifest naming the
	 * packs may have reached the disk, so that they must not be removed. */
	int (*commit)(struct pipe_save *ps, bool *keep_packs);
};

/* A save as the pipeline sees it. Embedded in the owner's save; zeroed before first use. */
struct pipe_save {
	/* Set by the owner before pipe_submit, read-only afterwards. */
	const struct pipe_save_ops *ops;
	uint64_t step;            /* for messages */
	uint32_t gen;             /* tags this save's dedup index entries (unique per handle) */
	uint32_t chunk_size;
	int compress, level;
	struct pipe_tensor *t;
	size_t nt;
	/* Streams whose queued work the copies must follow (CUDA): one per device the trainer uses,
	 * or none, meaning each device's legacy default stream. */
	void *user_streams[16];
	unsigned n_user_streams;
	bool sync;                /* the caller waits for the whole save */

	/* The pipeline's from here on; counters and lists under the pipe's lock. */
	struct pipe *p;
	bool submitted;           /* pipe_submit succeeded: wait for it, then pipe_save_release */
	bool fuse_hash;           /* pipe_copy_task hashes each chunk right after copying it */
	uint32_t hf_hit, hf_miss; /* hash-first lookups of the whole save so far (atomics) */
	double t_submit, t_snapshot;
	uint64_t nchunks_total;   /* chunk references in the save */
	struct slabjob *jobs;
	size_t njobs, jobs_copied, jobs_done;
	struct pipe_save *next_fifo;
	struct slabjob *ready;    /* copied, waiting for this save to become the head */
	bool is_head, finalizing, snapshot_done, finished;
	bool keep_packs;          /* a manifest naming them may have reached the disk */
	int err;                  /* first error (negative CKPT_E_*) */
	char errmsg[1024];
	pthread_cond_t cv;        /* snapshot done / finished, with the pipe's lock */

	/* Chunk table and references (the commit's input), under the store's index lock while
	 * processing. */
	struct mf_chunk *chunks;
	size_t nchunks, capchunks;
	uint32_t *refs;           /* one per chunk reference, filled by the job that holds it */

	/* Packs this save writes: one open pack per data directory; under wmu. */
	pthread_mutex_t wmu;
	struct spack *packs;
	size_t npacks, cappacks;
	int *cur_pack;            /* per data directory, index into packs or -1 */
	unsigned next_dir;

	void *streams[16];        /* the library's CUDA stream per device used */
	unsigned fence_slot;      /* its flag in the pipe's fence page, and the value that */
	uint32_t fence_val;       /* releases it (0: no CUDA copies, no flag) */
	ckpt_stats st;
};

/* Creates a pipeline for store s with a pool of about pool_bytes (0: the store's option).
 * Returns 0 or -CKPT_E_*. */
int pipe_create(struct ckpt_store *s, uint64_t pool_bytes, struct pipe **out);
/* Stops the pipeline (no save may be in flight). NULL is accepted. */
void pipe_destroy(struct pipe *p);
/* Bytes of p's pool, and of the pool pipe_create(s, pool_bytes) would make. */
uint64_t pipe_pool_bytes(const struct pipe *p);
uint64_t pipe_pool_bytes_for(const struct ckpt_store *s, uint64_t pool_bytes);
/* Replaces *pp (NULL: none yet; no save in flight) by a pipeline whose pool is about pool_bytes,
 * keeping what the old one learned of the tensors it saved (the snapshot hints). The old pool is
 * freed first: both at once may not fit in pinned memory. On failure *pp is NULL. Returns 0 or
 * -CKPT_E_*. */
int pipe_replace(struct ckpt_store *s, struct pipe **pp, uint64_t pool_bytes);

/* Starts ps in the background (t_start: when the caller began waiting, for the statistics).
 * Returns 0 or -CKPT_E_* (then nothing was started; ps may be submitted again). */
int pipe_submit(struct pipe *p, struct pipe_save *ps, double t_start);
/* Records the first error of a save (err negative, message from ckpt_errmsg()); a save still
 * being processed then fails (a cancel). Thread-safe. */
void pipe_set_error(struct pipe_save *ps, int err);
/* Wait for the snapshot / for the end of ps. Return the save's error or 0. */
int pipe_wait_snapshot(struct pipe_save *ps);
int pipe_wait(struct pipe_save *ps);
int pipe_poll(const struct pipe_save *ps);
/* Whether ps copies from CUDA memory (has library streams). */
bool pipe_uses_cuda(const struct pipe_save *ps);
/* Makes stream (NULL: the legacy default stream) wait on the device for the save's copies. */
int pipe_fence(struct pipe_save *ps, void *stream);
/* Bytes hashed so far. */
uint64_t pipe_progress(const struct pipe_save *ps);
/* Frees what the pipeline allocated for ps (after pipe_wait, or when never submitted). */
void pipe_save_release(struct pipe_save *ps);

#endif
