/* What the pieces of the reader share (lib/read only): the reader handle, its pack cache, the
 * per-thread restore resources and the read-group job, and the functions each piece offers the
 * ones above it. The pieces depend on each other one way, lowest first:
 *   pack.c     the pack cache, record checks, one group read (rd_pack, rd_read_group, ...)
 *   group.c    finishing a host group's read: in place (direct) or decoded from the buffer
 *   stage.c    one group restored and waited for (host, or CUDA through pinned staging)
 *   rpipe.c    a thread's reads in flight across groups and tensors (rpipe_run)
 *   reader.c   the handle: open, close, tensor and metadata lookups
 *   restore.c  reader1_restore and reader1_restore_range
 *   runs.c     rd_restore_runs: scattered runs of a tensor, each chunk read once (read/runs.h)
 *   restore_all.c  reader1_restore_all over worker threads
 *   verify.c   reader1_verify(_cached), on pack.c only
 * Functions return 0 or a negative CKPT_E_* code with ckpt_errmsg() set, unless said. */
#ifndef CKPT_READ_INT_H
#define CKPT_READ_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt.h"
#include "common/ckpt_int.h"
#include "format/codec.h"
#include "format/format.h"
#include "io/engine.h"
#include "read/reader.h"

struct rpipe;
struct ckpt_gpu_ops;

struct pack_fd {
	uint32_t id;
	unsigned dir;
	int fd;     /* -1 after a failed open */
	int err;    /* its error, reported again for every chunk of the pack */
	bool remote; /* fd holds only this checkpoint's records, fetched from the remote (tier) */
	char *where; /* NULL, or the remote object it was sought as (tier): what messages name */
	char *msg;
	/* Direct reads into the destination (rd_direct_plan): file offsets and lengths in multiples
	 * of blk, memory addresses in multiples of mem_align (1 and 1 without O_DIRECT). */
	unsigned blk, mem_align;
	/* Set once the kernel refused a vectored O_DIRECT read of this pack with EINVAL although
	 * statx's alignment allowed it (a file system or stacked device that checks more than it
	 * reports): its later groups take the buffer path. Atomic: the pack cache is shared by the
	 * restore threads. */
	int no_direct;
};

struct reader1 {
	struct ckpt_store *s;
	struct manifest m;
	bool remote_mf;     /* the manifest came from the store's remote */
	char mf_path[4096];
	struct pack_fd **fds;
	size_t nfds;
	ckpt_codec_ctx *codec;
	uint8_t *buf, *scratch;
	size_t buf_cap;
	ckpt_stats st;
	pthread_mutex_t mu; /* pack cache and statistics during restore_all */
	struct io_engine *eng; /* reads go through the same kind of engine as the writes */
	uint32_t *names;    /* open addressing: tensor index + 1 by name hash */
	size_t names_cap;
	struct lease *lease; /* tells gc and prune which packs this reader needs (lease.c) */
	/* CUDA restores: copies are ordered after the work queued on user_stream (NULL: the legacy
	 * default stream) when each restore call starts; gen numbers the calls. */
	void *user_stream;
	uint32_t gen;
	/* restore_all: per device, a library stream ordered after user_stream on the caller's
	 * thread (cudaStreamPerThread names the calling thread's own stream), which the restore
	 * threads' streams join; valid for call ord_gen (under mu), destroyed at close. */
	void *ord[16];
	uint32_t ord_gen;
	struct rres *res;   /* reader1_restore's staging and streams, kept until close */
	uint64_t direct_chunks, buffered_chunks; /* raw chunks read into place, chunks decoded (mu) */
	struct rpipe *pipe; /* reader1_restore's reads in flight (host destinations) */
	/* Group reads submitted and not yet checked, now and at most (atomics): what the pipes keep
	 * in flight at the device (reader_inflight_max). */
	uint64_t inflight, inflight_max, inflight_bytes, inflight_bytes_max;
};

/* What one thread needs to restore: a read buffer, a codec context, and for CUDA destinations a
 * pinned staging buffer and a stream. The reader owns one set for reader1_restore(); each
 * restore_all worker thread has its own. */
/* CUDA groups in flight per restore thread: group i is decoded into ring slot i % RD_RING while
 * the copies of the groups before it run. */
#define RD_RING 3

struct rres {
	uint8_t *buf;           /* buf_cap bytes, 4 KiB aligned */
	ckpt_codec_ctx *codec;
	uint8_t *staging;       /* pinned, buf_cap bytes, for CUDA destinations (read/runs) */
	size_t staging_size;
	struct iovec *iov, *iov_work; /* IOV_MAX each, for direct reads (allocated on first use) */
	void *stream[16];
	uint32_t ordered[16];   /* reader gen for which stream[d] waits on the caller's stream */
	struct ckpt_store *s;   /* whose pinned cache the staging goes back to */
	struct rring {
		uint8_t *buf;   /* pinned, size bytes, from the store's cache */
		size_t size;
		void *mark;     /* after the copy out of buf, until waited for */
	} ring[RD_RING];
	unsigned ring_next;
};

/* One read group to restore: references [j0, j1) of tensor ti (len bytes on disk) into dst. */
struct rjob {
	size_t ti;
	uint64_t j0, j1, len;
	int mem;
	uint8_t *dst;
	bool last;             /* the tensor's last group: counts the tensor */
};

/* ---- pack.c ------------------------------------------------------------------------------- */
/* The open pack id (opened and its header checked on first use; a failed open is kept in its
 * err/msg), or NULL when out of memory. Restore threads call it under r->mu. */
struct pack_fd *rd_pack(struct reader1 *r, uint32_t id);
/* What pack id (p: its entry, may be NULL) is called in messages and damage reports: its file,
 * or the remote object it was read from (or sought as, when the remote lacks it). */
void rd_pack_name(const struct reader1 *r, const struct pack_fd *p, uint32_t id, char *buf,
		  size_t len);
/* Closes and frees the pack cache (reader1_close). */
void rd_packs_close(struct reader1 *r);
int rd_check_record(struct reader1 *r, ckpt_codec_ctx *codec, const uint8_t *rec,
		    const struct mf_chunk *c, uint8_t *out, const char *path);
int rd_read_result(struct reader1 *r, const struct pack_fd *p, uint64_t off, size_t len,
		   ssize_t n);
struct io_req rd_read_req(struct rres *x, const struct pack_fd *p, uint64_t off, size_t len,
			  int iovcnt);
int rd_read_group(struct reader1 *r, struct rres *x, struct pack_fd *p, uint64_t off,
		  size_t len);
/* Prefixes the message with the checkpoint, tensor t and chunk j; returns -1. */
int rd_tensor_error(struct reader1 *r, const struct mf_tensor *t, uint64_t j);
uint64_t rd_group_end(const struct reader1 *r, const struct mf_tensor *t, uint64_t j,
		      uint64_t *len);
/* As rd_group_end, the group cut to end at reference end at the latest (a range's last chunk). */
uint64_t rd_group_end_before(const struct reader1 *r, const struct mf_tensor *t, uint64_t j,
			    uint64_t end, uint64_t *len);
int rd_group_pack(struct reader1 *r, const struct mf_tensor *t, uint64_t j0,
		  const struct mf_chunk *c, struct pack_fd **out);

/* ---- group.c ------------------------------------------------------------------------------ */
int rd_direct_plan(const struct reader1 *r, struct rres *x, const struct pack_fd *p,
		   const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint8_t *dst);
int rd_group_decode(struct reader1 *r, struct rres *x, const struct pack_fd *p,
		    const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint8_t *out);
int rd_group_finish(struct reader1 *r, struct rres *x, struct pack_fd *p,
		    const struct mf_tensor *t, uint64_t j0, uint64_t j1, uint64_t len,
		    uint8_t *dst, int niov, ssize_t n);

/* ---- stage.c ------------------------------------------------------------------------------ */
/* Waits for the CUDA copies rd_restore_group queued through x's ring (every one of them: a
 * restore call returns with its data on the device). Returns 0 or the first copy's error. */
int rd_restore_drain(struct rres *x);
/* Frees what x holds (buf and codec too: clear them first when x does not own them). */
void rres_free(struct rres *x);
/* restore_all, on the caller's thread: for each device d with devs[d], the reader's order
 * stream waits for the caller's stream (reader1_after_stream) now, so that the restore
 * threads follow what the caller queued, also when its stream is cudaStreamPerThread. */
int rd_order_on_caller(struct reader1 *r, const bool *devs);
/* Frees reader1_restore's resources (r->res) and the order streams, not the reader's own
 * buf and codec. */
void reader_res_free(struct reader1 *r);
int rd_restore_group(struct reader1 *r, struct rres *x, const struct mf_tensor *t,
		     uint64_t j0, uint64_t j1, uint64_t len, int mem, uint8_t *dst);
/* For CUDA memory mem through provider g: x's stream of that device and its staging buffer,
 * created on first use, the stream ordered after the caller's once per restore call. */
int rd_restore_prepare(struct reader1 *r, struct rres *x, const struct ckpt_gpu_ops *g,
		       int mem);

/* ---- rpipe.c ------------------------------------------------------------------------------ */
/* A pipe of n slots sharing codec, used by one thread; its CUDA jobs are restored one at a time
 * through sync_x (NULL: the pipe gets host jobs only). Returns NULL when out of memory. */
struct rpipe *rpipe_create(struct reader1 *r, unsigned n, ckpt_codec_ctx *codec,
			   struct rres *sync_x);
void rpipe_free(struct rpipe *pp);
int rpipe_run(struct rpipe *pp, bool (*next)(void *arg, struct rjob *j), void *arg);

/* ---- reader.c ----------------------------------------------------------------------------- */
unsigned rd_restore_slots(const struct reader1 *r);

/* ---- restore.c ---------------------------------------------------------------------------- */
int rd_check_dst(const reader1 *r, size_t i, int mem, const void *dst, uint64_t size);
/* Counts tensor t as restored in the reader's statistics. */
void rd_count_restored(struct reader1 *r, const struct mf_tensor *t);
/* Starts a restore call on the caller's thread: r->res set up (sharing the reader's buffer and
 * codec) and a new call for the CUDA ordering (r->gen). */
int rd_restore_begin(struct reader1 *r);
/* Creates the reader's pipe (r->pipe, host groups on the caller's thread) on first use. */
int rd_reader_pipe(struct reader1 *r);

#endif
