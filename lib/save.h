/* A save in progress: what the caller added (tensors, metadata) and what the pipeline builds
 * (chunk table, references, packs, statistics). Internal to lib/. */
#ifndef CKPT_SAVE_H
#define CKPT_SAVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "format.h"
#include "store.h"

struct save_tensor {
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

struct slabjob;
struct spack;

struct ckpt_save {
	struct ckpt_store *s;
	struct ckpt_save *next_live; /* the store's list of saves not yet finished */
	uint64_t step;
	double t_submit, t_snapshot;
	uint32_t gen;
	uint32_t chunk_size;
	int compress, level;
	/* Filled by the caller. */
	struct save_tensor *t;
	size_t nt, capt;
	uint32_t *names;
	size_t names_cap;
	struct mf_meta *meta;
	size_t nmeta, capmeta;
	/* Streams whose queued work the copies must follow (CUDA): one per device the trainer uses,
	 * or none, meaning each device's legacy default stream. */
	void *user_streams[16];
	unsigned n_user_streams;
	bool submitted;
	bool sync;                /* ckpt_save_commit(): the caller waits for the whole save */
	bool fuse_hash;           /* copy_task hashes each chunk right after copying it */
	uint32_t hf_hit, hf_miss; /* hash-first lookups of the whole save so far (atomics) */

	/* Pipeline state (pipeline.c); counters and lists under the pipe's lock. */
	uint64_t nchunks_total;   /* chunk references in the save */
	struct slabjob *jobs;
	size_t njobs, jobs_copied, jobs_enqueued, jobs_done;
	struct ckpt_save *next_fifo;
	struct slabjob *ready;    /* copied, waiting for this save to become the head */
	bool is_head, finalizing, snapshot_done, finished;
	bool keep_packs;          /* a manifest naming them may have reached the disk */
	int err;                  /* first error (negative CKPT_E_*) */
	char errmsg[1024];
	pthread_cond_t cv;        /* snapshot done / finished, with the pipe's lock */

	/* Chunk table and references, under the store's index lock while processing. */
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

/* Appends c to the chunk table (store's index lock held); sets *slot. */
int grow_chunks(struct ckpt_save *sv, const struct mf_chunk *c, uint32_t *slot);
/* Records the first error of a save (err negative, message from ckpt_errmsg()). Thread-safe. */
void save_set_error(struct ckpt_save *sv, int err);
/* Writes the manifest from the save's tables (after every pack is durable). */
int save_write_manifest(struct ckpt_save *sv);
/* Releases everything the save holds; the store forgets it. */
void save_destroy(struct ckpt_save *sv);

#endif
