/*
 * libckpt — incremental, content-addressed, crash-safe checkpoints for training state.
 *
 * A *store* is a directory. A *checkpoint* is the set of named tensors (and string metadata) saved
 * for one training step. Tensors are split into fixed-size chunks; every chunk is identified by the
 * XXH3-128 digest of its bytes, and a chunk the store already holds is referenced, not written
 * again, so a checkpoint that changes 1 tensor out of 100 writes only that tensor's changed chunks.
 * A checkpoint becomes visible only when its manifest is durably committed (written to a temporary
 * name, fsynced, renamed, directory fsynced): a killed or failed save never damages an earlier one.
 * Restore re-hashes every chunk; a mismatch is an error, never silently wrong data.
 *
 * Conventions
 * - Functions that can fail return 0 (or a non-negative count) on success and a negative CKPT_E_*
 *   code on failure. ckpt_strerror() names the code; ckpt_errmsg() gives the detailed message of
 *   the calling thread's last failure (it names the file and what is wrong).
 * - Objects are opaque; each open or create function has a matching close or free that accepts
 *   NULL.
 * - Strings are NUL-terminated UTF-8; sizes are in bytes.
 * - A store handle may be used by one thread at a time; distinct handles are independent.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CKPT_BUILDING_LIB)
#define CKPT_API __attribute__((visibility("default")))
#else
#define CKPT_API
#endif

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 1
#define CKPT_VERSION_PATCH 0
#define CKPT_VERSION_NUMBER (CKPT_VERSION_MAJOR * 10000 + CKPT_VERSION_MINOR * 100 + CKPT_VERSION_PATCH)

/* Returns the library's version as "MAJOR.MINOR.PATCH" (of the loaded library, not the header). */
CKPT_API const char *ckpt_version(void);

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */
enum {
	CKPT_OK = 0,
	CKPT_E_IO = 1,          /* a read, write, fsync or rename failed (errno in the message) */
	CKPT_E_NOMEM = 2,       /* out of memory */
	CKPT_E_INVAL = 3,       /* invalid argument */
	CKPT_E_CORRUPT = 4,     /* an on-disk structure is malformed (magic, length, offset) */
	CKPT_E_CHECKSUM = 5,    /* a checksum or chunk digest does not match its data */
	CKPT_E_VERSION = 6,     /* the on-disk format version is not supported */
	CKPT_E_UNSUPPORTED = 7, /* the operation or memory type is not supported here */
	CKPT_E_BUSY = 8,        /* another writer holds the store's lock */
	CKPT_E_NOSPC = 9,       /* no space left on the device */
	CKPT_E_NOTFOUND = 10,   /* no such store, checkpoint, tensor or key */
	CKPT_E_EXISTS = 11,     /* a checkpoint for that step already exists */
	CKPT_E_STATE = 12,      /* the call is not valid in the object's current state */
	CKPT_E_PERM = 13,       /* permission denied */
	CKPT_E_CANCELED = 14,   /* the operation was aborted */
	CKPT_E__COUNT
};

/* Returns a static, human-readable name for a CKPT_E_* code (negative or positive). */
CKPT_API const char *ckpt_strerror(int err);

/* Returns the detailed message of the calling thread's most recent failure ("" if none). The
 * string stays valid until the thread's next failing libckpt call. */
CKPT_API const char *ckpt_errmsg(void);

/* ---------------------------------------------------------------------------------------------
 * Data types (the safetensors set)
 * ------------------------------------------------------------------------------------------- */
typedef enum ckpt_dtype {
	CKPT_DTYPE_BOOL = 1,
	CKPT_DTYPE_U8 = 2,
	CKPT_DTYPE_I8 = 3,
	CKPT_DTYPE_F8_E5M2 = 4,
	CKPT_DTYPE_F8_E4M3 = 5,
	CKPT_DTYPE_I16 = 6,
	CKPT_DTYPE_U16 = 7,
	CKPT_DTYPE_F16 = 8,
	CKPT_DTYPE_BF16 = 9,
	CKPT_DTYPE_I32 = 10,
	CKPT_DTYPE_U32 = 11,
	CKPT_DTYPE_F32 = 12,
	CKPT_DTYPE_F64 = 13,
	CKPT_DTYPE_I64 = 14,
	CKPT_DTYPE_U64 = 15,
} ckpt_dtype;

/* Returns the size in bytes of one element of dtype, or 0 for an unknown dtype. */
CKPT_API size_t ckpt_dtype_size(ckpt_dtype dtype);
/* Returns the safetensors name of dtype ("BF16", "F32", ...), or NULL for an unknown dtype. */
CKPT_API const char *ckpt_dtype_name(ckpt_dtype dtype);
/* Parses a safetensors dtype name (case-sensitive). Returns the dtype, or 0 if unknown. */
CKPT_API ckpt_dtype ckpt_dtype_from_name(const char *name);

/* Largest number of dimensions a tensor may have. */
#define CKPT_MAX_DIMS 32

/* Memory a tensor lives in: CKPT_MEM_HOST, or the index (>= 0) of a CUDA device. */
#define CKPT_MEM_HOST (-1)

/* Returns 1 when tensors in memory mem can be saved and restored here: always for CKPT_MEM_HOST;
 * for CUDA device N when the CUDA module (libckpt-cuda.so.0) loads and device N exists. Returns 0
 * otherwise; ckpt_errmsg() is not changed. The module is looked for beside libckpt.so, then on the
 * library search path; the environment variable CKPT_CUDA_MODULE=PATH loads that file instead,
 * CKPT_CUDA_MODULE=none never loads one. The module uses the CUDA runtime already loaded in the
 * process, else libcudart.so.13, else libcudart.so.12; CKPT_CUDART=FILE names another. */
CKPT_API int ckpt_mem_supported(int mem);

/* ---------------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_options ckpt_options;

typedef enum ckpt_option {
	/* 1 to create the store if it does not exist (default 0: opening a missing store fails with
	 * CKPT_E_NOTFOUND). */
	CKPT_OPT_CREATE = 1,
	/* Chunk size in bytes for new checkpoints, a power of two from 64 KiB to 64 MiB. Default: the
	 * store's (set when it was created), 1 MiB for a new store. */
	CKPT_OPT_CHUNK_SIZE = 2,
	/* Compression of new chunks: CKPT_COMPRESS_NONE or CKPT_COMPRESS_ZSTD. Default: the store's. */
	CKPT_OPT_COMPRESS = 3,
	/* zstd level, 1 to 19 (default 1). */
	CKPT_OPT_ZSTD_LEVEL = 4,
	/* 1 to open read-only: no lock, no writes; for inspecting a store while a save runs.
	 * Readers still create their lease (STORE/leases/, see docs/format.md) where they can, so
	 * that gc and prune do not remove what they read; they read without one where the store
	 * is not writable. */
	CKPT_OPT_READ_ONLY = 5,
	/* Use O_DIRECT for pack I/O: 1 (default, falls back to buffered I/O when the file system refuses
	 * it), 0 never. */
	CKPT_OPT_DIRECT_IO = 6,
	/* Size in bytes of one write to a pack file (default 8 MiB, multiple of 4 KiB). */
	CKPT_OPT_IO_SIZE = 7,
	/* 1 to allow replacing an existing checkpoint of the same step (default 0: CKPT_E_EXISTS). */
	CKPT_OPT_OVERWRITE = 8,
	/* Size in bytes after which a save starts a new pack file (default 1 GiB, at least 1 MiB).
	 * Smaller packs let gc reclaim space at a finer grain. */
	CKPT_OPT_PACK_SIZE = 9,
	/* Worker threads for copying, hashing, compression and restore (default: online cores,
	 * 1 to 256). */
	CKPT_OPT_THREADS = 10,
	/* Bytes of pinned host memory for staging (default 256 MiB; rounded down to whole I/O-size
	 * buffers, at least 2). Allocated as asked, on first use, and kept for the next saves. When the
	 * state is larger than the pool, saves stream through it: the snapshot then lasts until all
	 * but the last pool's worth is written. */
	CKPT_OPT_POOL_SIZE = 11,
	/* Writes in flight per data directory (default 8, 1 to 256). A restore keeps at least this
	 * many reads in flight, and at least 128 MiB of them. */
	CKPT_OPT_QUEUE_DEPTH = 12,
	/* I/O engine: CKPT_ENGINE_AUTO (io_uring when the kernel allows it, else psync),
	 * CKPT_ENGINE_IO_URING (fail if unavailable) or CKPT_ENGINE_PSYNC (a thread pool). With
	 * CKPT_ENGINE_AUTO, the environment variable CKPT_IO_ENGINE=psync or =io_uring chooses
	 * instead (for a process whose seccomp profile or kernel restricts io_uring). */
	CKPT_OPT_IO_ENGINE = 13,
	/* Milliseconds a save, prune, delete or gc waits for the store's writer lock while another
	 * writer holds it (default 0: refused at once with -CKPT_E_BUSY), 0 to
	 * CKPT_MAX_LOCK_WAIT_MS. A store has one writer at a time (one process, or the ranks of
	 * one multi-rank save); a second one waits this long, then gets -CKPT_E_BUSY. */
	CKPT_OPT_LOCK_WAIT_MS = 14,
	/* Seconds after its last refresh that gc, prune and delete of this handle take the
	 * in-flight marker of a save on another node for alive (default 21600, six hours; 0 to
	 * CKPT_MAX_GC_GRACE_S). Every save keeps a marker (STORE/writers/, docs/format.md)
	 * refreshed every minute; while a live one exists gc removes no pack and no leftover (the
	 * report says so). A marker of this node is judged by its lock, at once; another node's
	 * only by its age, since flock may be local to each node (see "Shared file systems" in
	 * docs/format.md). 0: every other node's marker counts as dead (a job known to be gone).
	 * The same age applies to the leases of readers on another node (STORE/leases/, also
	 * refreshed every minute): while fresh they keep the packs their checkpoint needs. */
	CKPT_OPT_GC_GRACE_S = 15,
	/* Transfers in flight at once for a push or pull of this handle's remote (packs in
	 * parallel; ckpt_store_set_remote), 1 to 64 (default 4). */
	CKPT_OPT_REMOTE_PARALLEL = 16,
	/* Bytes per second the uploads to this handle's remote may take, summed over its threads,
	 * so that they do not starve training traffic (default 0: no cap). */
	CKPT_OPT_REMOTE_BANDWIDTH = 17,
} ckpt_option;

#define CKPT_MAX_LOCK_WAIT_MS (24ll * 3600 * 1000)
#define CKPT_MAX_GC_GRACE_S (30ll * 24 * 3600)

enum { CKPT_COMPRESS_NONE = 0, CKPT_COMPRESS_ZSTD = 1 };
enum { CKPT_ENGINE_AUTO = 0, CKPT_ENGINE_IO_URING = 1, CKPT_ENGINE_PSYNC = 2 };

/* Returns a new options object with every option at its default, or NULL when out of memory.
 * The defaults of CKPT_OPT_QUEUE_DEPTH and CKPT_OPT_IO_SIZE come from the file $CKPT_CONFIG (or
 * /etc/libckpt.conf) when it exists: lines "io_queue_depth = N" and "io_size_bytes = N", as
 * `nvmetune bench` writes them. */
CKPT_API ckpt_options *ckpt_options_create(void);
/* Frees opts; accepts NULL. */
CKPT_API void ckpt_options_free(ckpt_options *opts);
/* Sets one option. Returns 0, or -CKPT_E_INVAL for an unknown option or a value out of range
 * (opts is then unchanged). */
CKPT_API int ckpt_options_set(ckpt_options *opts, ckpt_option opt, int64_t value);

/* Adds a data directory (one per NVMe mount): new packs are striped across the store directory
 * and every data directory, one I/O queue each. The list is recorded in the store when it is
 * created or first opened with it, and read from there afterwards. Returns 0, -CKPT_E_INVAL (empty
 * path, more than 64 directories) or -CKPT_E_NOMEM. */
CKPT_API int ckpt_options_add_data_dir(ckpt_options *opts, const char *dir);

/* ---------------------------------------------------------------------------------------------
 * Store
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_store ckpt_store;

/* Opens the store in directory path (creating it when CKPT_OPT_CREATE is set), with opts (NULL for
 * the defaults). Returns 0 and sets *out, or a negative CKPT_E_* code and sets *out to NULL:
 * -CKPT_E_NOTFOUND (no store there), -CKPT_E_CORRUPT / -CKPT_E_VERSION (bad store header),
 * -CKPT_E_IO, -CKPT_E_PERM, -CKPT_E_INVAL. Opening does not take the writer lock: a save, prune or
 * gc takes it for its duration and fails with -CKPT_E_BUSY when another process holds it (after
 * waiting CKPT_OPT_LOCK_WAIT_MS for it). The holder records itself in STORE/LOCK (pid, host, what
 * it does, since when), so that the busy message names it: "store S is busy: process 123 on host
 * h (save since 2026-12-02T01:02:03Z) is writing to it (lock S/LOCK)"; a holder that left no
 * current record (another tool, an older libckpt) is named by pid alone, and the message says
 * so. A read-only handle never writes the record. */
CKPT_API int ckpt_store_open(const char *path, const ckpt_options *opts, ckpt_store **out);

/* Returns why the store's mount may not keep its writer lock across nodes, or NULL: at open, the
 * mount holding the store directory is looked up in /proc/self/mountinfo, and NFS mounted with
 * local_lock=flock, local_lock=all or nolock, or Lustre with localflock, has flocks local to
 * each node (the lock then excludes no writer of another node; gc and prune rely on the
 * in-flight markers, see CKPT_OPT_GC_GRACE_S). The message names the mount and the option;
 * valid until the store is closed. The open itself succeeds. */
CKPT_API const char *ckpt_store_warning(const ckpt_store *store);

/* Closes the store; accepts NULL. Saves submitted on it are waited for (their checkpoints
 * commit, or fail, as they would have); saves begun but not submitted are aborted. Save handles of
 * the store are invalid afterwards. */
CKPT_API void ckpt_store_close(ckpt_store *store);

/* Allocates and pins the staging pool (and starts the save threads) now, so that the first save
 * does not pay for it: pool_bytes, or CKPT_OPT_POOL_SIZE when 0 (rounded as that option is); a
 * state-sized pool keeps the snapshot at memory speed. The pool then serves every save of the
 * handle. A pool at least that large already there is kept; a smaller one is replaced. Returns 0,
 * or -CKPT_E_BUSY (a smaller pool and a save in flight), -CKPT_E_PERM (read-only store),
 * -CKPT_E_INVAL (under 1 MiB), -CKPT_E_NOMEM. */
CKPT_API int ckpt_store_reserve(ckpt_store *store, uint64_t pool_bytes);

/* Returns the store's directory as given to ckpt_store_open. */
CKPT_API const char *ckpt_store_path(const ckpt_store *store);

/* Information about one checkpoint, as listed. */
typedef struct ckpt_info {
	uint64_t step;
	int64_t time;           /* commit time, unix seconds */
	uint64_t tensors;       /* number of tensors */
	uint64_t logical_bytes; /* sum of tensor sizes */
	uint64_t new_bytes;     /* bytes this checkpoint added to the store on disk */
	uint64_t stored_bytes;  /* on-disk bytes of every chunk it references (shared ones included) */
	uint64_t chunks;        /* distinct chunks it references */
	uint64_t new_chunks;    /* chunks it wrote */
	int error;              /* 0, or the CKPT_E_* code for which its manifest is invalid */
	const char *tags;       /* its tags joined by ',' in the order added ("" when none); valid
				 * until ckpt_info_free(), or while the reader of ckpt_reader_info()
				 * is open */
} ckpt_info;

/* Lists the checkpoints of the store in ascending step order. Invalid manifests (damaged or
 * truncated) are listed too, with info.error set, when include_invalid is nonzero; a checkpoint
 * exists only if its manifest is valid. Returns the count and sets *out to an array to be freed
 * with ckpt_info_free(), or a negative CKPT_E_* code. */
CKPT_API int ckpt_store_list(ckpt_store *store, int include_invalid, ckpt_info **out);
/* Frees an array returned by ckpt_store_list(); accepts NULL. */
CKPT_API void ckpt_info_free(ckpt_info *list);

/* The step that means "the newest valid checkpoint" wherever a step is taken. */
#define CKPT_STEP_LATEST UINT64_MAX

/* Resolves step (a number or CKPT_STEP_LATEST) to an existing checkpoint's step. Returns 0 and
 * sets *out, or -CKPT_E_NOTFOUND. */
CKPT_API int ckpt_store_resolve(ckpt_store *store, uint64_t step, uint64_t *out);

/* ---------------------------------------------------------------------------------------------
 * Statistics of one save or restore
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_stats {
	uint64_t step;
	uint64_t tensors;
	uint64_t logical_bytes;  /* bytes of tensor data saved or restored */
	uint64_t chunks;         /* chunk references */
	uint64_t chunks_new;     /* chunks written by this save */
	uint64_t chunks_reused;  /* chunks found in the store (or earlier in this save) */
	uint64_t bytes_hashed;
	uint64_t bytes_stored;   /* payload bytes of new chunks after compression */
	uint64_t bytes_written;  /* bytes written to pack files, with headers and alignment */
	uint64_t bytes_read;     /* restore: bytes read from pack files */
	double seconds;          /* wall time of the whole operation */
	double snapshot_seconds; /* time the caller's tensors were needed */
	double persist_seconds;  /* time from snapshot done to durable */
	double wait_seconds;     /* snapshot time spent waiting for pool space (backpressure) */
	uint64_t pool_bytes;     /* size of the pinned staging pool */
	uint64_t pool_peak;      /* most pool bytes in use at once during this operation */
	uint32_t threads;        /* worker threads */
	uint32_t data_dirs;      /* directories packs were striped over */
	int direct_io;           /* 1 if O_DIRECT was used, 0 if buffered I/O + fdatasync */
	char engine[16];         /* I/O engine that ran ("io_uring", "psync") */
	char gpu[16];            /* GPU provider ("host" when no CUDA device was involved, "cuda") */
} ckpt_stats;

/* ---------------------------------------------------------------------------------------------
 * Saving a checkpoint
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_save ckpt_save;

/* Begins a checkpoint for step (any value but CKPT_STEP_LATEST). Takes the store's writer lock
 * (held while any save of this handle is open or in flight). Several saves may be in flight on
 * one handle: they are processed and committed in the order they were submitted, and a new one
 * waits for pool space (backpressure). Returns 0 and sets *out, or: -CKPT_E_BUSY (another process
 * writes to the store), -CKPT_E_EXISTS (a checkpoint of that step exists, or is being saved, and
 * CKPT_OPT_OVERWRITE is off), -CKPT_E_PERM (read-only store), -CKPT_E_IO, -CKPT_E_NOMEM. */
CKPT_API int ckpt_save_begin(ckpt_store *store, uint64_t step, ckpt_save **out);

/* Adds a tensor: name (unique in the checkpoint, 1 to 65535 bytes), dtype, ndim dimensions of
 * shape (ndim 0 is a scalar), in memory mem (CKPT_MEM_HOST, or a CUDA device index when the CUDA
 * provider is loaded) at data, which must hold product(shape) * ckpt_dtype_size(dtype) bytes and
 * stay unchanged until the snapshot is done (ckpt_save_wait_snapshot(), or ckpt_save_commit()
 * returning). Returns 0, or -CKPT_E_INVAL (bad name, dtype, shape or size, duplicate name),
 * -CKPT_E_UNSUPPORTED (a device memory type this build cannot read), -CKPT_E_STATE, and on
 * failure the tensor is not added. */
CKPT_API int ckpt_save_add_tensor(ckpt_save *save, const char *name, ckpt_dtype dtype,
				  unsigned ndim, const uint64_t *shape, int mem, const void *data);

/* Sets metadata key to value (both strings; a key set twice keeps the last value). Returns 0 or
 * -CKPT_E_INVAL (also for the reserved key "ckpt.tags": use ckpt_save_add_tag) / -CKPT_E_NOMEM. */
CKPT_API int ckpt_save_set_meta(ckpt_save *save, const char *key, const char *value);

/* Tags: labels of a checkpoint, as restic's --tag, that ckpt_store_prune_gc() can keep by
 * (keep_tags) and listings show (ckpt_info.tags). A tag is 1 to CKPT_TAG_MAX bytes of printable
 * ASCII other than space and ',' ('!' to '~'); case matters; a checkpoint has at most
 * CKPT_TAGS_MAX. They are stored as the reserved metadata entry "ckpt.tags" (docs/format.md). */
#define CKPT_TAG_MAX 64
#define CKPT_TAGS_MAX 32
/* Adds tag to the checkpoint (a tag added twice is kept once). Call before submit. Returns 0, or
 * -CKPT_E_INVAL (a tag that breaks the rule, or one more than CKPT_TAGS_MAX; the message says
 * which) / -CKPT_E_STATE (after submit) / -CKPT_E_NOMEM, and then the tags are unchanged. */
CKPT_API int ckpt_save_add_tag(ckpt_save *save, const char *tag);
/* Returns 0 when tag follows the rule above, else -CKPT_E_INVAL with a message (ckpt_errmsg) that
 * says what is wrong: for tools that take tags to match (prune's keep_tags checks them too). */
CKPT_API int ckpt_tag_check(const char *tag);

/* Synchronous form: ckpt_save_submit() then ckpt_save_wait(). Writes the checkpoint's new chunks,
 * makes them durable, then commits the manifest atomically, releases the lock (when no other save
 * of this handle is in flight) and frees save (in every case). Fills *stats when stats is not NULL.
 * Returns 0 when the checkpoint is durable and visible, or a negative CKPT_E_* code (-CKPT_E_IO,
 * -CKPT_E_NOSPC, ...) in which case no checkpoint was made, earlier checkpoints are intact, and
 * the bytes written so far are garbage for ckpt_store_gc(). */
CKPT_API int ckpt_save_commit(ckpt_save *save, ckpt_stats *stats);

/* Abandons a checkpoint that was not submitted, releasing the lock and freeing save; a submitted
 * one is canceled and waited for (its partial output is removed). Accepts NULL. */
CKPT_API void ckpt_save_abort(ckpt_save *save);

/* For CUDA tensors: orders the copies after the work queued on `stream` (a cudaStream_t) before
 * ckpt_save_submit(), so that the snapshot sees what the trainer computed. Default: the legacy
 * default stream (NULL). Call before submit. Returns 0 or -CKPT_E_STATE after submit. */
CKPT_API int ckpt_save_after_stream(ckpt_save *save, void *stream);

/* Asynchronous form. ckpt_save_submit() starts the save in the background and returns at once:
 * the snapshot (copy of every tensor into the pinned pool) runs on the worker threads, then
 * hashing, compression, writing and the commit. After submit, only ckpt_save_wait_snapshot(),
 * ckpt_save_fence(), ckpt_save_poll() and ckpt_save_wait() (which frees save) may be called.
 * Returns 0, or -CKPT_E_STATE when already submitted (then nothing changes). */
CKPT_API int ckpt_save_submit(ckpt_save *save);

/* Waits until every tensor has been copied: from then on the caller may modify its tensors.
 * Returns 0, or the save's error (it then also comes back from ckpt_save_wait()). */
CKPT_API int ckpt_save_wait_snapshot(ckpt_save *save);

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
 * waits on the calling thread for the snapshot instead, as ckpt_save_wait_snapshot() does: a
 * host function holding the stream would park a CUDA callback thread that other streams' host
 * functions may need. Without CUDA
 * tensors it is ckpt_save_wait_snapshot(). Call after submit. Returns 0, -CKPT_E_UNSUPPORTED
 * without the CUDA provider, or the save's error. */
CKPT_API int ckpt_save_fence(ckpt_save *save, void *stream);

/* Returns 0 while the save is still running, 1 when it finished (successfully or not; the result
 * comes from ckpt_save_wait()). */
CKPT_API int ckpt_save_poll(const ckpt_save *save);

/* Bytes of the tensors hashed so far by a submitted save (*done), for a progress display; the
 * total is the tensors' size. Call between submit and wait. Returns 0 or -CKPT_E_INVAL. */
CKPT_API int ckpt_save_progress(const ckpt_save *save, uint64_t *done);

/* Waits until the checkpoint is durable and visible (or failed), fills *stats when not NULL, and
 * frees save. Returns 0, or the error of the background work, whose message names the step; after
 * an error no checkpoint was made, earlier checkpoints are intact and what was written is removed
 * or left as garbage for gc. */
CKPT_API int ckpt_save_wait(ckpt_save *save, ckpt_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * Reading a checkpoint
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_reader ckpt_reader;

/* Opens the checkpoint of step (or CKPT_STEP_LATEST) for reading; needs no lock and never sees a
 * half-written checkpoint. Returns 0 and sets *out, or -CKPT_E_NOTFOUND, -CKPT_E_CORRUPT,
 * -CKPT_E_CHECKSUM (damaged manifest), -CKPT_E_VERSION, -CKPT_E_IO, -CKPT_E_NOMEM. */
CKPT_API int ckpt_reader_open(ckpt_store *store, uint64_t step, ckpt_reader **out);
/* Closes reader; accepts NULL. */
CKPT_API void ckpt_reader_close(ckpt_reader *reader);

/* Fills *info with the checkpoint's summary (as ckpt_store_list() would). */
CKPT_API void ckpt_reader_info(const ckpt_reader *reader, ckpt_info *info);

/* Description of one tensor of a checkpoint; pointers stay valid while the reader is open. */
typedef struct ckpt_tensor_info {
	const char *name;
	ckpt_dtype dtype;
	unsigned ndim;
	const uint64_t *shape;
	uint64_t nbytes;
	uint64_t chunks;      /* chunk references */
	uint64_t chunks_new;  /* of them, chunks written by this checkpoint */
	uint64_t bytes_new;   /* on-disk bytes of those new chunks */
} ckpt_tensor_info;

/* Returns the number of tensors in the checkpoint. */
CKPT_API size_t ckpt_reader_tensor_count(const ckpt_reader *reader);
/* Fills *info for tensor index (0 <= index < count, in the order they were added). Returns 0 or
 * -CKPT_E_INVAL for an index out of range. */
CKPT_API int ckpt_reader_tensor(const ckpt_reader *reader, size_t index, ckpt_tensor_info *info);
/* Returns the index of the tensor called name, or -CKPT_E_NOTFOUND. */
CKPT_API long ckpt_reader_find(const ckpt_reader *reader, const char *name);

/* Returns the number of metadata entries. */
CKPT_API size_t ckpt_reader_meta_count(const ckpt_reader *reader);
/* Sets *key and *value of entry index (valid while the reader is open). Returns 0 or
 * -CKPT_E_INVAL. */
CKPT_API int ckpt_reader_meta(const ckpt_reader *reader, size_t index, const char **key,
			      const char **value);
/* Returns the value of metadata key, or NULL when absent. */
CKPT_API const char *ckpt_reader_get_meta(const ckpt_reader *reader, const char *key);

/* Restores tensor index into dst (in memory mem: CKPT_MEM_HOST, or a CUDA device index), which must hold exactly
 * size bytes, the tensor's nbytes. Every chunk's digest is checked. Returns 0, or
 * -CKPT_E_INVAL (index or size wrong), -CKPT_E_CHECKSUM / -CKPT_E_CORRUPT (damaged data: the
 * message names the tensor, the chunk and the checkpoint; dst then holds partial data),
 * -CKPT_E_IO, -CKPT_E_UNSUPPORTED. Adds to the reader's statistics. */
CKPT_API int ckpt_reader_restore(ckpt_reader *reader, size_t index, int mem, void *dst,
				 uint64_t size);

/* Host destinations placed so that raw (uncompressed) chunks are read straight into them, with no
 * copy out of a read buffer (the digest is then checked in place): with O_DIRECT, chunk k of a
 * tensor goes in place when (dst + k * chunk_size - payload offset in its pack file) is a multiple
 * of the device's direct-I/O memory alignment (statx STATX_DIOALIGN: 4 on most NVMe drives, 512
 * or 4096 on others). Payloads start CKPT_RESTORE_DIRECT_OFFSET bytes after a 4 KiB boundary of
 * the file, so a destination at CKPT_RESTORE_DIRECT_OFFSET bytes past a 4 KiB boundary always
 * qualifies. Others are restored too, through the read buffer; so are compressed chunks and CUDA
 * destinations. Without O_DIRECT every host destination qualifies. */
#define CKPT_RESTORE_DIRECT_ALIGN 4096
#define CKPT_RESTORE_DIRECT_OFFSET 64

/* Orders the copies of later restores into CUDA memory after the work queued on stream (a
 * cudaStream_t; NULL, the default: the legacy default stream) when each ckpt_reader_restore() or
 * ckpt_reader_restore_all() call starts, so that kernels still using a destination (a caching
 * allocator's reuse) finish before it is overwritten. The restore returns once the data is in
 * place. Returns 0 or -CKPT_E_INVAL. */
CKPT_API int ckpt_reader_after_stream(ckpt_reader *reader, void *stream);

/* Restores every tensor through a callback that supplies the destination of each:
 * dst_for(index, info, &mem, arg) returns a pointer of info->nbytes bytes in memory *mem (preset
 * to CKPT_MEM_HOST), or NULL to skip that tensor. Reads run in parallel on the worker threads.
 * Returns 0 or the first error as ckpt_reader_restore() would. */
typedef void *(*ckpt_dst_fn)(size_t index, const ckpt_tensor_info *info, int *mem, void *arg);
CKPT_API int ckpt_reader_restore_all(ckpt_reader *reader, ckpt_dst_fn dst_for, void *arg);

/* Restores bytes [offset, offset + size) of tensor index into host memory dst (size bytes),
 * reading and checking only the chunks that hold them: a slice of a tensor (rows a..b of a
 * row-major tensor are bytes a * row_bytes to b * row_bytes). Returns 0, -CKPT_E_INVAL (index or
 * range outside the tensor, NULL dst), or the errors of ckpt_reader_restore(). */
CKPT_API int ckpt_reader_restore_range(ckpt_reader *reader, size_t index, uint64_t offset,
				       void *dst, uint64_t size);

/* Copies the statistics of the restores made through reader so far into *stats. */
CKPT_API void ckpt_reader_stats(const ckpt_reader *reader, ckpt_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * Verification
 * ------------------------------------------------------------------------------------------- */
/* One problem found by ckpt_reader_verify(). */
typedef struct ckpt_damage {
	uint64_t step;
	const char *tensor;   /* tensor name, or NULL for a damaged manifest */
	uint64_t chunk;       /* chunk index within the tensor */
	uint64_t offset;      /* byte offset of the chunk within the tensor */
	const char *file;     /* the file that holds the damage; for a pack read through the
			       * store's remote, the remote object (URL/KEY, docs/format.md) */
	int error;            /* CKPT_E_CHECKSUM, CKPT_E_CORRUPT, CKPT_E_IO */
	const char *message;
} ckpt_damage;

/* Called for every damaged chunk (on_damage) and with progress in bytes (on_progress, may be NULL). */
typedef void (*ckpt_damage_fn)(const ckpt_damage *damage, void *arg);
typedef void (*ckpt_progress_fn)(uint64_t done, uint64_t total, void *arg);

/* Reads and re-hashes every chunk of the checkpoint (each distinct chunk once). Returns the number
 * of damaged chunks (0: intact), reporting each through on_damage, or a negative CKPT_E_* code when
 * verification could not run. */
CKPT_API long ckpt_reader_verify(ckpt_reader *reader, ckpt_damage_fn on_damage,
				 ckpt_progress_fn on_progress, void *arg);

/* What verification learned about each chunk record, kept across the checkpoints of one store so
 * that a record several checkpoints share is read and hashed once (restic check --read-data).
 * create returns NULL when out of memory; free accepts NULL. */
typedef struct ckpt_verify_cache ckpt_verify_cache;
CKPT_API ckpt_verify_cache *ckpt_verify_cache_create(void);
CKPT_API void ckpt_verify_cache_free(ckpt_verify_cache *cache);
/* Bytes read from packs and records read through the cache so far. */
CKPT_API uint64_t ckpt_verify_cache_bytes_read(const ckpt_verify_cache *cache);
CKPT_API uint64_t ckpt_verify_cache_records(const ckpt_verify_cache *cache);

/* ckpt_reader_verify() that reads only the records cache does not know yet and reports the damage
 * it knows for the others, as for each checkpoint's own. cache must only be used with readers of
 * one store. Progress counts the bytes of this checkpoint, read or known. Returns as
 * ckpt_reader_verify(). */
CKPT_API long ckpt_reader_verify_cached(ckpt_reader *reader, ckpt_verify_cache *cache,
					ckpt_damage_fn on_damage, ckpt_progress_fn on_progress,
					void *arg);


/* ---------------------------------------------------------------------------------------------
 * Inspection of chunks
 * ------------------------------------------------------------------------------------------- */
/* Where one chunk of a tensor lives. */
typedef struct ckpt_chunk_info {
	uint8_t digest[16];     /* XXH3-128 of the raw bytes */
	uint32_t pack_id;
	uint64_t offset;        /* of its record in the pack */
	uint32_t raw_bytes;
	uint32_t stored_bytes;  /* payload after compression */
	uint64_t disk_bytes;    /* the record's span on disk (header and padding included) */
	int codec;              /* 0 raw, 1 zstd, 2 and 3 byte-grouped zstd */
	int is_new;             /* written by this checkpoint */
} ckpt_chunk_info;

/* Fills *out for chunk j of tensor index (0 <= j < info.chunks). Returns 0 or -CKPT_E_INVAL. */
CKPT_API int ckpt_reader_chunk(const ckpt_reader *reader, size_t index, uint64_t j,
			       ckpt_chunk_info *out);

/* ---------------------------------------------------------------------------------------------
 * Space accounting, retention and garbage collection
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_du_entry {
	uint64_t step;
	uint64_t referenced_bytes; /* disk bytes of every distinct chunk it references */
	uint64_t exclusive_bytes;  /* of them, chunks no other checkpoint references */
	uint64_t shared_bytes;     /* chunks other checkpoints reference too */
} ckpt_du_entry;

typedef struct ckpt_du {
	size_t n;                  /* valid checkpoints, ascending steps */
	ckpt_du_entry *entries;
	size_t invalid_manifests;  /* damaged manifests (their chunks count as live: unknown) */
	uint64_t packs;            /* pack files */
	uint64_t pack_bytes;       /* their total size */
	uint64_t live_bytes;       /* pack bytes some valid checkpoint references (with pack headers) */
	uint64_t garbage_bytes;    /* reclaimable: unreferenced packs, dead records, leftovers */
	uint64_t unreferenced_pack_bytes; /* of it, whole packs no checkpoint references */
	uint64_t dead_record_bytes;/* of it, records inside live packs (reclaimed by compaction) */
	uint64_t leftover_bytes;   /* of it, temporary files of interrupted saves */
	uint64_t manifest_bytes;   /* size of the valid manifests */
	uint64_t parts;            /* part files of the valid multi-rank checkpoints (their parts/) */
	uint64_t part_bytes;       /* their size (in none of the above) */
} ckpt_du;

/* Computes space per checkpoint and garbage. Needs no lock. Returns 0 and sets *out (free with
 * ckpt_du_free), or a negative CKPT_E_* code. */
CKPT_API int ckpt_store_du(ckpt_store *store, ckpt_du **out);
CKPT_API void ckpt_du_free(ckpt_du *du);

/* Flags of ckpt_store_prune() and ckpt_store_gc(). */
#define CKPT_GC_DRY_RUN 1 /* report what would be done, change nothing */
#define CKPT_GC_FORCE 2   /* proceed although some manifests are damaged (their chunks may go) */

typedef struct ckpt_gc_report {
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
} ckpt_gc_report;

/* Retention: which checkpoints prune keeps. The newest valid checkpoint is always kept. */
typedef struct ckpt_prune_policy {
	uint64_t keep_last;        /* keep the newest N valid checkpoints (0: only the newest) */
	uint64_t keep_every;       /* also keep every checkpoint whose step is a multiple of K (0: none) */
	const uint64_t *keep_steps;/* also keep these steps */
	size_t n_keep_steps;
} ckpt_prune_policy;

/* Removes the checkpoints the policy does not keep (their manifests first, durably), then the packs
 * no remaining checkpoint references. Takes the store's writer lock. Damaged manifests are never
 * removed; while one exists, no pack is removed unless CKPT_GC_FORCE. A kill at any point leaves
 * every remaining checkpoint intact. Returns 0 and sets *report (free with ckpt_gc_report_free; may
 * be NULL), or -CKPT_E_BUSY, -CKPT_E_CORRUPT (damaged manifests without CKPT_GC_FORCE: the message
 * names them; nothing was removed), -CKPT_E_IO, -CKPT_E_PERM. */
CKPT_API int ckpt_store_prune(ckpt_store *store, const ckpt_prune_policy *policy, int flags,
			      ckpt_gc_report **report);

/* Removes packs no valid checkpoint references and the temporary files of interrupted saves, and
 * compacts packs whose live share is below compact_below (0 to 1; 0 disables): their live records
 * are copied to a new pack, the manifests that name them are rewritten atomically, then the old
 * pack is removed. Takes the store's writer lock. Errors as ckpt_store_prune(). */
CKPT_API int ckpt_store_gc(ckpt_store *store, double compact_below, int flags,
			   ckpt_gc_report **report);
CKPT_API void ckpt_gc_report_free(ckpt_gc_report *report);

/* How gc chooses the packs it compacts (restic's prune --max-unused, borg compact --threshold).
 * Every pack whose live share is below compact_below is compacted; then, while the garbage left in
 * partly live packs is more than max_unused of the pack bytes left, the pack with the most garbage
 * is compacted too. ckpt_store_gc(store, f, ...) is {compact_below = f, max_unused = 1}. Zero the
 * struct before filling it in. */
typedef struct ckpt_gc_policy {
	double compact_below; /* 0 to 1; 0: no pack by this rule */
	double max_unused;    /* 0 to 1; 1: no limit */
	ckpt_progress_fn on_progress; /* NULL, or called as compaction copies (record bytes) */
	void *progress_arg;
} ckpt_gc_policy;
#define CKPT_GC_MAX_UNUSED_DEFAULT 0.10 /* what ckptctl gc uses unless told otherwise */

/* ckpt_store_gc() with a policy (NULL: {0, CKPT_GC_MAX_UNUSED_DEFAULT}). Each manifest is rewritten
 * at most once per run however many of its packs are compacted. Returns as ckpt_store_gc(), or
 * -CKPT_E_INVAL for a value outside 0 to 1. */
CKPT_API int ckpt_store_gc_with(ckpt_store *store, const ckpt_gc_policy *gc, int flags,
				ckpt_gc_report **report);

/* Time-based retention on top of ckpt_prune_policy, with borg prune's semantics: keep_within keeps
 * every checkpoint saved less than that many seconds before now; keep_hourly/daily/weekly/monthly/
 * yearly keep the newest checkpoint of each of the last N hours, days, ISO weeks, calendar months
 * and years (UTC) that have one, counting back from the newest checkpoint (a period without a
 * checkpoint does not count, nor one whose newest checkpoint an earlier rule keeps; when fewer
 * periods exist, the oldest checkpoint is kept too). The rules apply in that order, after
 * keep_last, and their union is kept. Periods come from the commit time recorded in each manifest.
 * keep_tags keeps every checkpoint that has one of the n_keep_tags tags, whatever the other rules
 * say (restic's --keep-tag). */
typedef struct ckpt_retention {
	ckpt_prune_policy keep;    /* keep_last, keep_every, keep_steps as ckpt_store_prune() */
	int64_t now;               /* unix seconds keep_within counts back from (0: the current time) */
	int64_t keep_within;       /* seconds (0: none) */
	uint64_t keep_hourly, keep_daily, keep_weekly;
	uint64_t keep_monthly, keep_yearly;
	const char *const *keep_tags; /* NULL, or n_keep_tags tags */
	size_t n_keep_tags;
} ckpt_retention;

/* ckpt_store_prune() with time-based rules, then gc (NULL: unreferenced packs only) under the same
 * lock. Returns as ckpt_store_prune(). */
CKPT_API int ckpt_store_prune_gc(ckpt_store *store, const ckpt_retention *retention,
				 const ckpt_gc_policy *gc, int flags, ckpt_gc_report **report);

#define CKPT_GC_NEWEST 4 /* ckpt_store_delete(): the newest valid checkpoint may go too */

/* Removes the checkpoints of the n steps given (valid or damaged manifests), then what gc (NULL:
 * unreferenced packs only) collects, under one lock. Refuses, removing nothing, with -CKPT_E_INVAL
 * when that would remove the newest valid checkpoint (unless CKPT_GC_NEWEST), and -CKPT_E_NOTFOUND
 * for a step without a manifest (the message lists the steps that exist). Otherwise returns as
 * ckpt_store_prune(). */
CKPT_API int ckpt_store_delete(ckpt_store *store, const uint64_t *steps, size_t n,
			       const ckpt_gc_policy *gc, int flags, ckpt_gc_report **report);

/* ---------------------------------------------------------------------------------------------
 * Multi-rank checkpoints: N processes, one atomic global checkpoint (docs/format.md, version 2)
 *
 * Every rank opens the store (its own handle, one process each) and saves its part; rank 0
 * commits the global manifest after every part is durable. Coordination goes through the
 * caller's communicator (MPI: include/ckpt_mpi.h), never our own.
 * ------------------------------------------------------------------------------------------- */

/* The collectives the library needs, filled by the caller. Each returns 0 or a negative
 * CKPT_E_* code; a failed or dead rank must make every rank's call return an error (not wait
 * forever), with ckpt_errmsg()-style text in the communicator's own message naming the rank
 * when it is known (errbuf below). */
typedef struct ckpt_comm {
	int rank, size;
	void *ctx;
	/* Gathers len bytes from every rank into out (size * len bytes, in rank order). */
	int (*allgather)(void *ctx, const void *in, size_t len, void *out);
	/* Sends len bytes of buf from root to every rank. */
	int (*broadcast)(void *ctx, void *buf, size_t len, int root);
	int (*barrier)(void *ctx);
	/* Optional: the text of the communicator's last failure (names the rank), or NULL. */
	const char *(*errmsg)(void *ctx);
} ckpt_comm;

typedef struct ckpt_dist_save ckpt_dist_save;

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
CKPT_API int ckpt_dist_save_begin(ckpt_store *store, const ckpt_comm *comm, uint64_t step,
				  ckpt_dist_save **out);

/* Adds this rank's piece of a sharded global tensor: the global tensor has ndim dimensions of
 * global_shape; the local piece is the box at offsets of extent local_shape, row-major at data
 * (product(local_shape) * dtype size bytes; same lifetime rule as ckpt_save_add_tensor()). The
 * boxes of all ranks must tile the global tensor exactly (checked at commit). */
CKPT_API int ckpt_dist_save_add_shard(ckpt_dist_save *save, const char *name, ckpt_dtype dtype,
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
 * nreplicas smaller shards, restored like any others. Same rules as ckpt_dist_save_add_shard()
 * otherwise; -CKPT_E_INVAL for replica >= nreplicas. */
CKPT_API int ckpt_dist_save_add_shard_replica(ckpt_dist_save *save, const char *name,
					      ckpt_dtype dtype, unsigned ndim,
					      const uint64_t *global_shape, const uint64_t *offsets,
					      const uint64_t *local_shape, unsigned replica,
					      unsigned nreplicas, int mem, const void *data);

/* Adds this rank's flattened range of global tensor name: elements [offset, offset + count) of
 * the row-major tensor of global_shape (ndim dimensions), count elements contiguous at data, as
 * FSDP1's flat parameters and Megatron's distributed optimizer hold them. The ranks' ranges
 * must tile the tensor exactly, like boxes; a range may mix with boxes of other ranks, and be
 * held by several ranks alike (replica 0 .. nreplicas-1, which split it as
 * ckpt_dist_save_add_shard_replica() splits a box; nreplicas 1: this rank alone). The range is
 * saved as the at most 2 * ndim - 1 boxes it is made of (a run of whole rows between two partial
 * ones), the first as tensor name and the others as name#1, name#2, ... of this rank's part, so
 * the checkpoint is read back, consolidated and resharded as any sharded tensor; one whose
 * range is not a single box is a format version 3 manifest (docs/format.md). count 0 adds
 * nothing. Returns 0, or -CKPT_E_INVAL (a range outside the tensor, bad arguments, a name#k that
 * another tensor of this rank already has: the save should then be aborted, since the pieces
 * before it were added), the errors of ckpt_save_add_tensor(). */
CKPT_API int ckpt_dist_save_add_range(ckpt_dist_save *save, const char *name, ckpt_dtype dtype,
				      unsigned ndim, const uint64_t *global_shape,
				      uint64_t offset, uint64_t count, unsigned replica,
				      unsigned nreplicas, int mem, const void *data);

/* Adds a tensor that nreplicas ranks hold whole (replica 0 .. nreplicas-1 of them; each calls
 * this with its own replica index and the same name, dtype and shape). It is saved once: each
 * replica copies, hashes and writes about 1/nreplicas of its chunks. */
CKPT_API int ckpt_dist_save_add_replicated(ckpt_dist_save *save, const char *name,
					   ckpt_dtype dtype, unsigned ndim, const uint64_t *shape,
					   unsigned replica, unsigned nreplicas, int mem,
					   const void *data);

/* Sets metadata of the checkpoint (rank 0's are kept; keys starting "ckpt.dist." are reserved:
 * -CKPT_E_INVAL). Before submit; after a submit with CKPT_DIST_DEFER also until
 * ckpt_dist_save_release() (an entry of the same key is replaced), then -CKPT_E_STATE. */
CKPT_API int ckpt_dist_save_set_meta(ckpt_dist_save *save, const char *key, const char *value);
/* Adds a tag to the checkpoint, as ckpt_save_add_tag() (rank 0's tags are kept). */
CKPT_API int ckpt_dist_save_add_tag(ckpt_dist_save *save, const char *tag);

/* Collective: every rank calls it. Makes this rank's part durable (never over another save's
 * part file: -CKPT_E_EXISTS), gathers every rank's result; rank 0 checks the parts and commits
 * the global manifest (one atomic link that never replaces a manifest: -CKPT_E_EXISTS when one
 * appeared meanwhile) and broadcasts the outcome. Returns 0 on every rank when the checkpoint is
 * visible, or a negative CKPT_E_* code whose message names the failing rank; then no checkpoint
 * was made (unless the failure was in the final broadcast itself) and the parts are garbage
 * for ckpt_store_gc(). Fills *stats with this rank's part. Frees save in every case but one:
 * after ckpt_dist_save_submit() it returns -CKPT_E_STATE and leaves save to
 * ckpt_dist_save_wait(). */
CKPT_API int ckpt_dist_save_commit(ckpt_dist_save *save, ckpt_stats *stats);

/* Collective like commit: this rank gives up, and every rank's commit fails naming it. Frees
 * save. Accepts NULL (then it does nothing, and the other ranks' commit fails when the
 * communicator reports this rank gone). After a submit without CKPT_DIST_THREADED the part is
 * canceled and every rank's wait fails naming this rank; after a threaded submit the collective
 * commit is already under way on the library's thread and one rank cannot take it back: abort
 * waits for it and discards its outcome (the checkpoint may then exist). */
CKPT_API void ckpt_dist_save_abort(ckpt_dist_save *save);

/* Submit flag: the communicator's collectives may be called from a thread of the library while
 * the caller's threads go on (MPI initialized with MPI_THREAD_MULTIPLE, a communicator or group
 * that only libckpt uses, the Python binding's own gloo group). */
#define CKPT_DIST_THREADED 1u
/* Submit flag, with CKPT_DIST_THREADED only (else -CKPT_E_INVAL): once this rank's part is
 * durable, the library's thread waits for ckpt_dist_save_release() before the collective commit,
 * so that the caller can decide late whether the checkpoint is made, and what metadata it holds
 * (a framework whose own protocol finishes after the data is written, as DCP's finish() does). */
#define CKPT_DIST_DEFER 2u

/* For CUDA tensors, as ckpt_save_after_stream(): the part's copies follow stream. Call before
 * submit. Returns 0 or -CKPT_E_STATE after submit. */
CKPT_API int ckpt_dist_save_after_stream(ckpt_dist_save *save, void *stream);

/* Asynchronous form of ckpt_dist_save_commit(), with everything a one-process save promises:
 * this rank's part is snapshotted into the store's pinned pool exactly as by ckpt_save_submit()
 * (host and CUDA tensors, the streams of ckpt_dist_save_after_stream(), the fence), then hashed,
 * written and made durable in the background; then the ranks commit collectively as in
 * ckpt_dist_save_commit(). With flags CKPT_DIST_THREADED that collective runs on a library thread
 * as soon as the part is durable; with 0 it runs in ckpt_dist_save_wait(), on the caller's
 * thread. Every rank must then call ckpt_dist_save_wait() (collective), also when submit failed:
 * the other ranks learn of the failure there. After submit only the calls below (and abort) may
 * be made on save. Returns 0, this rank's submit failure, -CKPT_E_STATE (already submitted) or
 * -CKPT_E_INVAL (unknown flags; then nothing was submitted). */
CKPT_API int ckpt_dist_save_submit(ckpt_dist_save *save, unsigned flags);

/* Waits until every tensor of this rank's part is copied: from then on the caller may modify
 * them. Returns 0 or the snapshot's error (it also comes back from ckpt_dist_save_wait()). */
CKPT_API int ckpt_dist_save_wait_snapshot(ckpt_dist_save *save);

/* As ckpt_save_fence() for this rank's part: work queued on the CUDA stream after this call runs
 * once the part's snapshot is done, without blocking the calling thread. Returns as
 * ckpt_save_fence(). */
CKPT_API int ckpt_dist_save_fence(ckpt_dist_save *save, void *stream);

/* Returns 1 when ckpt_dist_save_wait() would not wait: with CKPT_DIST_THREADED once the global
 * commit finished (successfully or not); without, once this rank's part finished (the exchange
 * and rank 0's commit are still to come in wait). 0 otherwise, and for a save not submitted. */
CKPT_API int ckpt_dist_save_poll(const ckpt_dist_save *save);

/* After a submit with CKPT_DIST_DEFER: lets this rank's commit go on. rc 0: the part's outcome
 * goes to the commit as it is; a negative CKPT_E_* code: this rank fails the save with that code
 * and why (NULL: a default text), so every rank's wait fails naming it and no checkpoint is
 * made. Metadata set before the release goes into the global manifest (rank 0's). A deferred save
 * waited for or aborted before its release fails as if released with -CKPT_E_STATE. May be
 * called from any thread, once. Returns 0, -CKPT_E_STATE (not submitted with CKPT_DIST_DEFER,
 * released already) or -CKPT_E_INVAL (rc > 0). */
CKPT_API int ckpt_dist_save_release(ckpt_dist_save *save, int rc, const char *why);

/* Collective: waits until the global checkpoint is durable and visible, or failed, on every rank
 * alike (as ckpt_dist_save_commit() returns), fills *stats with this rank's part, frees save. */
CKPT_API int ckpt_dist_save_wait(ckpt_dist_save *save, ckpt_stats *stats);

typedef struct ckpt_dist_reader ckpt_dist_reader;

/* Opens checkpoint step (or CKPT_STEP_LATEST) for restoring boxes of its global tensors; works on
 * single-process checkpoints too (each tensor is one global tensor of one shard). */
CKPT_API int ckpt_dist_reader_open(ckpt_store *store, uint64_t step, ckpt_dist_reader **out);
CKPT_API void ckpt_dist_reader_close(ckpt_dist_reader *reader);
/* The checkpoint reader that reader reads through (NULL for NULL): its step and summary
 * (ckpt_reader_info), metadata and tensors as saved, and its restores. It belongs to reader:
 * valid until ckpt_dist_reader_close(), never closed by the caller. A step opened as
 * CKPT_STEP_LATEST needs no second open (which a prune could race) to learn which it is. */
CKPT_API ckpt_reader *ckpt_dist_reader_checkpoint(const ckpt_dist_reader *reader);
/* World size of the save (1 for a single-process checkpoint). */
CKPT_API unsigned ckpt_dist_reader_world_size(const ckpt_dist_reader *reader);
/* Number of global tensors; their description (name, dtype, ndim, global shape, nbytes). */
CKPT_API size_t ckpt_dist_reader_tensor_count(const ckpt_dist_reader *reader);
CKPT_API int ckpt_dist_reader_tensor(const ckpt_dist_reader *reader, size_t index,
				     ckpt_tensor_info *info);
/* Index of the global tensor called name, or -CKPT_E_NOTFOUND. */
CKPT_API long ckpt_dist_reader_find(const ckpt_dist_reader *reader, const char *name);
/* Restores the box at offsets of extent lengths (ndim each) of global tensor index into dst, in
 * memory mem (CKPT_MEM_HOST, or a CUDA device index, as in ckpt_reader_restore()).
 * strides NULL: dst is row-major and contiguous, size exactly product(lengths) * dtype size.
 * Else element (i_0, .., i_{n-1}) of the box goes to dst + (i_0 * strides[0] + .. +
 * i_{n-1} * strides[n-1]) * dtype size (strides in elements: a column slice written into its
 * place in a whole matrix), size is the bytes of dst, and elements of dst that no box element
 * maps to are not written.
 * Reads only the stored chunks that the box's rows touch in the shards it overlaps, each once per
 * call however many rows share it, and every chunk read is verified. A row's whole chunks, where
 * the row is contiguous in dst, are read straight into dst (host) or through the pinned staging
 * buffer (CUDA: ordered after the stream given to ckpt_reader_after_stream() on
 * ckpt_dist_reader_checkpoint(reader)); the rest is copied out of the chunk just read, with no
 * buffer of the box's size. The cost is in chunks: a box of rows narrower than a chunk reads the
 * chunks under all its rows (a 256-column box of a 1024-column f32 matrix reads all of it at
 * 64 KiB chunks). Adds to the statistics of ckpt_dist_reader_checkpoint(reader)
 * (ckpt_reader_stats(): bytes_read, the bytes read from pack files, their headers included;
 * chunks, the chunks read; logical_bytes, the box's bytes). A CUDA destination with a non-unit
 * innermost stride is copied an element at a time (correct, slow).
 * Returns 0, -CKPT_E_INVAL (box outside the tensor, wrong size, NULL argument, mem out of range
 * or dst not in memory mem), -CKPT_E_UNSUPPORTED (a CUDA mem without the CUDA provider),
 * -CKPT_E_CHECKSUM / -CKPT_E_CORRUPT (damaged data, naming the tensor, chunk and checkpoint; dst
 * then holds partial data), -CKPT_E_IO, -CKPT_E_NOMEM. */
CKPT_API int ckpt_dist_reader_restore_box_mem(ckpt_dist_reader *reader, size_t index,
					      const uint64_t *offsets, const uint64_t *lengths,
					      int mem, void *dst, const uint64_t *strides,
					      uint64_t size);
/* ckpt_dist_reader_restore_box_mem() into contiguous host memory (mem CKPT_MEM_HOST, strides
 * NULL). */
CKPT_API int ckpt_dist_reader_restore_box(ckpt_dist_reader *reader, size_t index,
					  const uint64_t *offsets, const uint64_t *lengths,
					  void *dst, uint64_t size);
/* ckpt_dist_reader_restore_box_mem() into strided host memory (mem CKPT_MEM_HOST; strides must
 * not be NULL). */
CKPT_API int ckpt_dist_reader_restore_box_strided(ckpt_dist_reader *reader, size_t index,
						  const uint64_t *offsets, const uint64_t *lengths,
						  void *dst, const uint64_t *strides, uint64_t size);

/* Reads elements [offset, offset + count) of global tensor index, in row-major order, into
 * count contiguous elements at dst (size bytes exactly) in memory mem: a flattened range, from
 * whatever split of boxes or ranges saved it. Reads only the chunks under it, as
 * ckpt_dist_reader_restore_box_mem() does for each of the at most 2 * ndim - 1 boxes the range
 * is made of. Returns 0, -CKPT_E_INVAL (a range outside the tensor, a size that is not the
 * range's bytes), or the errors of ckpt_dist_reader_restore_box_mem(). */
CKPT_API int ckpt_dist_reader_restore_range(ckpt_dist_reader *reader, size_t index,
					    uint64_t offset, uint64_t count, int mem, void *dst,
					    uint64_t size);

/* Collective over comm (every rank of it calls it, with the same index and root): restores
 * global tensor index whole into contiguous host memory dst (size bytes, the tensor's nbytes)
 * on every rank, reading it from the store (and verifying it) on rank root alone and sending it
 * to the others with comm->broadcast, in pieces of at most 64 MiB. For an entry every rank
 * restores whole (one saved with ckpt_dist_save_add_replicated()), the store is read once per
 * job instead of once per rank; spread the entries' roots over the ranks (entry k on rank
 * k % size) so that the reads run in parallel. Over the job's communicator this is once per
 * job: it pays where reading the store costs more than the broadcast (a shared file system or
 * a remote tier read by many nodes); over a communicator of one node's ranks (MPI:
 * MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), once per node. Returns 0 on every rank, or on every
 * rank: root's error (the message names root; -CKPT_E_CHECKSUM for a damaged chunk, and then
 * no rank's dst is written), -CKPT_E_INVAL (a rank's index, size or root is wrong: that rank's
 * message says which, the others' name it), or a communicator error (-CKPT_E_IO). */
CKPT_API int ckpt_dist_reader_restore_shared(ckpt_dist_reader *reader, const ckpt_comm *comm,
					     size_t index, int root, void *dst, uint64_t size);

/* One shard of a global tensor: the box of it that one tensor of the checkpoint holds. */
typedef struct ckpt_dist_shard {
	size_t tensor;           /* that tensor's index, for ckpt_reader_* on the same checkpoint */
	int rank;                /* the rank that saved it; -1 for a global tensor of one piece
				  * (replicated, or a single-process checkpoint's tensor) */
	unsigned ndim;
	const uint64_t *offsets; /* ndim offsets of the box in the global tensor */
	const uint64_t *lengths; /* ndim extents of the box (the shard tensor's shape) */
} ckpt_dist_shard;

/* Number of shards of global tensor index (1 for a replicated tensor and for every tensor of a
 * single-process checkpoint), or -CKPT_E_INVAL for an index out of range. */
CKPT_API long ckpt_dist_reader_shard_count(const ckpt_dist_reader *reader, size_t index);
/* Fills *out for shard j of global tensor index, in the order of the checkpoint's shard table;
 * its pointers stay valid while reader is open. Returns 0 or -CKPT_E_INVAL (index or j out of
 * range). */
CKPT_API int ckpt_dist_reader_shard(const ckpt_dist_reader *reader, size_t index, size_t j,
				    ckpt_dist_shard *out);
/* Returns 1 when global tensor index was saved replicated (ckpt_dist_save_add_replicated()), 0
 * when it was not (sharded, or a single-process checkpoint's tensor), or -CKPT_E_INVAL. */
CKPT_API int ckpt_dist_reader_replicated(const ckpt_dist_reader *reader, size_t index);
/* Checks every part file of a multi-rank checkpoint (STORE/parts/<step>/<rank>.part) against the
 * size and checksum its global manifest records, and that it decodes as a manifest of this store
 * and step. The chunks are not read here (ckpt_reader_verify() on the same step reads every chunk
 * of every part: the global manifest references them all). Each missing or damaged part is
 * reported to on_damage (may be NULL) with tensor NULL, file the part's path, error a CKPT_E_*
 * code and a message naming the rank. Returns the number of damaged parts (0 for a
 * single-process checkpoint), or a negative CKPT_E_* code. */
CKPT_API long ckpt_dist_reader_verify_parts(ckpt_dist_reader *reader, ckpt_damage_fn on_damage,
					    void *arg);

/* ---------------------------------------------------------------------------------------------
 * Remote tier (issue 25): a second copy of a store's checkpoints on a remote, so that they survive
 * losing the node. A remote is named by a url: file:///dir or an absolute path (a directory on a
 * shared file system: Lustre, GPFS, NFS), or s3://bucket/prefix where libckpt is built with S3.
 * Several stores may share one remote (one bucket prefix): each keeps its objects under its store
 * id (the uuid in the store header, 32 hex digits), and none ever reads or deletes another's
 * (docs/format.md, "Remote layout"). A checkpoint exists on the remote only once its manifest is
 * there, which is put after every pack it references.
 * ------------------------------------------------------------------------------------------- */

/* Counts of one push or pull. */
typedef struct ckpt_remote_stats {
	uint64_t packs_sent, bytes_sent;       /* push: uploaded; pull: downloaded */
	uint64_t packs_present, bytes_present; /* already at the destination, not sent */
} ckpt_remote_stats;

/* Progress of a long transfer: bytes done so far of total (0 when unknown); returning non-zero
 * cancels it (-CKPT_E_CANCELED). Called from the library's transfer threads, one at a time. */
typedef int (*ckpt_remote_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Upload states of a checkpoint (ckpt_store_upload_state). */
enum {
	CKPT_UPLOAD_LOCAL = 0,     /* only in the local store */
	CKPT_UPLOAD_UPLOADING = 1, /* queued for the background upload, or being uploaded */
	CKPT_UPLOAD_REMOTE = 2,    /* its manifest, and so every pack it needs, is on the remote */
};

/* ckpt_store_set_remote flags. */
enum {
	/* Upload every checkpoint in the background once it is durable locally (the next save is
	 * never held), several packs in parallel; and, at once, the local checkpoints the remote
	 * lacks, newest first: so a killed or failed upload resumes from what the remote holds.
	 * A multi-rank checkpoint is uploaded by every rank whose handle has this remote: each puts
	 * the packs of its own pack id range and its part, rank 0 then what is missing and the
	 * manifest last (docs/format.md, "Remote layout"); rank 0 waits for a rank that makes no
	 * progress at most CKPT_REMOTE_SHARE_WAIT_S seconds (environment; default 300), then sends
	 * its share itself. A handle resumes a multi-rank checkpoint once its next multi-rank commit
	 * tells it its rank. */
	CKPT_REMOTE_UPLOAD = 1u << 0,
	/* Readers of the handle read every checkpoint from the remote, local or not (its manifest
	 * and each record it references, checked): what `ckptctl verify --remote` and `show
	 * --remote` use to check the remote's copy itself. */
	CKPT_REMOTE_READ = 1u << 1,
};

/* Sets the remote of the handle (url NULL: none; a previous remote's uploads in flight are
 * canceled, to resume later from what that remote holds). Opening checks that the remote
 * answers. With a remote set, ckpt_reader_open() (and ckpt_dist_reader_open()) of a checkpoint
 * that is not local reads it from the remote without pulling it: its manifest is fetched, and
 * from each pack that is not local only the records the checkpoint references, by range reads
 * (adjacent records merged, several at once), each checked against its digest before use (a
 * damaged remote object fails the restore naming it), into an anonymous temporary file (in the
 * store directory, else $TMPDIR) that ckpt_reader_close() releases; nothing is added to the
 * store (ckpt_store_pull() does that). A local checkpoint missing a pack reads that pack so too. Call it while no save of the handle is in flight. ckpt_store_close() cancels the
 * uploads in flight the same way (call ckpt_store_wait_uploaded() first to finish them).
 * Returns 0, or -CKPT_E_INVAL (a malformed url or unknown scheme, naming the known ones),
 * -CKPT_E_NOTFOUND (no such directory or bucket), -CKPT_E_PERM, -CKPT_E_IO, -CKPT_E_NOMEM. */
CKPT_API int ckpt_store_set_remote(ckpt_store *store, const char *url, unsigned flags);
/* The url of the handle's remote, or NULL; valid until the remote is changed or the store closed. */
CKPT_API const char *ckpt_store_remote(const ckpt_store *store);
/* The store's id on a remote (32 lowercase hex digits and a NUL) into id. */
CKPT_API void ckpt_store_id(const ckpt_store *store, char id[33]);

/* Uploads checkpoint step (or CKPT_STEP_LATEST) to the handle's remote, on the caller's thread:
 * the packs it references that the remote lacks (each checked by size once put), a multi-rank
 * checkpoint's part files, then its manifest. A pack already on the remote is not sent again
 * (stats->packs_present); one there under the same id with other contents is never replaced
 * (-CKPT_E_CORRUPT naming it). stats and progress may be NULL. Returns 0 (also when the remote had
 * it whole), -CKPT_E_STATE (no remote set), -CKPT_E_NOTFOUND (no such local checkpoint, or a pack
 * of it missing locally), -CKPT_E_NOSPC (remote full), -CKPT_E_CANCELED, or the remote's error;
 * the message names the object and the cause. After a failure the remote lists no part of it. */
CKPT_API int ckpt_store_push(ckpt_store *store, uint64_t step, ckpt_remote_stats *stats,
			     ckpt_remote_progress_fn progress, void *arg);
/* Brings checkpoint step (or CKPT_STEP_LATEST: the remote's newest whose manifest is intact, as
 * ckpt_store_resolve() chooses locally; a newer damaged one is listed by ckpt_store_remote_list()
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
CKPT_API int ckpt_store_pull(ckpt_store *store, uint64_t step, uint64_t *pulled,
			     ckpt_remote_stats *stats, ckpt_remote_progress_fn progress, void *arg);
/* Returns the upload state of checkpoint step (CKPT_UPLOAD_*), or -CKPT_E_STATE (no remote),
 * -CKPT_E_NOTFOUND (neither local nor on the remote), or the remote's error. */
CKPT_API int ckpt_store_upload_state(ckpt_store *store, uint64_t step);
/* Waits until checkpoint step is on the remote (CKPT_STEP_LATEST: until the background upload
 * has nothing queued), at most timeout_ms (negative: no limit). On a rank other than 0 of a
 * multi-rank checkpoint: until its own share is up, then (for a step) until rank 0 has put the
 * manifest, polling the remote; LATEST waits for its own shares only. Returns 0; the error of its last
 * failed upload attempt; -CKPT_E_BUSY (still uploading at the deadline); -CKPT_E_STATE (no
 * remote, or a local checkpoint that is not queued: no CKPT_REMOTE_UPLOAD). */
CKPT_API int ckpt_store_wait_uploaded(ckpt_store *store, uint64_t step, int64_t timeout_ms);
/* The steps of the checkpoints on the handle's remote, ascending, into *steps (free() it).
 * Returns the count, or -CKPT_E_STATE (no remote) or the remote's error. */
CKPT_API long ckpt_store_remote_steps(ckpt_store *store, uint64_t **steps);
/* ckpt_store_list() of the checkpoints on the handle's remote (their manifests fetched and
 * decoded; an invalid one listed with info.error when include_invalid). Free with
 * ckpt_info_free(). Returns the count, or -CKPT_E_STATE (no remote) or the remote's error. */
CKPT_API int ckpt_store_remote_list(ckpt_store *store, int include_invalid, ckpt_info **out);

/* What a remote prune or gc did (or, with CKPT_GC_DRY_RUN, would do). */
typedef struct ckpt_remote_gc_report {
	uint64_t manifests_removed; /* prune: checkpoints removed from the remote */
	uint64_t packs_removed, bytes_freed; /* gc: packs no remote manifest references */
	uint64_t parts_removed;     /* part files of steps without a manifest */
	uint64_t packs_spared;      /* unreferenced packs left because an upload is in flight */
	uint64_t uploads_in_flight; /* live upload markers seen (pushes of this store running) */
	/* Leftovers of puts killed longer than the grace age ago: a directory remote's temporary
	 * files (their bytes), an S3 server's incomplete multipart uploads (bytes unknown: 0). */
	uint64_t leftovers_removed, leftover_bytes;
} ckpt_remote_gc_report;

/* Removes from the handle's remote the checkpoints of this store that policy does not keep (as
 * ckpt_store_prune() chooses them, among the remote's; a damaged remote manifest is never
 * removed), manifests first, then runs ckpt_store_remote_gc() unless flags has CKPT_GC_DRY_RUN
 * (then it only reports). Local checkpoints are not touched. As ckpt_store_prune(), nothing is
 * removed while a remote manifest of this store is damaged unless CKPT_GC_FORCE: -CKPT_E_CORRUPT,
 * the message naming the damaged keys. Returns 0 and fills *report (may be NULL), or
 * -CKPT_E_STATE (no remote), -CKPT_E_CORRUPT or an error of ckpt_store_remote_gc(). */
CKPT_API int ckpt_store_remote_prune(ckpt_store *store, const ckpt_prune_policy *policy, int flags,
				     ckpt_remote_gc_report *report);
/* ckpt_store_remote_prune() with every rule of ckpt_store_prune_gc() (the same struct and the
 * same choice: times are the commit times the remote manifests record, retention->now the clock;
 * tags; the newest valid remote checkpoint always stays; a damaged remote manifest is never
 * removed), then ckpt_store_remote_gc() unless CKPT_GC_DRY_RUN. removed (may be NULL) gets a
 * malloc'd array (free() it) of the report->manifests_removed steps removed, ascending (dry run:
 * that would be). Refuses a damaged remote manifest as ckpt_store_remote_prune() does. Returns 0,
 * -CKPT_E_INVAL (NULL retention, a negative keep_within, a bad tag), -CKPT_E_STATE (no remote),
 * -CKPT_E_CORRUPT or an error of ckpt_store_remote_gc(). */
CKPT_API int ckpt_store_remote_prune_gc(ckpt_store *store, const ckpt_retention *retention,
					int flags, ckpt_remote_gc_report *report, uint64_t **removed);
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
CKPT_API int ckpt_store_remote_gc(ckpt_store *store, int flags, ckpt_remote_gc_report *report);

/* Binds a fresh local store to a store on remote url (the node-loss path): creates the store
 * directory path with the remote store's header (so both are one store: same id, chunk size and
 * compression), or accepts a store at path that has that header already, or completes what an
 * adopt killed before it wrote the header left there. store_id NULL: the remote's only store. Then
 * open it, set the remote and pull. Returns 0, or -CKPT_E_NOTFOUND (no store on the remote),
 * -CKPT_E_INVAL (several stores there and store_id NULL: the message lists them; a malformed id),
 * -CKPT_E_EXISTS (path holds another store, or files that are not a store's), -CKPT_E_CORRUPT (a
 * remote header that is not its id's store's), or an I/O or remote error. */
CKPT_API int ckpt_remote_adopt(const char *url, const char *store_id, const char *path);

/* One store on a remote, as ckpt_remote_stores() finds it. */
typedef struct ckpt_remote_store {
	char id[33];          /* the store id (32 lowercase hex digits): ckpt_remote_adopt's store_id */
	const char *host;     /* the host and the path of the store that pushed to it last, as */
	const char *path;     /* that push recorded them; "" when unrecorded (an older libckpt) */
	uint64_t checkpoints; /* manifests on the remote */
	uint64_t newest_step; /* the highest step among them; CKPT_STEP_LATEST when there is none */
	uint64_t bytes;       /* the bytes of its packs on the remote */
} ckpt_remote_store;

/* The stores on remote url, by id, into *out (their count of entries, then one zeroed: free it
 * with ckpt_remote_stores_free()): what a replacement node can bind a new store to, without any
 * local store. Counts come from listing the remote (manifests are not read). Returns the count,
 * or -CKPT_E_INVAL (a malformed url), -CKPT_E_NOTFOUND (no such directory or bucket), or the
 * remote's error. */
CKPT_API long ckpt_remote_stores(const char *url, ckpt_remote_store **out);
/* Frees a list from ckpt_remote_stores() (NULL is fine). */
CKPT_API void ckpt_remote_stores_free(ckpt_remote_store *list);

/* ---- Experimental ------------------------------------------------------------------------------
 * Functions below may change before 1.0 (their symbols stay in the version script; a change is a
 * new name). */

/* The rule that keeps a checkpoint (ckpt_store_prune_explain()). */
typedef enum ckpt_keep_rule {
	CKPT_KEEP_NONE = 0, /* no rule keeps it: prune removes it */
	CKPT_KEEP_WITHIN,   /* keep_within */
	CKPT_KEEP_LAST,     /* keep.keep_last */
	CKPT_KEEP_HOURLY,
	CKPT_KEEP_DAILY,
	CKPT_KEEP_WEEKLY,
	CKPT_KEEP_MONTHLY,
	CKPT_KEEP_YEARLY,
	CKPT_KEEP_TAG,      /* keep_tags */
	CKPT_KEEP_EVERY,    /* keep.keep_every */
	CKPT_KEEP_STEP,     /* keep.keep_steps */
	CKPT_KEEP_NEWEST,   /* the newest valid checkpoint, which always stays */
	CKPT_KEEP_DAMAGED,  /* a damaged manifest: prune never removes it */
} ckpt_keep_rule;

/* One checkpoint's fate under a retention, as borg prune --list tells it. */
typedef struct ckpt_prune_choice {
	uint64_t step;
	int rule;     /* ckpt_keep_rule: the first rule, in the order ckpt_retention applies them,
		       * that keeps it; CKPT_KEEP_NONE when it goes */
	uint32_t nth; /* keep_last and the period rules: the how-manieth checkpoint the rule keeps
		       * (1: its newest); 0 for the oldest checkpoint, kept because fewer periods
		       * than asked have one, and for the other rules */
} ckpt_prune_choice;

/* What ckpt_store_prune_gc() with retention would keep, and by which rule, changing nothing and
 * taking no lock: one entry per checkpoint (damaged ones too), ascending by step, into *out
 * (free() it). A save or prune that runs meanwhile may make the real choice differ. Returns the
 * count, or -CKPT_E_INVAL (as ckpt_store_prune_gc()), -CKPT_E_NOMEM or an I/O error. */
CKPT_API long ckpt_store_prune_explain(ckpt_store *store, const ckpt_retention *retention,
				       ckpt_prune_choice **out);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_H */
