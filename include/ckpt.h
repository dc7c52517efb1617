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
 * - Strings are NUL-terminated UTF-8; sizes are in bytes; counts are size_t, or long when a
 *   negative CKPT_E_* code may come back instead.
 * - Every struct the caller allocates starts with struct_size, which the caller sets to
 *   sizeof(the struct) (zero the struct, then fill it): fields can then be added at the end
 *   without breaking callers built against an older header. A struct_size this library does
 *   not know is refused with -CKPT_E_INVAL. Arrays and reports the library allocates come with
 *   their own free function.
 * - Functions and flags below the "Experimental" line may still change before 1.0.
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
	 * parallel; ckpt_remote_open), 1 to 64 (default 4). */
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
	size_t struct_size;     /* sizeof(ckpt_info) */
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
CKPT_API long ckpt_store_list(ckpt_store *store, int include_invalid, ckpt_info **out);
/* Frees an array returned by ckpt_store_list(); accepts NULL. */
CKPT_API void ckpt_info_free(ckpt_info *list);

/* The step that means "the newest valid checkpoint" wherever a step is taken. */
#define CKPT_STEP_LATEST UINT64_MAX

/* Resolves step (a number or CKPT_STEP_LATEST) to an existing checkpoint's step. Returns 0 and
 * sets *out, or -CKPT_E_NOTFOUND. */
CKPT_API int ckpt_store_resolve(ckpt_store *store, uint64_t step, uint64_t *out);


/* The store's id (32 lowercase hex digits and a NUL) into id: its name on a remote. */
CKPT_API void ckpt_store_id(const ckpt_store *store, char id[33]);

/* ---------------------------------------------------------------------------------------------
 * Statistics of one save or restore
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_stats {
	size_t struct_size;      /* sizeof(ckpt_stats), set by the caller */
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
 * Saving a checkpoint: one process, or one part of a multi-rank checkpoint
 *
 * A one-process save is a save with a world of one. With a communicator (ckpt_save_options.comm,
 * MPI: include/ckpt_mpi.h), every rank of the job begins the same step, adds its pieces and
 * commits collectively: each rank makes its part durable and rank 0 commits the global manifest
 * (docs/format.md, version 2) once every part is; a missing or failed part means no checkpoint.
 * Coordination goes through the caller's communicator, never a transport of the library's own.
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_save ckpt_save;

/* The collectives a multi-rank save and the collective read need, filled by the caller. Each
 * returns 0 or a negative CKPT_E_* code; a failed or dead rank must make every rank's call
 * return an error (not wait forever), with the communicator's own message naming the rank when
 * it is known (errmsg). */
typedef struct ckpt_comm {
	size_t struct_size; /* sizeof(ckpt_comm) */
	int rank, size;     /* this rank, and the number of ranks */
	void *ctx;
	/* Gathers len bytes from every rank into out (size * len bytes, in rank order). */
	int (*allgather)(void *ctx, const void *in, size_t len, void *out);
	/* Sends len bytes of buf from root to every rank. */
	int (*broadcast)(void *ctx, void *buf, size_t len, int root);
	int (*barrier)(void *ctx);
	/* Optional: the text of the communicator's last failure (names the rank), or NULL. */
	const char *(*errmsg)(void *ctx);
} ckpt_comm;

/* ckpt_save_options.flags, with a communicator only (else -CKPT_E_INVAL):
 * CKPT_SAVE_THREADED: the communicator's collectives may be called from a thread of the library
 * while the caller's threads go on (MPI initialized with MPI_THREAD_MULTIPLE and a communicator
 * only libckpt uses, the Python binding's own gloo group): the collective commit then runs on
 * that thread as soon as this rank's part is durable. Without it, it runs in ckpt_save_wait() on
 * the caller's thread.
 * CKPT_SAVE_DEFER (with CKPT_SAVE_THREADED only): once this rank's part is durable, the library's
 * thread waits for ckpt_save_release() before the collective commit, so that the caller decides
 * late whether the checkpoint is made and what metadata it holds (a framework whose own protocol
 * finishes after the data is written, as DCP's finish() does). */
#define CKPT_SAVE_THREADED 1u
#define CKPT_SAVE_DEFER 2u

/* Options of ckpt_save_begin(); NULL means all zero. */
typedef struct ckpt_save_options {
	size_t struct_size;    /* sizeof(ckpt_save_options) */
	const ckpt_comm *comm; /* NULL: this process alone; else the job's ranks (used until the
				* save is freed: it must stay valid that long) */
	unsigned flags;        /* CKPT_SAVE_* */
} ckpt_save_options;

/* Begins a checkpoint for step (any value but CKPT_STEP_LATEST).
 * Without a communicator: takes the store's writer lock (held while any save of this handle is
 * open or in flight). Several saves may be in flight on one handle: they are processed and
 * committed in the order they were submitted, and a new one waits for pool space (backpressure).
 * With a communicator (collective: every rank calls it, with the same step): takes the store's
 * lock shared (ranks do not block each other; prune and gc are excluded), rank 0 claims the step
 * for this job (STORE/parts/<step>/CLAIM) and clears what a dead earlier save of the step left;
 * then the ranks exchange their outcome, so every rank returns the first failing rank's error,
 * and they must agree on the step, the world size and the chunk size, before any data is written.
 * Returns 0 and sets *out, or (on every rank, for a multi-rank save): -CKPT_E_BUSY (another
 * process or job writes to the store or this step; the message names it), -CKPT_E_EXISTS (the
 * checkpoint exists or is being saved, and CKPT_OPT_OVERWRITE is off; a multi-rank checkpoint is
 * never replaced), -CKPT_E_PERM (read-only store), -CKPT_E_INVAL (a struct_size this library does
 * not know, flags without a communicator, a world over 1022 ranks, ranks that disagree),
 * -CKPT_E_IO, -CKPT_E_NOMEM, or a communicator error. */
CKPT_API int ckpt_save_begin(ckpt_store *store, uint64_t step, const ckpt_save_options *opts,
			     ckpt_save **out);

/* One tensor, or this rank's piece of a global tensor, for ckpt_save_add(). Zero it, then fill it.
 * The piece is one of:
 * - a whole tensor: global_shape NULL; shape has ndim extents (ndim 0 is a scalar); in a
 *   multi-rank save, a tensor this rank alone holds (or, with nreplicas > 1, one that nreplicas
 *   ranks hold whole alike: it is saved once, each replica copying, hashing and writing about
 *   1/nreplicas of its chunks);
 * - a box of a global tensor (multi-rank): global_shape and offsets (ndim each) set, shape the
 *   box's extents; the boxes of all ranks must tile the global tensor exactly (checked at commit).
 *   With nreplicas > 1, nreplicas ranks hold the box alike (hybrid sharding, a mesh's replicated
 *   dimension): each passes its replica index and the box is saved once, each holder taking the
 *   rows [n*replica/nreplicas, n*(replica+1)/nreplicas) of its first dimension longer than 1;
 * - a flat range of a global tensor (multi-rank; FSDP1's flat parameters, Megatron's distributed
 *   optimizer): global_shape set, offsets NULL, shape unused: elements [offset, offset + count)
 *   of the row-major global tensor, contiguous at data; ranges tile like boxes and may mix with
 *   them; saved as the at most 2 * ndim - 1 boxes the range is made of (the first as name, the
 *   others as name#1, name#2, ...), a format version 3 manifest (docs/format.md).
 * data (in memory mem: CKPT_MEM_HOST or a CUDA device index) holds the piece's bytes and must stay
 * unchanged until the snapshot is done (ckpt_save_wait_snapshot(), or ckpt_save_commit()
 * returning). */
typedef struct ckpt_tensor {
	size_t struct_size;            /* sizeof(ckpt_tensor) */
	const char *name;              /* unique in the checkpoint, 1 to 65535 bytes */
	ckpt_dtype dtype;
	unsigned ndim;
	const uint64_t *shape;         /* a whole tensor's or a box's extents */
	int mem;
	const void *data;
	const uint64_t *global_shape;  /* a box or a range: the global tensor's extents */
	const uint64_t *offsets;       /* a box: where it starts in the global tensor */
	uint64_t offset, count;        /* a range: its first element and its number of elements */
	unsigned replica, nreplicas;   /* held alike by nreplicas ranks (0 or 1: this rank alone) */
} ckpt_tensor;

/* Adds *tensor to the save. Returns 0, or -CKPT_E_INVAL (bad name, dtype, shape, size or layout,
 * a duplicate name, a box or range in a save without a communicator, replica >= nreplicas; the
 * message says which), -CKPT_E_UNSUPPORTED (a device memory this build cannot read),
 * -CKPT_E_STATE (after submit); the tensor is then not added (a range that failed after some of
 * its boxes were added: abort the save). A holder whose share of a replicated piece is empty adds
 * nothing and returns 0; count 0 adds nothing. */
CKPT_API int ckpt_save_add(ckpt_save *save, const ckpt_tensor *tensor);

/* Sets metadata key to value (both strings; a key set twice keeps the last value; a multi-rank
 * checkpoint keeps rank 0's). Before submit; after a submit with CKPT_SAVE_DEFER also until
 * ckpt_save_release(). Returns 0, -CKPT_E_INVAL (the reserved keys "ckpt.tags" and "ckpt.dist.*"),
 * -CKPT_E_STATE, -CKPT_E_NOMEM. */
CKPT_API int ckpt_save_set_meta(ckpt_save *save, const char *key, const char *value);

/* Tags: labels of a checkpoint, as restic's --tag, that prune can keep by (keep_tags) and
 * listings show (ckpt_info.tags). A tag is 1 to CKPT_TAG_MAX bytes of printable ASCII other than
 * space and ',' ('!' to '~'); case matters; a checkpoint has at most CKPT_TAGS_MAX. They are
 * stored as the reserved metadata entry "ckpt.tags" (docs/format.md). */
#define CKPT_TAG_MAX 64
#define CKPT_TAGS_MAX 32
/* Adds tag to the checkpoint (a tag added twice is kept once; a multi-rank checkpoint keeps rank
 * 0's). Call before submit. Returns 0, or -CKPT_E_INVAL (a tag that breaks the rule, or one more
 * than CKPT_TAGS_MAX; the message says which) / -CKPT_E_STATE / -CKPT_E_NOMEM, and then the tags
 * are unchanged. */
CKPT_API int ckpt_save_add_tag(ckpt_save *save, const char *tag);
/* Returns 0 when tag follows the rule above, else -CKPT_E_INVAL with a message that says what is
 * wrong: for tools that take tags to match (prune's keep_tags checks them too). */
CKPT_API int ckpt_tag_check(const char *tag);

/* For CUDA tensors: orders the copies after the work queued on `stream` (a cudaStream_t), so that
 * the snapshot sees what the trainer computed. Default: the legacy default stream (NULL). Call
 * before submit. Returns 0 or -CKPT_E_STATE after submit. */
CKPT_API int ckpt_save_after_stream(ckpt_save *save, void *stream);

/* Starts the save in the background and returns at once: the snapshot (the copy of every tensor
 * into the store's pinned pool) runs on the worker threads, then hashing, compression, writing
 * and the commit (multi-rank: the collective commit, see CKPT_SAVE_THREADED). After submit only
 * wait_snapshot, fence, poll, progress, release, wait and abort may be called; a multi-rank save's
 * every rank must then call ckpt_save_wait() (collective), also when submit failed: the other
 * ranks learn of the failure there. Returns 0, this rank's failure, or -CKPT_E_STATE when already
 * submitted (then nothing changes). */
CKPT_API int ckpt_save_submit(ckpt_save *save);

/* Waits until every tensor (of this rank) has been copied: from then on the caller may modify
 * them. Returns 0, or the save's error (it then also comes back from ckpt_save_wait()). */
CKPT_API int ckpt_save_wait_snapshot(ckpt_save *save);

/* For CUDA tensors: makes the CUDA stream `stream` (a cudaStream_t, NULL for the legacy default
 * stream of each device the save copies from) wait for the snapshot without blocking the calling
 * thread: work queued on stream after this call (the next optimizer step) runs only once every
 * tensor of the save has been copied out (host tensors included), not waiting for hashing,
 * compression or writing. When the state is larger than the pool, the last copies need slabs
 * that only writing frees: the stream then waits until all but about one pool's worth of the
 * state is written (size CKPT_OPT_POOL_SIZE to the state to keep the stall at the copy time). The
 * GPU waits on a flag the library sets then (cuStreamWaitValue32); a save that fails sets it too,
 * so the stream never waits forever. Where stream memory operations are not available the fence
 * waits on the calling thread, as ckpt_save_wait_snapshot() does. Without CUDA tensors it is
 * ckpt_save_wait_snapshot(). Call after submit. Returns 0, -CKPT_E_UNSUPPORTED without the CUDA
 * provider, or the save's error. */
CKPT_API int ckpt_save_fence(ckpt_save *save, void *stream);

/* Returns 1 when ckpt_save_wait() would not wait (the save finished, successfully or not; a
 * multi-rank save without CKPT_SAVE_THREADED: once this rank's part finished, the exchange being
 * still to come in wait), 0 otherwise, and 0 for a save not submitted. */
CKPT_API int ckpt_save_poll(const ckpt_save *save);

/* Bytes of this rank's tensors hashed so far by a submitted save (*done), for a progress display;
 * the total is the tensors' size. Call between submit and wait. Returns 0 or -CKPT_E_INVAL. */
CKPT_API int ckpt_save_progress(const ckpt_save *save, uint64_t *done);

/* Waits until the checkpoint is durable and visible (multi-rank: collective, on every rank alike),
 * or failed; fills *stats (this rank's part) when not NULL, and frees save. Returns 0, or the
 * error of the background work, whose message names the step (and the failing rank); after an
 * error no checkpoint was made (unless a multi-rank save failed in the final broadcast itself),
 * earlier checkpoints are intact and what was written is removed or left as garbage for gc. */
CKPT_API int ckpt_save_wait(ckpt_save *save, ckpt_stats *stats);

/* ckpt_save_submit() then ckpt_save_wait(): writes the checkpoint's new chunks, makes them
 * durable, then commits the manifest atomically (multi-rank: collectively), and frees save in
 * every case but one: after a submit it returns -CKPT_E_STATE and leaves save to
 * ckpt_save_wait(). Returns as ckpt_save_wait(). */
CKPT_API int ckpt_save_commit(ckpt_save *save, ckpt_stats *stats);

/* Abandons the save and frees it; accepts NULL. A save not submitted releases its lock (multi-rank:
 * collectively, every rank's commit then fails naming this rank); a submitted one is canceled and
 * waited for, its partial output removed. After a CKPT_SAVE_THREADED submit the collective commit
 * is already under way and one rank cannot take it back: abort waits for it and discards its
 * outcome (the checkpoint may then exist). */
CKPT_API void ckpt_save_abort(ckpt_save *save);

/* ---------------------------------------------------------------------------------------------
 * Reading a checkpoint: one process's, or a multi-rank one onto any layout
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_reader ckpt_reader;

/* ckpt_reader_open() flags. CKPT_READ_AS_SAVED: the reader's tensors are the pieces as they were
 * saved (a multi-rank checkpoint's every rank's boxes, each its own tensor, as `ckptctl show`
 * lists them) instead of the global tensors; for a one-process checkpoint both are the same. */
#define CKPT_READ_AS_SAVED 1u

/* Opens the checkpoint of step (or CKPT_STEP_LATEST) for reading; needs no lock and never sees a
 * half-written checkpoint. Its tensors are the global tensors: for a one-process checkpoint, the
 * tensors saved; for a multi-rank one, each tensor as a whole, whatever layout saved it. With a
 * remote open on the store (ckpt_remote_open), a checkpoint that is not local is read from the
 * remote without pulling it: each record it references is fetched by range reads and checked
 * against its digest before use, into an anonymous temporary file that close releases.
 * Returns 0 and sets *out, or -CKPT_E_NOTFOUND, -CKPT_E_CORRUPT, -CKPT_E_CHECKSUM (damaged
 * manifest), -CKPT_E_VERSION, -CKPT_E_INVAL (unknown flags), -CKPT_E_IO, -CKPT_E_NOMEM. */
CKPT_API int ckpt_reader_open(ckpt_store *store, uint64_t step, unsigned flags,
			      ckpt_reader **out);
/* Closes reader; accepts NULL. */
CKPT_API void ckpt_reader_close(ckpt_reader *reader);

/* Fills *info (info->struct_size set by the caller) with the checkpoint's summary, as
 * ckpt_store_list() would; its step tells which one CKPT_STEP_LATEST opened. Returns 0 or
 * -CKPT_E_INVAL (a struct_size this library does not know). */
CKPT_API int ckpt_reader_info(const ckpt_reader *reader, ckpt_info *info);
/* World size of the save: 1 for a one-process checkpoint. */
CKPT_API unsigned ckpt_reader_world_size(const ckpt_reader *reader);

/* Description of one tensor of a checkpoint; pointers stay valid while the reader is open. */
typedef struct ckpt_tensor_info {
	size_t struct_size;   /* sizeof(ckpt_tensor_info), set by the caller */
	const char *name;
	ckpt_dtype dtype;
	unsigned ndim;
	const uint64_t *shape;
	uint64_t nbytes;
	uint64_t chunks;      /* chunk references (of every piece) */
	uint64_t chunks_new;  /* of them, chunks written by this checkpoint */
	uint64_t bytes_new;   /* on-disk bytes of those new chunks */
	uint32_t shards;      /* pieces it was saved as (ckpt_reader_shard); 1 for a tensor saved whole */
	int32_t replicated;   /* 1: saved whole by several ranks alike (nreplicas > 1, no box) */
} ckpt_tensor_info;

/* Returns the number of tensors in the checkpoint. */
CKPT_API size_t ckpt_reader_tensor_count(const ckpt_reader *reader);
/* Fills *info for tensor index (0 <= index < count, in the order they were added). Returns 0 or
 * -CKPT_E_INVAL (index out of range, unknown struct_size). */
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

/* What ckpt_reader_read() reads of a tensor. Zero it, then fill it; NULL means the whole tensor.
 * - whole: count 0 and offsets NULL;
 * - elements [offset, offset + count) of the row-major tensor, contiguous at dst (a slice of rows,
 *   a flat range), from whatever split of boxes or ranges saved it;
 * - a box: offsets and lengths (ndim each, the tensor's ndim) set. strides NULL: dst is row-major
 *   and contiguous, size exactly product(lengths) * dtype size; else element (i_0, .., i_{n-1}) of
 *   the box goes to dst + (i_0 * strides[0] + .. + i_{n-1} * strides[n-1]) * dtype size (strides
 *   in elements: a column slice written into its place in a whole matrix), size is the bytes of
 *   dst, and elements of dst no box element maps to are not written;
 * - comm set (whole tensors only, host memory): a collective read over comm: every rank of it
 *   calls it with the same index and root; rank root alone reads (and verifies) the tensor from
 *   the store and sends it to the others with comm->broadcast, in pieces of at most 64 MiB. A
 *   tensor every rank restores whole is then read once per job (or per node, over a communicator
 *   of one node's ranks) instead of once per rank; spread the roots over the ranks (tensor k on
 *   rank k % size) so that the reads run in parallel. Every rank returns root's error alike
 *   (no rank's dst is written when a chunk is damaged). */
typedef struct ckpt_region {
	size_t struct_size;       /* sizeof(ckpt_region) */
	uint64_t offset, count;   /* elements */
	const uint64_t *offsets;  /* a box */
	const uint64_t *lengths;
	const uint64_t *strides;
	const ckpt_comm *comm;    /* a collective read */
	int root;
} ckpt_region;

/* Reads region (NULL: all) of tensor index into dst, in memory mem (CKPT_MEM_HOST, or a CUDA
 * device index), which holds size bytes: exactly the region's bytes, or with strides the bytes
 * of dst. Reads only the stored chunks the region touches, each once per call however many rows
 * share it, and checks every chunk's digest; a row's whole chunks, where the row is contiguous in
 * dst, are read straight into dst (host) or through the pinned staging buffer (CUDA: ordered after
 * ckpt_reader_after_stream()). Host destinations placed CKPT_RESTORE_DIRECT_OFFSET bytes past a
 * 4 KiB boundary get raw chunks by O_DIRECT with no copy (the digest checked in place). Adds to
 * the reader's statistics. Returns 0, or -CKPT_E_INVAL (index, region or size wrong, NULL dst, mem
 * out of range, a struct_size this library does not know), -CKPT_E_UNSUPPORTED (a CUDA mem
 * without the CUDA provider), -CKPT_E_CHECKSUM / -CKPT_E_CORRUPT (damaged data: the message names
 * the tensor, the chunk and the checkpoint; dst then holds partial data), -CKPT_E_IO,
 * -CKPT_E_NOMEM, or for a collective read root's or the communicator's error. */
CKPT_API int ckpt_reader_read(ckpt_reader *reader, size_t index, const ckpt_region *region,
			      int mem, void *dst, uint64_t size);

/* Where raw chunks are read straight into a host destination (see ckpt_reader_read()): with
 * O_DIRECT, chunk k goes in place when (dst + k * chunk_size - payload offset in its pack file) is
 * a multiple of the device's direct-I/O memory alignment; payloads start
 * CKPT_RESTORE_DIRECT_OFFSET bytes after a 4 KiB boundary of the file. */
#define CKPT_RESTORE_DIRECT_ALIGN 4096
#define CKPT_RESTORE_DIRECT_OFFSET 64

/* Reads every tensor whole through a callback that supplies the destination of each:
 * dst_for(index, info, &mem, arg) returns a pointer of info->nbytes bytes in memory *mem (preset
 * to CKPT_MEM_HOST), or NULL to skip that tensor. Reads run in parallel on the worker threads.
 * Returns 0 or the first error as ckpt_reader_read() would. */
typedef void *(*ckpt_dst_fn)(size_t index, const ckpt_tensor_info *info, int *mem, void *arg);
CKPT_API int ckpt_reader_read_all(ckpt_reader *reader, ckpt_dst_fn dst_for, void *arg);

/* Orders the copies of later reads into CUDA memory after the work queued on stream (a
 * cudaStream_t; NULL, the default: the legacy default stream) when each read starts, so that
 * kernels still using a destination (a caching allocator's reuse) finish before it is
 * overwritten. Returns 0 or -CKPT_E_INVAL. */
CKPT_API int ckpt_reader_after_stream(ckpt_reader *reader, void *stream);

/* Copies the statistics of the reads made through reader so far into *stats (stats->struct_size
 * set by the caller): bytes_read (from pack files, headers included), chunks (read),
 * logical_bytes (the regions' bytes). Returns 0 or -CKPT_E_INVAL. */
CKPT_API int ckpt_reader_stats(const ckpt_reader *reader, ckpt_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * Pieces, chunks and verification
 * ------------------------------------------------------------------------------------------- */
/* One piece of a global tensor: the box of it that one tensor as saved holds. */
typedef struct ckpt_shard {
	size_t struct_size;      /* sizeof(ckpt_shard), set by the caller */
	size_t tensor;           /* that tensor's index as saved (CKPT_READ_AS_SAVED, ckpt_reader_chunk) */
	int rank;                /* the rank that saved it; -1 for a tensor saved whole (replicated,
				  * or a one-process checkpoint's tensor) */
	unsigned ndim;
	const uint64_t *offsets; /* ndim offsets of the box in the global tensor */
	const uint64_t *lengths; /* ndim extents of the box (the piece's shape) */
} ckpt_shard;

/* Fills *out for piece j (0 <= j < ckpt_tensor_info.shards) of global tensor index, in the order
 * of the checkpoint's shard table; its pointers stay valid while reader is open. Returns 0,
 * -CKPT_E_INVAL (index or j out of range, unknown struct_size) or -CKPT_E_STATE (a reader opened
 * CKPT_READ_AS_SAVED, whose tensors are the pieces). */
CKPT_API int ckpt_reader_shard(const ckpt_reader *reader, size_t index, size_t j, ckpt_shard *out);

/* Where one chunk of a tensor lives. */
typedef struct ckpt_chunk_info {
	size_t struct_size;     /* sizeof(ckpt_chunk_info), set by the caller */
	uint8_t digest[16];     /* XXH3-128 of the raw bytes */
	uint32_t pack_id;
	uint64_t offset;        /* of its record in the pack */
	uint32_t raw_bytes;
	uint32_t stored_bytes;  /* payload after compression */
	uint64_t disk_bytes;    /* the record's span on disk (header and padding included) */
	int codec;              /* 0 raw, 1 zstd, 2 and 3 byte-grouped zstd */
	int is_new;             /* written by this checkpoint */
	int rank;               /* the rank whose pack holds it; -1 for a one-process save's pack */
} ckpt_chunk_info;

/* Fills *out for chunk j of tensor index as saved (0 <= j < its info.chunks; index is
 * ckpt_shard.tensor, which for a one-process checkpoint or a reader opened CKPT_READ_AS_SAVED is
 * the tensor's own index). Returns 0 or -CKPT_E_INVAL. */
CKPT_API int ckpt_reader_chunk(const ckpt_reader *reader, size_t index, uint64_t j,
			       ckpt_chunk_info *out);

/* One problem found by ckpt_reader_verify(). */
typedef struct ckpt_damage {
	uint64_t step;
	const char *tensor;   /* tensor name (as saved), or NULL for a damaged manifest or part */
	uint64_t chunk;       /* chunk index within the tensor */
	uint64_t offset;      /* byte offset of the chunk within the tensor */
	const char *file;     /* the file that holds the damage; for a pack read through the
			       * store's remote, the remote object (URL/KEY, docs/format.md) */
	int error;            /* CKPT_E_CHECKSUM, CKPT_E_CORRUPT, CKPT_E_IO */
	const char *message;
} ckpt_damage;

/* Called for every damaged chunk or part. */
typedef void (*ckpt_damage_fn)(const ckpt_damage *damage, void *arg);
/* Progress of a long operation (verify, compaction, a push or pull): done of total (0 when
 * unknown), in bytes. Returning non-zero cancels it where it can be canceled (a push or pull:
 * -CKPT_E_CANCELED); verify and gc ignore the value. */
typedef int (*ckpt_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* What verification learned about each chunk record, kept across the checkpoints of one store so
 * that a record several checkpoints share is read and hashed once (restic check --read-data).
 * create returns NULL when out of memory; free accepts NULL. */
typedef struct ckpt_verify_cache ckpt_verify_cache;
CKPT_API ckpt_verify_cache *ckpt_verify_cache_create(void);
CKPT_API void ckpt_verify_cache_free(ckpt_verify_cache *cache);
/* Bytes read from packs and records read through the cache so far (either may be NULL). */
CKPT_API void ckpt_verify_cache_stats(const ckpt_verify_cache *cache, uint64_t *bytes_read,
				      uint64_t *records);

/* Checks the checkpoint: a multi-rank checkpoint's part files first (STORE/parts/<step>/<rank>.part,
 * against the size and checksum the global manifest records, each missing or damaged one reported
 * with tensor NULL and file the part), then reads and re-hashes every chunk (each distinct chunk
 * once). With cache (may be NULL; one store's readers only), only the records the cache does not
 * know yet are read, and the damage it knows is reported for the others. on_damage and
 * on_progress may be NULL. Returns the number of damaged chunks and parts (0: intact), or a
 * negative CKPT_E_* code when verification could not run. */
CKPT_API long ckpt_reader_verify(ckpt_reader *reader, ckpt_verify_cache *cache,
				 ckpt_damage_fn on_damage, ckpt_progress_fn on_progress, void *arg);

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

/* Retention: which checkpoints prune keeps, with borg prune's and restic forget's rules. Zero it,
 * then fill it. The newest valid checkpoint is always kept, and a damaged manifest is never
 * removed. keep_last keeps the newest N valid checkpoints (0: only the newest); keep_every every
 * checkpoint whose step is a multiple of K; keep_steps these steps. keep_within keeps every
 * checkpoint saved less than that many seconds before now; keep_hourly/daily/weekly/monthly/yearly
 * the newest checkpoint of each of the last N hours, days, ISO weeks, calendar months and years
 * (UTC) that have one, counting back from the newest checkpoint (a period without a checkpoint
 * does not count, nor one whose newest checkpoint an earlier rule keeps; when fewer periods exist,
 * the oldest checkpoint is kept too). The rules apply in that order, after keep_last, and their
 * union is kept. Periods come from the commit time each manifest records. keep_tags keeps every
 * checkpoint that has one of the tags, whatever the other rules say (restic's --keep-tag). */
typedef struct ckpt_retention {
	size_t struct_size;        /* sizeof(ckpt_retention) */
	uint64_t keep_last;
	uint64_t keep_every;
	const uint64_t *keep_steps;
	size_t n_keep_steps;
	int64_t now;               /* unix seconds keep_within counts back from (0: the current time) */
	int64_t keep_within;       /* seconds (0: none) */
	uint64_t keep_hourly, keep_daily, keep_weekly;
	uint64_t keep_monthly, keep_yearly;
	const char *const *keep_tags; /* NULL, or n_keep_tags tags */
	size_t n_keep_tags;
} ckpt_retention;

/* How gc chooses the packs it compacts (restic's prune --max-unused, borg compact --threshold).
 * Every pack whose live share is below compact_below is compacted (its live records copied to a
 * new pack, the manifests that name it rewritten atomically, each at most once per run, then the
 * old pack removed); then, while the garbage left in partly live packs is more than max_unused of
 * the pack bytes left, the pack with the most garbage is compacted too. NULL means
 * {compact_below 0, max_unused CKPT_GC_MAX_UNUSED_DEFAULT}. */
typedef struct ckpt_gc_policy {
	size_t struct_size;   /* sizeof(ckpt_gc_policy) */
	double compact_below; /* 0 to 1; 0: no pack by this rule */
	double max_unused;    /* 0 to 1; 1: no limit */
	ckpt_progress_fn on_progress; /* NULL, or called as compaction copies (record bytes) */
	void *progress_arg;
} ckpt_gc_policy;
#define CKPT_GC_MAX_UNUSED_DEFAULT 0.10 /* what ckptctl gc uses unless told otherwise */

/* Flags of ckpt_store_prune(), ckpt_store_gc() and ckpt_store_delete(). */
#define CKPT_GC_DRY_RUN 1 /* report what would be done, change nothing */
#define CKPT_GC_FORCE 2   /* proceed although some manifests are damaged (their chunks may go) */
#define CKPT_GC_NEWEST 4  /* delete: the newest valid checkpoint may go too */
#define CKPT_GC_REMOTE 8  /* act on the store's remote (ckpt_remote_open) instead of the local
			   * store: its manifests, packs and part files; local ones are untouched */

/* The rule that keeps a checkpoint (ckpt_report.choices). */
typedef enum ckpt_keep_rule {
	CKPT_KEEP_NONE = 0, /* no rule keeps it: prune removes it */
	CKPT_KEEP_WITHIN,   /* keep_within */
	CKPT_KEEP_LAST,     /* keep_last */
	CKPT_KEEP_HOURLY,
	CKPT_KEEP_DAILY,
	CKPT_KEEP_WEEKLY,
	CKPT_KEEP_MONTHLY,
	CKPT_KEEP_YEARLY,
	CKPT_KEEP_TAG,      /* keep_tags */
	CKPT_KEEP_EVERY,    /* keep_every */
	CKPT_KEEP_STEP,     /* keep_steps */
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

/* What a prune, gc or delete did (or, with CKPT_GC_DRY_RUN, would do), local or remote. Allocated
 * by the library: free it with ckpt_report_free(). */
typedef struct ckpt_report {
	uint64_t *steps_removed;    /* checkpoints removed (or that would be), ascending */
	size_t n_steps_removed;
	ckpt_prune_choice *choices; /* prune: every checkpoint's fate, ascending by step (damaged
				     * ones too) */
	size_t n_choices;
	uint64_t packs_removed;
	uint64_t packs_compacted;
	uint64_t manifests_rewritten;
	uint64_t parts_removed;     /* part files of multi-rank checkpoints (pruned ones, saves that
				     * never committed) */
	uint64_t leftovers_removed; /* temporary files of interrupted saves (parts_removed included);
				     * remote: leftovers of puts killed longer than the grace age ago
				     * (a directory's temporary files, an S3 server's incomplete
				     * multipart uploads) */
	uint64_t leftover_bytes;    /* remote: their bytes (unknown for S3: 0) */
	uint64_t bytes_freed;       /* file bytes freed (or that would be) */
	uint64_t bytes_copied;      /* record bytes copied by compaction */
	/* Files in pack directories that are not provably this store's packs (a name other than
	 * the canonical NNNNNNNN.pack, a header naming another store or pack, an unreadable header,
	 * the same pack id twice): never removed nor compacted; left_alone names the first and why. */
	uint64_t files_left_alone;
	char *left_alone;
	/* Packs left in place because an open reader (in any process) may still read them; reader
	 * names the first such reader ("process P on host H (reader of step S since T)", or its lease
	 * file). A later gc removes them once no reader needs them (docs/format.md, leases). */
	uint64_t packs_deferred;
	char *reader;
	/* Unreferenced packs left in place because a save (remote: an upload) is in flight: it may
	 * reference them when it commits. While one is, local gc removes no unreferenced pack,
	 * compacts nothing and removes no leftover; in_flight names the first such save. */
	uint64_t packs_spared;
	char *in_flight;
	uint64_t uploads_in_flight; /* remote: live upload markers seen */
} ckpt_report;

/* Removes the checkpoints the retention does not keep (their manifests first, durably), then runs
 * gc with policy gc (NULL: unreferenced packs only, no compaction), under one writer lock. flags:
 * CKPT_GC_DRY_RUN, CKPT_GC_FORCE, CKPT_GC_REMOTE (then gc must be NULL: a remote is not
 * compacted). While a manifest is damaged nothing is removed unless CKPT_GC_FORCE: -CKPT_E_CORRUPT
 * naming them. A kill at any point leaves every remaining checkpoint intact. With
 * CKPT_GC_DRY_RUN (local store) the report's choices also say which rule keeps each checkpoint.
 * Returns 0 and
 * sets *report (may be NULL), or -CKPT_E_INVAL (NULL retention, a negative keep_within, a bad
 * tag, a value out of range, an unknown struct_size), -CKPT_E_BUSY, -CKPT_E_CORRUPT, -CKPT_E_PERM,
 * -CKPT_E_STATE (CKPT_GC_REMOTE without a remote), -CKPT_E_IO or the remote's error. */
CKPT_API int ckpt_store_prune(ckpt_store *store, const ckpt_retention *retention,
			      const ckpt_gc_policy *gc, int flags, ckpt_report **report);

/* Removes packs no valid checkpoint references and the temporary files of interrupted saves,
 * and compacts packs by policy gc (NULL: as documented at ckpt_gc_policy). With CKPT_GC_REMOTE:
 * removes this store's objects on the remote that no remote manifest references (packs, part files
 * of steps without a manifest, dead upload and gc markers, leftovers of puts killed longer than
 * CKPT_OPT_GC_GRACE_S ago); only keys under this store's id are touched; gc must be NULL. Takes
 * the store's writer lock. Returns as ckpt_store_prune(). */
CKPT_API int ckpt_store_gc(ckpt_store *store, const ckpt_gc_policy *gc, int flags,
			   ckpt_report **report);

/* Removes the checkpoints of the n steps given (valid or damaged manifests), then what gc (NULL:
 * unreferenced packs only) collects, under one lock. Refuses, removing nothing, with
 * -CKPT_E_INVAL when that would remove the newest valid checkpoint (unless CKPT_GC_NEWEST), and
 * -CKPT_E_NOTFOUND for a step without a manifest (the message lists the steps that exist).
 * CKPT_GC_REMOTE is not supported here (-CKPT_E_UNSUPPORTED: prune the remote instead). Otherwise
 * returns as ckpt_store_prune(). */
CKPT_API int ckpt_store_delete(ckpt_store *store, const uint64_t *steps, size_t n,
			       const ckpt_gc_policy *gc, int flags, ckpt_report **report);

/* Frees a report; accepts NULL. */
CKPT_API void ckpt_report_free(ckpt_report *report);

/* ---------------------------------------------------------------------------------------------
 * Remote tier: a second copy of a store's checkpoints on a remote, so that they survive losing
 * the node. A remote is named by a url: file:///dir or an absolute path (a directory on a shared
 * file system: Lustre, GPFS, NFS), or s3://bucket/prefix (docs/remote-s3.md). Several stores may
 * share one remote (one bucket prefix): each keeps its objects under its store id (the uuid in
 * the store header, 32 hex digits), and none ever reads or deletes another's (docs/format.md,
 * "Remote layout"). A checkpoint exists on the remote only once its manifest is there, which is
 * put after every pack it references. Prune and gc of a remote: ckpt_store_prune() and
 * ckpt_store_gc() with CKPT_GC_REMOTE.
 * ------------------------------------------------------------------------------------------- */
typedef struct ckpt_remote ckpt_remote;

/* ckpt_remote_open() flags.
 * CKPT_REMOTE_UPLOAD: upload every checkpoint in the background once it is durable locally (the
 * next save is never held), several packs in parallel; and, at once, the local checkpoints the
 * remote lacks, newest first: so a killed or failed upload resumes from what the remote holds. A
 * multi-rank checkpoint is uploaded by every rank whose store has this remote: each puts the packs
 * of its own pack id range and its part, rank 0 then what is missing and the manifest last; rank 0
 * waits for a rank that makes no progress at most CKPT_REMOTE_SHARE_WAIT_S seconds (environment;
 * default 300), then sends its share itself.
 * CKPT_REMOTE_READ: readers of the store read every checkpoint from the remote, local or not (its
 * manifest and each record it references, checked): to check the remote's copy itself. */
enum {
	CKPT_REMOTE_UPLOAD = 1u << 0,
	CKPT_REMOTE_READ = 1u << 1,
};

/* Opens the remote at url for store (a store has at most one: a remote already open is closed
 * first, as ckpt_remote_close() does). Opening checks that the remote answers. From then on the
 * store's readers read a checkpoint that is not local (or a pack missing locally) from the remote
 * (ckpt_reader_open). Call it while no save of the store is in flight. The remote belongs to the
 * store: ckpt_store_close() closes it too. Returns 0 and sets *out, or -CKPT_E_INVAL (a malformed
 * url or unknown scheme, naming the known ones; unknown flags), -CKPT_E_NOTFOUND (no such directory
 * or bucket), -CKPT_E_PERM, -CKPT_E_IO, -CKPT_E_NOMEM. */
CKPT_API int ckpt_remote_open(ckpt_store *store, const char *url, unsigned flags,
			      ckpt_remote **out);
/* Closes the remote and detaches it from its store; accepts NULL. Uploads in flight are canceled,
 * to resume later from what the remote holds (ckpt_remote_wait() first finishes them). */
CKPT_API void ckpt_remote_close(ckpt_remote *remote);
/* The remote's url as opened; valid until it is closed. */
CKPT_API const char *ckpt_remote_url(const ckpt_remote *remote);

/* Counts of one push or pull. */
typedef struct ckpt_remote_stats {
	size_t struct_size;                    /* sizeof(ckpt_remote_stats), set by the caller */
	uint64_t packs_sent, bytes_sent;       /* push: uploaded; pull: downloaded */
	uint64_t packs_present, bytes_present; /* already at the destination, not sent */
} ckpt_remote_stats;

/* Uploads checkpoint step (or CKPT_STEP_LATEST) to the remote, on the caller's thread: the packs it
 * references that the remote lacks (each checked by size once put), a multi-rank checkpoint's part
 * files, then its manifest. A pack already on the remote is not sent again (packs_present); one
 * there under the same id with other contents is never replaced (-CKPT_E_CORRUPT naming it and
 * every recorded writer of the store id). stats and progress may be NULL. Returns 0 (also when the
 * remote had it whole), -CKPT_E_NOTFOUND (no such local checkpoint, or a pack of it missing
 * locally), -CKPT_E_NOSPC (remote full), -CKPT_E_CANCELED, or the remote's error; the message
 * names the object and the cause. After a failure the remote lists no part of it. */
CKPT_API int ckpt_remote_push(ckpt_remote *remote, uint64_t step, ckpt_remote_stats *stats,
			      ckpt_progress_fn progress, void *arg);
/* Brings checkpoint step (or CKPT_STEP_LATEST: the remote's newest whose manifest is intact) of the
 * remote into the local store: the packs it needs that are missing locally (each record it
 * references checked against its digest, its padding and the pack's record walk, before the pack
 * is linked into place, never over a file), its part files (each checked against the global
 * manifest's record of it), then its manifest last; under the store's writer lock. A local pack of
 * an id it needs counts as present only once the records it names there check out. *pulled (may
 * be NULL) gets the step. Returns 0 (also when it was local already), -CKPT_E_NOTFOUND (not on the
 * remote), -CKPT_E_CHECKSUM / -CKPT_E_CORRUPT (a damaged remote object, a pack or part it names
 * missing there, or a local pack of an id it needs that is another pack: nothing of it is kept),
 * -CKPT_E_BUSY, -CKPT_E_CANCELED, or an I/O error. */
CKPT_API int ckpt_remote_pull(ckpt_remote *remote, uint64_t step, uint64_t *pulled,
			      ckpt_remote_stats *stats, ckpt_progress_fn progress, void *arg);

/* Upload states of a checkpoint (ckpt_remote_state). */
enum {
	CKPT_UPLOAD_LOCAL = 0,     /* only in the local store */
	CKPT_UPLOAD_UPLOADING = 1, /* queued for the background upload, or being uploaded */
	CKPT_UPLOAD_REMOTE = 2,    /* its manifest, and so every pack it needs, is on the remote */
};
/* Returns the upload state of checkpoint step (CKPT_UPLOAD_*), or -CKPT_E_NOTFOUND (neither local
 * nor on the remote), or the remote's error. */
CKPT_API int ckpt_remote_state(ckpt_remote *remote, uint64_t step);
/* Waits until checkpoint step is on the remote (CKPT_STEP_LATEST: until the background upload has
 * nothing queued), at most timeout_ms (negative: no limit). On a rank other than 0 of a multi-rank
 * checkpoint: until its own share is up, then (for a step) until rank 0 has put the manifest,
 * polling the remote; LATEST waits for its own shares only. Returns 0; the error of its last failed
 * upload attempt; -CKPT_E_BUSY (still uploading at the deadline); -CKPT_E_STATE (a local
 * checkpoint that is not queued: no CKPT_REMOTE_UPLOAD). */
CKPT_API int ckpt_remote_wait(ckpt_remote *remote, uint64_t step, int64_t timeout_ms);
/* ckpt_store_list() of the checkpoints on the remote (their manifests fetched and decoded; an
 * invalid one listed with info.error when include_invalid), ascending. Free with ckpt_info_free().
 * Returns the count, or the remote's error. */
CKPT_API long ckpt_remote_list(ckpt_remote *remote, int include_invalid, ckpt_info **out);

/* Binds a fresh local store to a store on remote url (the node-loss path): creates the store
 * directory path with the remote store's header (so both are one store: same id, chunk size and
 * compression), or accepts a store at path that has that header already, or completes what an
 * adopt killed before it wrote the header left there. store_id NULL: the remote's only store. Then
 * opens it, opens the remote and pulls the newest checkpoint. Returns 0, or -CKPT_E_NOTFOUND (no
 * store on the remote), -CKPT_E_INVAL (several stores there and store_id NULL: the message lists
 * them; a malformed id), -CKPT_E_EXISTS (path holds another store, or files that are not a
 * store's), -CKPT_E_CORRUPT (a remote header that is not its id's store's), or an I/O or remote
 * error. */
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
 * What may still change before 1.0 (the symbols stay in the version script; a change is a new
 * name). */

/* After a submit with CKPT_SAVE_DEFER: lets this rank's commit go on. rc 0: the part's outcome
 * goes to the commit as it is; a negative CKPT_E_* code: this rank fails the save with that code
 * and why (NULL: a default text), so every rank's wait fails naming it and no checkpoint is made.
 * Metadata set before the release goes into the global manifest (rank 0's). A deferred save waited
 * for or aborted before its release fails as if released with -CKPT_E_STATE. May be called from
 * any thread, once. Returns 0, -CKPT_E_STATE (not submitted with CKPT_SAVE_DEFER, released
 * already) or -CKPT_E_INVAL (rc > 0). */
CKPT_API int ckpt_save_release(ckpt_save *save, int rc, const char *why);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_H */
