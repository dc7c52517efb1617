/* The store: struct ckpt_store and what it is made of (the layout, the writer lock, pack ids,
 * the dedup index, the pinned cache, the listeners: one header each), its open and close, and
 * the manifests on disk. Internal to lib/. */
#ifndef CKPT_STORE_H
#define CKPT_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "format/format.h"
#include "io/io.h"
#include "store/hooks.h"
#include "store/index.h"
#include "store/layout.h"
#include "store/lock.h"
#include "store/packids.h"
#include "store/pins.h"

struct ckpt_options {
	int create;
	int read_only;
	int direct_io;
	int overwrite;
	int64_t chunk_size; /* 0: the store's */
	int compress;       /* -1: the store's */
	int zstd_level;     /* 0: the store's */
	uint64_t io_size;
	uint64_t pack_size;
	unsigned threads;   /* 0: online cores */
	uint64_t pool_size;
	unsigned queue_depth;
	int engine;
	int64_t lock_wait_ms; /* 0: a busy lock refuses at once */
	int64_t gc_grace_s;   /* in-flight markers of other nodes older than this are dead */
	unsigned remote_parallel;  /* 0: the remote's default */
	uint64_t remote_bandwidth; /* bytes/s, 0: no cap */
	unsigned ndata_dirs;
	char *data_dirs[MAX_DATA_DIRS];
};

/* The store of one handle: where it is, its header and options, and its parts, each an object
 * with its own init/fini in its own file. It knows nothing of saves: the public handle (handle.c)
 * wraps it with the save layer's state (save.h, struct save_store), and the layers above hear of
 * its events as listeners (hooks.h). */
struct ckpt_store {
	char *path;
	struct store_hdr hdr;
	struct ckpt_options opt;
	struct store_layout layout; /* its directories (layout.c) */
	struct store_lock lock;     /* the writer lock, its users, part mode, marker (lock.c) */
	struct store_packs packs;   /* new pack ids, O_DIRECT, the io ops (packids.c) */
	struct store_index index;   /* the dedup index (index.c, index_sync.c) */
	struct store_pins pins;     /* CUDA restores' pinned staging buffers (pins.c) */
	struct store_hooks hooks;   /* the listeners of its events: the remote tier (hooks.c) */
	/* The public remote handle of this store (lib/api: a plain allocation, freed at close). */
	void *api_remote;
};

/* Opens the store at path into *s (zeroed memory the caller owns: the public handle). On failure
 * s is left for store_fini. Returns 0 or -CKPT_E_*. */
int store_init(struct ckpt_store *s, const char *path, const ckpt_options *opts);
/* Releases what store_init set up (the writer lock included); s itself stays the caller's. */
void store_fini(struct ckpt_store *s);

/* Reads and decodes the manifest of step. Returns 0 or -CKPT_E_* (the message names the file). */
int store_load_manifest(struct ckpt_store *s, uint64_t step, struct manifest *m);

/* Lists the steps that have a manifest file, ascending. Returns the count or -CKPT_E_*. */
long store_steps(struct ckpt_store *s, uint64_t **steps);

/* The first write of the handle since the lock was free (s->lock.mu held, lock.users == 0): takes
 * the writer lock and looks at packs and manifests anew, since another process may have saved,
 * pruned or collected meanwhile (pack ids, the io ops, the dedup index). On failure the lock
 * is not held (index_sync.c). Returns 0 or -CKPT_E_*. */
int store_begin_write(struct ckpt_store *s);

/* ckpt_store_list's array (one block, freed by ckpt_info_free) for steps[0..n), each manifest
 * from load (a local or a remote one); a step whose manifest does not load is listed with its
 * error when include_invalid, else left out. Returns the count or -CKPT_E_*. */
int store_info_list(const uint64_t *steps, long n, int include_invalid,
		    int (*load)(void *arg, uint64_t step, struct manifest *m), void *arg,
		    ckpt_info **out);
/* Fills a ckpt_info from a decoded manifest. */
void store_info_of(const struct manifest *m, ckpt_info *info);

#endif
