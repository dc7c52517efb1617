/* The library's internal entry points behind the public objects of include/ckpt.h: the
 * one-process save (save1), the one-process reader (reader1), the multi-rank save and reader
 * (dsave, dreader), retention (retain_*) and a store's remote (rstore_*). lib/api/ builds the
 * public API on them; the tests call them directly. */
#ifndef CKPT_INT_H
#define CKPT_INT_H

#include <stdbool.h>

#include "ckpt.h"

/* ---------------------------------------------------------------------------------------------
 * Saving a checkpoint
 * ------------------------------------------------------------------------------------------- */
typedef struct save1 save1;

/* Begins a checkpoint for step (any value but CKPT_STEP_LATEST). Takes the store's writer lock
 * (held while any save of this handle is open or in flight). Several saves may be in flight on
 * one handle: they are processed and committed in the order they were submitted, and a new one
 * waits for pool space (backpressure). Returns 0 and sets *out, or: -CKPT_E_BUSY (another process
 * writes to the store), -CKPT_E_EXISTS (a checkpoint of that step exists, or is being saved, and
 * CKPT_OPT_OVERWRITE is off), -CKPT_E_PERM (read-only store), -CKPT_E_IO, -CKPT_E_NOMEM. */
int save1_begin(ckpt_store *store, uint64_t step, save1 **out);

/* Adds a tensor: name (unique in the checkpoint, 1 to 65535 bytes), dtype, ndim dimensions of
 * shape (ndim 0 is a scalar), in memory mem (CKPT_MEM_HOST, or a CUDA device index when the CUDA
 * provider is loaded) at data, which must hold product(shape) * ckpt_dtype_size(dtype) bytes and
 * stay unchanged until the snapshot is done (save1_wait_snapshot(), or save1_commit()
 * returning). Returns 0, or -CKPT_E_INVAL (bad name, dtype, shape or size, duplicate name),
 * -CKPT_E_UNSUPPORTED (a device memory type this build cannot read), -CKPT_E_STATE, and on
 * failure the tensor is not added. */
int save1_add_tensor(save1 *save, const char *name, ckpt_dtype dtype,
				  unsigned ndim, const uint64_t *shape, int mem, const void *data);

/* Sets metadata key to value (both strings; a key set twice keeps the last value). Returns 0 or
 * -CKPT_E_INVAL (also for the reserved key "ckpt.tags": use save1_add_tag) / -CKPT_E_NOMEM. */
int save1_set_meta(save1 *save, const char *key, const char *value);

/* Tags: labels of a checkpoint, as restic's --tag, that retain_prune_gc() can keep by
 * (keep_tags) and listings show (ckpt_info.tags). A tag is 1 to CKPT_TAG_MAX bytes of printable
 * ASCII other than space and ',' ('!' to '~'); case matters; a checkpoint has at most
 * CKPT_TAGS_MAX. They are stored as the reserved metadata entry "ckpt.tags" (docs/format.md). */


/* Adds tag to the checkpoint (a tag added twice is kept once). Call before submit. Returns 0, or
 * -CKPT_E_INVAL (a tag that breaks the rule, or one more than CKPT_TAGS_MAX; the message says
 * which) / -CKPT_E_STATE (after submit) / -CKPT_E_NOMEM, and then the tags are unchanged. */
int save1_add_tag(save1 *save, const char *tag);
/* Returns 0 when tag follows the rule above, else -CKPT_E_INVAL with a message (ckpt_errmsg) that
 * says what is wrong: for tools that take tags to match (prune's keep_tags checks them too). */


/* Synchronous form: save1_submit() then save1_wait(). Writes the checkpoint's new chunks,
 * makes them durable, then commits the manifest atomically, releases the lock (when no other save
 * of this handle is in flight) and frees save (in every case). Fills *stats when stats is not NULL.
 * Returns 0 when the checkpoint is durable and visible, or a negative CKPT_E_* code (-CKPT_E_IO,
 * -CKPT_E_NOSPC, ...) in which case no checkpoint was made, earlier checkpoints are intact, and
 * the bytes written so far are garbage for retain_gc(). */
int save1_commit(save1 *save, ckpt_stats *stats);

/* Abandons a checkpoint that was not submitted, releasing the lock and freeing save; a submitted
 * one is canceled and waited for (its partial output is removed). Accepts NULL. */
void save1_abort(save1 *save);

/* For CUDA tensors: orders the copies after the work queued on `stream` (a cudaStream_t) before
 * save1_submit(), so that the snapshot sees what the trainer computed. Default: the legacy
 * default stream (NULL). Call before submit. Returns 0 or -CKPT_E_STATE after submit. */
int save1_after_stream(save1 *save, void *stream);

/* Asynchronous form. save1_submit() starts the save in the background and returns at once:
 * the snapshot (copy of every tensor into the pinned pool) runs on the worker threads, then
 * hashing, compression, writing and the commit. After submit, only save1_wait_snapshot(),
 * save1_fence(), save1_poll() and save1_wait() (which frees save) may be called.
 * Returns 0, or -CKPT_E_STATE when already submitted (then nothing changes). */
int save1_submit(save1 *save);

/* Waits until every tensor has been copied: from then on the caller may modify its tensors.
 * Returns 0, or the save's error (it then also comes back from save1_wait()). */
int save1_wait_snapshot(save1 *save);

/* For CUDA tensors: makes the CUDA stream `stream` (a cudaStream_t, NULL for the legacy default
 * stream of each device the save copies from) wait for the snapshot without blocking the calling
 * thread, whatever the state's size against the pool: work queued on stream after this call (the
 * next optimizer step) runs only once every tensor of the save has been copied out (host tensors
 * included), not waiting for hashing, compression or writing of what the pool holds. When the
 * state is larger than the pool, though, the last copies need slabs that only writing frees: the
 * stream then waits until all but about one pool's worth of the state is written (gpu_bench
 * reports it as trainer_stall_seconds, "save_over_pool"); size CKPT_OPT_POOL_SIZE to the state
 * to keep the stall at the copy time. The GPU waits on a flag the library
 * sets then (cuStreamWaitValue32); a save that fails sets it too, so the stream never waits
 * forever. Where stream memory operations are not available (disabled on the device) the fence
 * waits on the calling thread for the snapshot instead, as save1_wait_snapshot() does: a
 * host function holding the stream would park a CUDA callback thread that other streams' host
 * functions may need. Without CUDA
 * tensors it is save1_wait_snapshot(). Call after submit. Returns 0, -CKPT_E_UNSUPPORTED
 * without the CUDA provider, or the save's error. */
int save1_fence(save1 *save, void *stream);

/* Returns 0 while the save is still running, 1 when it finished (successfully or not; the result
 * comes from save1_wait()). */
int save1_poll(const save1 *save);

/* Bytes of the tensors hashed so far by a submitted save (*done), for a progress display; the
 * total is the tensors' size. Call between submit and wait. Returns 0 or -CKPT_E_INVAL. */
int save1_progress(const save1 *save, uint64_t *done);

/* Waits until the checkpoint is durable and visible (or failed), fills *stats when not NULL, and
 * frees save. Returns 0, or the error of the background work, whose message names the step; after
 * an error no checkpoint was made, earlier checkpoints are intact and what was written is removed
 * or left as garbage for gc. */
int save1_wait(save1 *save, ckpt_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * Reading a checkpoint
 * ------------------------------------------------------------------------------------------- */
typedef struct reader1 reader1;

/* Opens the checkpoint of step (or CKPT_STEP_LATEST) for reading; needs no lock and never sees a
 * half-written checkpoint. Returns 0 and sets *out, or -CKPT_E_NOTFOUND, -CKPT_E_CORRUPT,
 * -CKPT_E_CHECKSUM (damaged manifest), -CKPT_E_VERSION, -CKPT_E_IO, -CKPT_E_NOMEM. */
int reader1_open(ckpt_store *store, uint64_t step, reader1 **out);
/* True when the checkpoint's manifest was read from the store's remote (not local, or
 * CKPT_REMOTE_READ): its part files, if any, are the remote's too. */
bool reader1_from_remote(const reader1 *reader);
/* Closes reader; accepts NULL. */
void reader1_close(reader1 *reader);

/* Fills *info with the checkpoint's summary (as ckpt_store_list() would). */
void reader1_info(const reader1 *reader, ckpt_info *info);

/* Returns the number of tensors in the checkpoint. */
size_t reader1_tensor_count(const reader1 *reader);
/* Fills *info for tensor index (0 <= index < count, in the order they were added). Returns 0 or
 * -CKPT_E_INVAL for an index out of range. */
int reader1_tensor(const reader1 *reader, size_t index, ckpt_tensor_info *info);
/* Returns the index of the tensor called name, or -CKPT_E_NOTFOUND. */
long reader1_find(const reader1 *reader, const char *name);

/* Returns the number of metadata entries. */
size_t reader1_meta_count(const reader1 *reader);
/* Sets *key and *value of entry index (valid while the reader is open). Returns 0 or
 * -CKPT_E_INVAL. */
int reader1_meta(const reader1 *reader, size_t index, const char **key,
			      const char **value);
/* Returns the value of metadata key, or NULL when absent. */
const char *reader1_get_meta(const reader1 *reader, const char *key);

/* Restores tensor index into dst (in memory mem: CKPT_MEM_HOST, or a CUDA device index), which must hold exactly
 * size bytes, the tensor's nbytes. Every chunk's digest is checked. Returns 0, or
 * -CKPT_E_INVAL (index or size wrong), -CKPT_E_CHECKSUM / -CKPT_E_CORRUPT (damaged data: the
 * message names the tensor, the chunk and the checkpoint; dst then holds partial data),
 * -CKPT_E_IO, -CKPT_E_UNSUPPORTED. Adds to the reader's statistics. */
int reader1_restore(reader1 *reader, size_t index, int mem, void *dst,
				 uint64_t size);

/* Orders the copies of later restores into CUDA memory after the work queued on stream (a
 * cudaStream_t; NULL, the default: the legacy default stream) when each reader1_restore() or
 * reader1_restore_all() call starts, so that kernels still using a destination (a caching
 * allocator's reuse) finish before it is overwritten. The restore returns once the data is in
 * place. Returns 0 or -CKPT_E_INVAL. */
int reader1_after_stream(reader1 *reader, void *stream);

/* Restores every tensor through a callback that supplies the destination of each:
 * dst_for(index, info, &mem, arg) returns a pointer of info->nbytes bytes in memory *mem (preset
 * to CKPT_MEM_HOST), or NULL to skip that tensor. Reads run in parallel on the worker threads.
 * Returns 0 or the first error as reader1_restore() would. */

int reader1_restore_all(reader1 *reader, ckpt_dst_fn dst_for, void *arg);

/* Restores bytes [offset, offset + size) of tensor index into host memory dst (size bytes),
 * reading and checking only the chunks that hold them: a slice of a tensor (rows a..b of a
 * row-major tensor are bytes a * row_bytes to b * row_bytes). Returns 0, -CKPT_E_INVAL (index or
 * range outside the tensor, NULL dst), or the errors of reader1_restore(). */
int reader1_restore_range(reader1 *reader, size_t index, uint64_t offset,
				       void *dst, uint64_t size);

/* Copies the statistics of the restores made through reader so far into *stats. */
void reader1_stats(const reader1 *reader, ckpt_stats *stats);

/* Called for every damaged chunk (on_damage) and with progress in bytes (on_progress, may be NULL). */

typedef void (*vprogress_fn)(uint64_t done, uint64_t total, void *arg);

/* Reads and re-hashes every chunk of the checkpoint (each distinct chunk once). Returns the number
 * of damaged chunks (0: intact), reporting each through on_damage, or a negative CKPT_E_* code when
 * verification could not run. */
long reader1_verify(reader1 *reader, ckpt_damage_fn on_damage,
				 vprogress_fn on_progress, void *arg);

/* reader1_verify() that reads only the records cache does not know yet and reports the damage
 * it knows for the others, as for each checkpoint's own. cache must only be used with readers of
 * one store. Progress counts the bytes of this checkpoint, read or known. Returns as
 * reader1_verify(). */
long reader1_verify_cached(reader1 *reader, ckpt_verify_cache *cache,
					ckpt_damage_fn on_damage, vprogress_fn on_progress,
					void *arg);

/* Fills *out for chunk j of tensor index (0 <= j < info.chunks). Returns 0 or -CKPT_E_INVAL. */
int reader1_chunk(const reader1 *reader, size_t index, uint64_t j,
			       ckpt_chunk_info *out);

/* Flags of retain_prune() and retain_gc(). */



typedef struct gc_report {
	uint64_t *steps_removed;   /* prune: checkpoints removed (or that would be), ascending */
	size_t n_steps_removed;
	uint64_t packs_removed;
	uint64_t packs_compacted;
	uint64_t manifests_rewritten;
	uint64_t leftovers_removed; /* temporary files of interrupted saves */
	uint64_t bytes_freed;       /* file bytes freed (or that would be) */
	uint64_t bytes_copied;      /* record bytes copied by compaction */
	/* Files in pack directories that are not provably this store's packs (a name other than
	 * the canonical NNNNNNNN.pack, a header naming another store or pack, an unreadable
	 * header, the same pack id twice): never removed nor compacted. */
	uint64_t files_left_alone;
	char *left_alone;           /* the first of them and why (a path and a reason), or NULL */
	/* Packs left in place because an open reader (in any process) may still read them; a later
	 * gc or prune removes them once no reader needs them (readers hold leases, see
	 * docs/format.md). Compacted packs count here too: their records are copied and no
	 * manifest names them any more. */
	uint64_t packs_deferred;
	/* Of leftovers_removed, the part files of multi-rank checkpoints (STORE/parts/<step>/) that
	 * were removed (or would be): of pruned checkpoints and of saves that never committed. */
	uint64_t parts_removed;
	/* Unreferenced packs left in place because a save is in flight (its in-flight marker is
	 * live, CKPT_OPT_GC_GRACE_S): it may reference them when it commits. While one is, gc
	 * removes no unreferenced pack, compacts nothing and removes no leftover; a later gc does. */
	uint64_t packs_spared;
	char *in_flight; /* then the first such save: "process P on host H (save since T)" */
	/* With packs_deferred: the first reader that needs them, "process P on host H (reader of
	 * step S since T)" (a reader's lease of another node counts while it was refreshed less
	 * than CKPT_OPT_GC_GRACE_S ago), or the lease file of a reader that did not record itself
	 * (an older libckpt's); NULL otherwise. */
	char *reader;
} gc_report;

/* Retention: which checkpoints prune keeps. The newest valid checkpoint is always kept. */
typedef struct retain_keep {
	uint64_t keep_last;        /* keep the newest N valid checkpoints (0: only the newest) */
	uint64_t keep_every;       /* also keep every checkpoint whose step is a multiple of K (0: none) */
	const uint64_t *keep_steps;/* also keep these steps */
	size_t n_keep_steps;
} retain_keep;

/* Removes the checkpoints the policy does not keep (their manifests first, durably), then the packs
 * no remaining checkpoint references. Takes the store's writer lock. Damaged manifests are never
 * removed; while one exists, no pack is removed unless CKPT_GC_FORCE. A kill at any point leaves
 * every remaining checkpoint intact. Returns 0 and sets *report (free with gc_report_free; may
 * be NULL), or -CKPT_E_BUSY, -CKPT_E_CORRUPT (damaged manifests without CKPT_GC_FORCE: the message
 * names them; nothing was removed), -CKPT_E_IO, -CKPT_E_PERM. */
int retain_prune(ckpt_store *store, const retain_keep *policy, int flags,
			      gc_report **report);

/* Removes packs no valid checkpoint references and the temporary files of interrupted saves, and
 * compacts packs whose live share is below compact_below (0 to 1; 0 disables): their live records
 * are copied to a new pack, the manifests that name them are rewritten atomically, then the old
 * pack is removed. Takes the store's writer lock. Errors as retain_prune(). */
int retain_gc(ckpt_store *store, double compact_below, int flags,
			   gc_report **report);
void gc_report_free(gc_report *report);

/* How gc chooses the packs it compacts (restic's prune --max-unused, borg compact --threshold).
 * Every pack whose live share is below compact_below is compacted; then, while the garbage left in
 * partly live packs is more than max_unused of the pack bytes left, the pack with the most garbage
 * is compacted too. retain_gc(store, f, ...) is {compact_below = f, max_unused = 1}. Zero the
 * struct before filling it in. */
typedef struct gc_rules {
	double compact_below; /* 0 to 1; 0: no pack by this rule */
	double max_unused;    /* 0 to 1; 1: no limit */
	vprogress_fn on_progress; /* NULL, or called as compaction copies (record bytes) */
	void *progress_arg;
} gc_rules;


/* retain_gc() with a policy (NULL: {0, CKPT_GC_MAX_UNUSED_DEFAULT}). Each manifest is rewritten
 * at most once per run however many of its packs are compacted. Returns as retain_gc(), or
 * -CKPT_E_INVAL for a value outside 0 to 1. */
int retain_gc_with(ckpt_store *store, const gc_rules *gc, int flags,
				gc_report **report);

/* The rules of ckpt_retention (include/ckpt.h says what each keeps), with keep_last,
 * keep_every and keep_steps nested as the retain_keep that retain_prune() takes. */
typedef struct retain_rules {
	retain_keep keep;    /* keep_last, keep_every, keep_steps as retain_prune() */
	int64_t now;               /* unix seconds keep_within counts back from (0: the current time) */
	int64_t keep_within;       /* seconds (0: none) */
	uint64_t keep_hourly, keep_daily, keep_weekly;
	uint64_t keep_monthly, keep_yearly;
	const char *const *keep_tags; /* NULL, or n_keep_tags tags */
	size_t n_keep_tags;
} retain_rules;

/* retain_prune() with time-based rules, then gc (NULL: unreferenced packs only) under the same
 * lock. Returns as retain_prune(). */
int retain_prune_gc(ckpt_store *store, const retain_rules *retention,
				 const gc_rules *gc, int flags, gc_report **report);



/* Removes the checkpoints of the n steps given (valid or damaged manifests), then what gc (NULL:
 * unreferenced packs only) collects, under one lock. Refuses, removing nothing, with -CKPT_E_INVAL
 * when that would remove the newest valid checkpoint (unless CKPT_GC_NEWEST), and -CKPT_E_NOTFOUND
 * for a step without a manifest (the message lists the steps that exist). Otherwise returns as
 * retain_prune(). */
int retain_delete(ckpt_store *store, const uint64_t *steps, size_t n,
			       const gc_rules *gc, int flags, gc_report **report);

typedef struct dsave dsave;

/* Collective: every rank calls it, with the same step. Begins this rank's part of checkpoint
 * step: takes the store's lock shared (ranks do not block each other; prune and gc are
 * excluded), and rank 0 claims the step for this job (STORE/parts/<step>/CLAIM, held until the
 * commit ends) and clears what a dead earlier save of the step left. Then the ranks exchange
 * their outcome through comm: every rank returns the first failing rank's error, and the ranks
 * must agree on the step, the world size and the chunk size of their store handles, all before
 * any data is written. comm is used by commit and must stay valid until then. Returns 0 on every
 * rank, or on every rank: -CKPT_E_INVAL (size 0 or over 1022 ranks, rank out of range: this
 * rank's call only, before any exchange; ranks that disagree), -CKPT_E_EXISTS (the checkpoint
 * exists: a multi-rank checkpoint is never replaced, even with CKPT_OPT_OVERWRITE),
 * -CKPT_E_BUSY (another job is saving this step, the message names its rank 0's pid and host;
 * or a single-process writer, prune or gc holds the store), or an I/O or communicator error. */
int dsave_begin(ckpt_store *store, const ckpt_comm *comm, uint64_t step,
				  dsave **out);

/* Adds this rank's piece of a sharded global tensor: the global tensor has ndim dimensions of
 * global_shape; the local piece is the box at offsets of extent local_shape, row-major at data
 * (product(local_shape) * dtype size bytes; same lifetime rule as save1_add_tensor()). The
 * boxes of all ranks must tile the global tensor exactly (checked at commit). */
int dsave_add_shard(dsave *save, const char *name, ckpt_dtype dtype,
				      unsigned ndim, const uint64_t *global_shape,
				      const uint64_t *offsets, const uint64_t *local_shape, int mem,
				      const void *data);

/* Adds a box of a sharded global tensor that nreplicas ranks hold alike (hybrid sharding, a
 * mesh's replicated dimension): each of them calls this with its own replica index (0 ..
 * nreplicas-1) and the same name, dtype, global_shape, offsets and local_shape, and its copy of
 * the box at data. The box is saved once: each holder copies, hashes and writes about
 * 1/nreplicas of it, the rows [n*replica/nreplicas, n*(replica+1)/nreplicas) of the box's first
 * dimension longer than 1 (n its extent; a holder whose share is empty adds nothing and returns
 * 0; a box of one element or none is saved by replica 0). The checkpoint then holds the box as
 * nreplicas smaller shards, restored like any others. Same rules as dsave_add_shard()
 * otherwise; -CKPT_E_INVAL for replica >= nreplicas. */
int dsave_add_shard_replica(dsave *save, const char *name,
					      ckpt_dtype dtype, unsigned ndim,
					      const uint64_t *global_shape, const uint64_t *offsets,
					      const uint64_t *local_shape, unsigned replica,
					      unsigned nreplicas, int mem, const void *data);

/* Adds this rank's flattened range of global tensor name: elements [offset, offset + count) of
 * the row-major tensor of global_shape (ndim dimensions), count elements contiguous at data, as
 * FSDP1's flat parameters and Megatron's distributed optimizer hold them. The ranks' ranges
 * must tile the tensor exactly, like boxes; a range may mix with boxes of other ranks, and be
 * held by several ranks alike (replica 0 .. nreplicas-1, which split it as
 * dsave_add_shard_replica() splits a box; nreplicas 1: this rank alone). The range is
 * saved as the at most 2 * ndim - 1 boxes it is made of (a run of whole rows between two partial
 * ones), the first as tensor name and the others as name#1, name#2, ... of this rank's part, so
 * the checkpoint is read back, consolidated and resharded as any sharded tensor; one whose
 * range is not a single box is a format version 3 manifest (docs/format.md). count 0 adds
 * nothing. Returns 0, or -CKPT_E_INVAL (a range outside the tensor, bad arguments, a name#k that
 * another tensor of this rank already has: the save should then be aborted, since the pieces
 * before it were added), the errors of save1_add_tensor(). */
int dsave_add_range(dsave *save, const char *name, ckpt_dtype dtype,
				      unsigned ndim, const uint64_t *global_shape,
				      uint64_t offset, uint64_t count, unsigned replica,
				      unsigned nreplicas, int mem, const void *data);

/* Adds a tensor that nreplicas ranks hold whole (replica 0 .. nreplicas-1 of them; each calls
 * this with its own replica index and the same name, dtype and shape). It is saved once: each
 * replica copies, hashes and writes about 1/nreplicas of its chunks. */
int dsave_add_replicated(dsave *save, const char *name,
					   ckpt_dtype dtype, unsigned ndim, const uint64_t *shape,
					   unsigned replica, unsigned nreplicas, int mem,
					   const void *data);

/* Sets metadata of the checkpoint (rank 0's are kept; keys starting "ckpt.dist." are reserved:
 * -CKPT_E_INVAL). Before submit; after a submit with CKPT_SAVE_DEFER also until
 * dsave_release() (an entry of the same key is replaced), then -CKPT_E_STATE. */
int dsave_set_meta(dsave *save, const char *key, const char *value);
/* Adds a tag to the checkpoint, as save1_add_tag() (rank 0's tags are kept). */
int dsave_add_tag(dsave *save, const char *tag);

/* Collective: every rank calls it. Makes this rank's part durable (never over another save's
 * part file: -CKPT_E_EXISTS), gathers every rank's result; rank 0 checks the parts and commits
 * the global manifest (one atomic link that never replaces a manifest: -CKPT_E_EXISTS when one
 * appeared meanwhile) and broadcasts the outcome. Returns 0 on every rank when the checkpoint is
 * visible, or a negative CKPT_E_* code whose message names the failing rank; then no checkpoint
 * was made (unless the failure was in the final broadcast itself) and the parts are garbage
 * for retain_gc(). Fills *stats with this rank's part. Frees save in every case but one:
 * after dsave_submit() it returns -CKPT_E_STATE and leaves save to
 * dsave_wait(). */
int dsave_commit(dsave *save, ckpt_stats *stats);

/* Collective like commit: this rank gives up, and every rank's commit fails naming it. Frees
 * save. Accepts NULL (then it does nothing, and the other ranks' commit fails when the
 * communicator reports this rank gone). After a submit without CKPT_SAVE_THREADED the part is
 * canceled and every rank's wait fails naming this rank; after a threaded submit the collective
 * commit is already under way on the library's thread and one rank cannot take it back: abort
 * waits for it and discards its outcome (the checkpoint may then exist). */
void dsave_abort(dsave *save);

/* For CUDA tensors, as save1_after_stream(): the part's copies follow stream. Call before
 * submit. Returns 0 or -CKPT_E_STATE after submit. */
int dsave_after_stream(dsave *save, void *stream);

/* Asynchronous form of dsave_commit(), with everything a one-process save promises:
 * this rank's part is snapshotted into the store's pinned pool exactly as by save1_submit()
 * (host and CUDA tensors, the streams of dsave_after_stream(), the fence), then hashed,
 * written and made durable in the background; then the ranks commit collectively as in
 * dsave_commit(). With flags CKPT_SAVE_THREADED that collective runs on a library thread
 * as soon as the part is durable; with 0 it runs in dsave_wait(), on the caller's
 * thread. Every rank must then call dsave_wait() (collective), also when submit failed:
 * the other ranks learn of the failure there. After submit only the calls below (and abort) may
 * be made on save. Returns 0, this rank's submit failure, -CKPT_E_STATE (already submitted) or
 * -CKPT_E_INVAL (unknown flags; then nothing was submitted). */
int dsave_submit(dsave *save, unsigned flags);

/* Waits until every tensor of this rank's part is copied: from then on the caller may modify
 * them. Returns 0 or the snapshot's error (it also comes back from dsave_wait()). */
int dsave_wait_snapshot(dsave *save);

/* As save1_fence() for this rank's part: work queued on the CUDA stream after this call runs
 * once the part's snapshot is done, without blocking the calling thread. Returns as
 * save1_fence(). */
int dsave_fence(dsave *save, void *stream);

/* Returns 1 when dsave_wait() would not wait: with CKPT_SAVE_THREADED once the global
 * commit finished (successfully or not); without, once this rank's part finished (the exchange
 * and rank 0's commit are still to come in wait). 0 otherwise, and for a save not submitted. */
int dsave_poll(const dsave *save);
/* Bytes of an unthreaded save's part hashed so far; -CKPT_E_UNSUPPORTED for a threaded one. */
int dsave_progress(const dsave *save, uint64_t *done);

/* After a submit with CKPT_SAVE_DEFER: lets this rank's commit go on. rc 0: the part's outcome
 * goes to the commit as it is; a negative CKPT_E_* code: this rank fails the save with that code
 * and why (NULL: a default text), so every rank's wait fails naming it and no checkpoint is
 * made. Metadata set before the release goes into the global manifest (rank 0's). A deferred save
 * waited for or aborted before its release fails as if released with -CKPT_E_STATE. May be
 * called from any thread, once. Returns 0, -CKPT_E_STATE (not submitted with CKPT_SAVE_DEFER,
 * released already) or -CKPT_E_INVAL (rc > 0). */
int dsave_release(dsave *save, int rc, const char *why);

/* Collective: waits until the global checkpoint is durable and visible, or failed, on every rank
 * alike (as dsave_commit() returns), fills *stats with this rank's part, frees save. */
int dsave_wait(dsave *save, ckpt_stats *stats);

typedef struct dreader dreader;

/* Opens checkpoint step (or CKPT_STEP_LATEST) for restoring boxes of its global tensors; works on
 * single-process checkpoints too (each tensor is one global tensor of one shard). */
int dreader_open(ckpt_store *store, uint64_t step, dreader **out);
void dreader_close(dreader *reader);
/* The checkpoint reader that reader reads through (NULL for NULL): its step and summary
 * (reader1_info), metadata and tensors as saved, and its restores. It belongs to reader:
 * valid until dreader_close(), never closed by the caller. A step opened as
 * CKPT_STEP_LATEST needs no second open (which a prune could race) to learn which it is. */
reader1 *dreader_checkpoint(const dreader *reader);
/* World size of the save (1 for a single-process checkpoint). */
unsigned dreader_world_size(const dreader *reader);
/* Number of global tensors; their description (name, dtype, ndim, global shape, nbytes). */
size_t dreader_tensor_count(const dreader *reader);
int dreader_tensor(const dreader *reader, size_t index,
				     ckpt_tensor_info *info);
/* Index of the global tensor called name, or -CKPT_E_NOTFOUND. */
long dreader_find(const dreader *reader, const char *name);
/* Restores the box at offsets of extent lengths (ndim each) of global tensor index into dst, in
 * memory mem (CKPT_MEM_HOST, or a CUDA device index, as in reader1_restore()).
 * strides NULL: dst is row-major and contiguous, size exactly product(lengths) * dtype size.
 * Else element (i_0, .., i_{n-1}) of the box goes to dst + (i_0 * strides[0] + .. +
 * i_{n-1} * strides[n-1]) * dtype size (strides in elements: a column slice written into its
 * place in a whole matrix), size is the bytes of dst, and elements of dst that no box element
 * maps to are not written.
 * Reads only the stored chunks that the box's rows touch in the shards it overlaps, each once per
 * call however many rows share it, and every chunk read is verified. A row's whole chunks, where
 * the row is contiguous in dst, are read straight into dst (host) or through the pinned staging
 * buffer (CUDA: ordered after the stream given to reader1_after_stream() on
 * dreader_checkpoint(reader)); the rest is copied out of the chunk just read, with no
 * buffer of the box's size. The cost is in chunks: a box of rows narrower than a chunk reads the
 * chunks under all its rows (a 256-column box of a 1024-column f32 matrix reads all of it at
 * 64 KiB chunks). Adds to the statistics of dreader_checkpoint(reader)
 * (reader1_stats(): bytes_read, the bytes read from pack files, their headers included;
 * chunks, the chunks read; logical_bytes, the box's bytes). A CUDA destination with a non-unit
 * innermost stride is copied an element at a time (correct, slow).
 * Returns 0, -CKPT_E_INVAL (box outside the tensor, wrong size, NULL argument, mem out of range
 * or dst not in memory mem), -CKPT_E_UNSUPPORTED (a CUDA mem without the CUDA provider),
 * -CKPT_E_CHECKSUM / -CKPT_E_CORRUPT (damaged data, naming the tensor, chunk and checkpoint; dst
 * then holds partial data), -CKPT_E_IO, -CKPT_E_NOMEM. */
int dreader_restore_box_mem(dreader *reader, size_t index,
					      const uint64_t *offsets, const uint64_t *lengths,
					      int mem, void *dst, const uint64_t *strides,
					      uint64_t size);
/* dreader_restore_box_mem() into contiguous host memory (mem CKPT_MEM_HOST, strides
 * NULL). */
int dreader_restore_box(dreader *reader, size_t index,
					  const uint64_t *offsets, const uint64_t *lengths,
					  void *dst, uint64_t size);
/* dreader_restore_box_mem() into strided host memory (mem CKPT_MEM_HOST; strides must
 * not be NULL). */
int dreader_restore_box_strided(dreader *reader, size_t index,
						  const uint64_t *offsets, const uint64_t *lengths,
						  void *dst, const uint64_t *strides, uint64_t size);

/* Reads elements [offset, offset + count) of global tensor index, in row-major order, into
 * count contiguous elements at dst (size bytes exactly) in memory mem: a flattened range, from
 * whatever split of boxes or ranges saved it. Reads only the chunks under it, as
 * dreader_restore_box_mem() does for each of the at most 2 * ndim - 1 boxes the range
 * is made of. Returns 0, -CKPT_E_INVAL (a range outside the tensor, a size that is not the
 * range's bytes), or the errors of dreader_restore_box_mem(). */
int dreader_restore_range(dreader *reader, size_t index,
					    uint64_t offset, uint64_t count, int mem, void *dst,
					    uint64_t size);

/* Collective over comm (every rank of it calls it, with the same index and root): restores
 * global tensor index whole into contiguous host memory dst (size bytes, the tensor's nbytes)
 * on every rank, reading it from the store (and verifying it) on rank root alone and sending it
 * to the others with comm->broadcast, in pieces of at most 64 MiB. For an entry every rank
 * restores whole (one saved with dsave_add_replicated()), the store is read once per
 * job instead of once per rank; spread the entries' roots over the ranks (entry k on rank
 * k % size) so that the reads run in parallel. Over the job's communicator this is once per
 * job: it pays where reading the store costs more than the broadcast (a shared file system or
 * a remote tier read by many nodes); over a communicator of one node's ranks (MPI:
 * MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), once per node. Returns 0 on every rank, or on every
 * rank: root's error (the message names root; -CKPT_E_CHECKSUM for a damaged chunk, and then
 * no rank's dst is written), -CKPT_E_INVAL (a rank's index, size or root is wrong: that rank's
 * message says which, the others' name it), or a communicator error (-CKPT_E_IO). */
int dreader_restore_shared(dreader *reader, const ckpt_comm *comm,
					     size_t index, int root, void *dst, uint64_t size);

/* Number of shards of global tensor index (1 for a replicated tensor and for every tensor of a
 * single-process checkpoint), or -CKPT_E_INVAL for an index out of range. */
long dreader_shard_count(const dreader *reader, size_t index);
/* Fills *out for shard j of global tensor index, in the order of the checkpoint's shard table;
 * its pointers stay valid while reader is open. Returns 0 or -CKPT_E_INVAL (index or j out of
 * range). */
int dreader_shard(const dreader *reader, size_t index, size_t j,
				    ckpt_shard *out);
/* Returns 1 when global tensor index was saved replicated (dsave_add_replicated()), 0
 * when it was not (sharded, or a single-process checkpoint's tensor), or -CKPT_E_INVAL. */
int dreader_replicated(const dreader *reader, size_t index);
/* Checks every part file of a multi-rank checkpoint (STORE/parts/<step>/<rank>.part) against the
 * size and checksum its global manifest records, and that it decodes as a manifest of this store
 * and step. The chunks are not read here (reader1_verify() on the same step reads every chunk
 * of every part: the global manifest references them all). Each missing or damaged part is
 * reported to on_damage (may be NULL) with tensor NULL, file the part's path, error a CKPT_E_*
 * code and a message naming the rank. Returns the number of damaged parts (0 for a
 * single-process checkpoint), or a negative CKPT_E_* code. */
long dreader_verify_parts(dreader *reader, ckpt_damage_fn on_damage,
					    void *arg);

/* Sets the remote of the handle (url NULL: none; a previous remote's uploads in flight are
 * canceled, to resume later from what that remote holds). Opening checks that the remote
 * answers. With a remote set, reader1_open() (and dreader_open()) of a checkpoint
 * that is not local reads it from the remote without pulling it: its manifest is fetched, and
 * from each pack that is not local only the records the checkpoint references, by range reads
 * (adjacent records merged, several at once), each checked against its digest before use (a
 * damaged remote object fails the restore naming it), into an anonymous temporary file (in the
 * store directory, else $TMPDIR) that reader1_close() releases; nothing is added to the
 * store (rstore_pull() does that). A local checkpoint missing a pack reads that pack so too. Call it while no save of the handle is in flight. ckpt_store_close() cancels the
 * uploads in flight the same way (call rstore_wait_uploaded() first to finish them).
 * Returns 0, or -CKPT_E_INVAL (a malformed url or unknown scheme, naming the known ones),
 * -CKPT_E_NOTFOUND (no such directory or bucket), -CKPT_E_PERM, -CKPT_E_IO, -CKPT_E_NOMEM. */
int rstore_set(ckpt_store *store, const char *url, unsigned flags);
/* The url of the handle's remote, or NULL; valid until the remote is changed or the store closed. */
const char *rstore_url(const ckpt_store *store);
/* The store's id on a remote (32 lowercase hex digits and a NUL) into id. */

/* Uploads checkpoint step (or CKPT_STEP_LATEST) to the handle's remote, on the caller's thread:
 * the packs it references that the remote lacks (each checked by size once put), a multi-rank
 * checkpoint's part files, then its manifest. A pack already on the remote is not sent again
 * (stats->packs_present); one there under the same id with other contents is never replaced
 * (-CKPT_E_CORRUPT naming it). stats and progress may be NULL. Returns 0 (also when the remote had
 * it whole), -CKPT_E_STATE (no remote set), -CKPT_E_NOTFOUND (no such local checkpoint, or a pack
 * of it missing locally), -CKPT_E_NOSPC (remote full), -CKPT_E_CANCELED, or the remote's error;
 * the message names the object and the cause. After a failure the remote lists no part of it. */
int rstore_push(ckpt_store *store, uint64_t step, ckpt_remote_stats *stats,
			     ckpt_progress_fn progress, void *arg);
/* Brings checkpoint step (or CKPT_STEP_LATEST: the remote's newest whose manifest is intact, as
 * ckpt_store_resolve() chooses locally; a newer damaged one is listed by rstore_list()
 * with include_invalid, and *pulled tells which step came) of the handle's remote into
 * the local store: the packs it needs that are missing locally (each record it references checked
 * against its digest, its padding and the pack's record walk as verify checks them, before the
 * pack is linked into place, never over a file), its part files (each checked against the
 * global manifest's record of it), then its manifest last; under the store's writer lock. A local
 * pack of an id it needs counts as present only once the records it names there check out.
 * *pulled (may be NULL) gets the step. Returns 0 (also when it was local already), -CKPT_E_STATE
 * (no remote), -CKPT_E_NOTFOUND (not on the remote), -CKPT_E_CHECKSUM / -CKPT_E_CORRUPT (a damaged
 * remote object, or a pack or part it names missing there, named; nothing of it is kept; or a
 * local pack of an id it needs that is another pack: two writers of the store id used the same
 * pack ids), -CKPT_E_BUSY, or an I/O error. */
int rstore_pull(ckpt_store *store, uint64_t step, uint64_t *pulled,
			     ckpt_remote_stats *stats, ckpt_progress_fn progress, void *arg);
/* Returns the upload state of checkpoint step (CKPT_UPLOAD_*), or -CKPT_E_STATE (no remote),
 * -CKPT_E_NOTFOUND (neither local nor on the remote), or the remote's error. */
int rstore_upload_state(ckpt_store *store, uint64_t step);
/* Waits until checkpoint step is on the remote (CKPT_STEP_LATEST: until the background upload
 * has nothing queued), at most timeout_ms (negative: no limit). On a rank other than 0 of a
 * multi-rank checkpoint: until its own share is up, then (for a step) until rank 0 has put the
 * manifest, polling the remote; LATEST waits for its own shares only. Returns 0; the error of its last
 * failed upload attempt; -CKPT_E_BUSY (still uploading at the deadline); -CKPT_E_STATE (no
 * remote, or a local checkpoint that is not queued: no CKPT_REMOTE_UPLOAD). */
int rstore_wait_uploaded(ckpt_store *store, uint64_t step, int64_t timeout_ms);
/* The steps of the checkpoints on the handle's remote, ascending, into *steps (free() it).
 * Returns the count, or -CKPT_E_STATE (no remote) or the remote's error. */
long rstore_steps(ckpt_store *store, uint64_t **steps);
/* ckpt_store_list() of the checkpoints on the handle's remote (their manifests fetched and
 * decoded; an invalid one listed with info.error when include_invalid). Free with
 * ckpt_info_free(). Returns the count, or -CKPT_E_STATE (no remote) or the remote's error. */
int rstore_list(ckpt_store *store, int include_invalid, ckpt_info **out);

/* What a remote prune or gc did (or, with CKPT_GC_DRY_RUN, would do). */
typedef struct rgc_report {
	uint64_t manifests_removed; /* prune: checkpoints removed from the remote */
	uint64_t packs_removed, bytes_freed; /* gc: packs no remote manifest references */
	uint64_t parts_removed;     /* part files of steps without a manifest */
	uint64_t packs_spared;      /* unreferenced packs left because an upload is in flight */
	uint64_t uploads_in_flight; /* live upload markers seen (pushes of this store running) */
	/* Leftovers of puts killed longer than the grace age ago: a directory remote's temporary
	 * files (their bytes), an S3 server's incomplete multipart uploads (bytes unknown: 0). */
	uint64_t leftovers_removed, leftover_bytes;
} rgc_report;

/* Removes from the handle's remote the checkpoints of this store that policy does not keep (as
 * retain_prune() chooses them, among the remote's; a damaged remote manifest is never
 * removed), manifests first, then runs rstore_gc() unless flags has CKPT_GC_DRY_RUN
 * (then it only reports). Local checkpoints are not touched. As retain_prune(), nothing is
 * removed while a remote manifest of this store is damaged unless CKPT_GC_FORCE: -CKPT_E_CORRUPT,
 * the message naming the damaged keys. Returns 0 and fills *report (may be NULL), or
 * -CKPT_E_STATE (no remote), -CKPT_E_CORRUPT or an error of rstore_gc(). */
int rstore_prune(ckpt_store *store, const retain_keep *policy, int flags,
				     rgc_report *report);
/* rstore_prune() with every rule of retain_prune_gc() (the same struct and the
 * same choice: times are the commit times the remote manifests record, retention->now the clock;
 * tags; the newest valid remote checkpoint always stays; a damaged remote manifest is never
 * removed), then rstore_gc() unless CKPT_GC_DRY_RUN. removed (may be NULL) gets a
 * malloc'd array (free() it) of the report->manifests_removed steps removed, ascending (dry run:
 * that would be). Refuses a damaged remote manifest as rstore_prune() does. Returns 0,
 * -CKPT_E_INVAL (NULL retention, a negative keep_within, a bad tag), -CKPT_E_STATE (no remote),
 * -CKPT_E_CORRUPT or an error of rstore_gc(). */
int rstore_prune_gc(ckpt_store *store, const retain_rules *retention,
					int flags, rgc_report *report, uint64_t **removed);
/* Removes this store's objects on the remote that no remote manifest references (packs, part
 * files of steps without a manifest, dead upload and gc markers, the leftovers of puts killed
 * longer than CKPT_OPT_GC_GRACE_S ago). Only keys under this store's id are
 * listed or deleted: another store sharing the remote is never touched. Nothing is removed while
 * a remote manifest of this store is damaged (-CKPT_E_CORRUPT naming the count; CKPT_GC_FORCE
 * proceeds), and no pack while an upload of this store is in flight (a live marker: any push,
 * background or not, from any process; one left by a killed push is dead after
 * CKPT_OPT_GC_GRACE_S): those packs are counted as spared. flags: CKPT_GC_DRY_RUN,
 * CKPT_GC_FORCE. Returns 0 and fills *report (may be NULL), or -CKPT_E_STATE, -CKPT_E_CORRUPT,
 * or the remote's error. */
int rstore_gc(ckpt_store *store, int flags, rgc_report *report);

/* What retain_prune_gc() with retention would keep, and by which rule, changing nothing and
 * taking no lock: one entry per checkpoint (damaged ones too), ascending by step, into *out
 * (free() it). A save or prune that runs meanwhile may make the real choice differ. Returns the
 * count, or -CKPT_E_INVAL (as retain_prune_gc()), -CKPT_E_NOMEM or an I/O error. */
long retain_prune_explain(ckpt_store *store, const retain_rules *retention,
				       ckpt_prune_choice **out);
#endif
