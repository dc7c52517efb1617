/* The events of a store handle and who listens to them (hooks.c). The layers above the store
 * (lib/tier: a remote's background upload and its reads) register a listener, so that store,
 * save, read and dist tell them what happens and ask them for what is not local without calling
 * up into them: the listener's functions are pointers, and nothing below tier/ names tier/.
 * Internal to lib/. */
#ifndef CKPT_HOOKS_H
#define CKPT_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ckpt_store;
struct manifest;

/* What a listener does, each NULL when it does not; ctx is the listener's. None may block. */
struct store_listener_ops {
	/* A checkpoint of this handle is durable: a one-process manifest, rank 0's global
	 * manifest. */
	void (*commit)(void *ctx, uint64_t step);
	/* A multi-rank checkpoint is durable: runs on rank 0 after the global commit (sharing[r]:
	 * rank r uploads its own packs to the same remote) and, with sharing NULL, on every other
	 * rank whose upload key is rank 0's (store_upload_key). */
	void (*commit_dist)(void *ctx, uint64_t step, int rank, unsigned world, const bool *sharing);
	/* Readers: manifest(ctx, step or CKPT_STEP_LATEST, m) fetches a checkpoint's manifest that
	 * is not local, pack(ctx, m, id, what, len) a pack that is not local: the fd of an anonymous
	 * file holding the pack's header and the records m references, range-read and each checked
	 * against its digest (what gets the remote object's name). Both return 0 / the fd, or
	 * -CKPT_E_*. */
	int (*manifest)(void *ctx, uint64_t step, struct manifest *m);
	int (*pack)(void *ctx, const struct manifest *m, uint32_t id, char *what, size_t len);
	/* The listener is removed (store_unlisten; store_fini, first of all, since a remote's
	 * uploads read the store's paths): it may free ctx and the listener itself. */
	void (*close)(void *ctx);
};

/* A listener: memory its owner keeps (usually inside ctx) until ops->close. */
struct store_listener {
	const struct store_listener_ops *ops;
	void *ctx;
	bool read_first;           /* CKPT_REMOTE_READ: readers fetch from it even what is local */
	uint64_t upkey;            /* non-zero: it uploads in the background to the remote of this
				    * identity (a hash of its url), which each rank tells rank 0 */
	struct store_listener *next;
};

/* The listeners of a handle, in the order they were registered. Listeners come and go while
 * no save, reader or commit of the handle runs. */
struct store_hooks {
	struct store_listener *list;
	uint64_t upkey;            /* the listeners' upload key (atomic: dist.c reads it) */
};

/* Closes every listener (store_fini). */
void store_hooks_fini(struct store_hooks *h);

/* Registers l (its ops, ctx and flags set). */
void store_listen(struct ckpt_store *s, struct store_listener *l);
/* Unregisters l (NULL: nothing), calling its ops->close. */
void store_unlisten(struct ckpt_store *s, struct store_listener *l);
/* The ctx of the first listener whose ops are ops, or NULL: how an owner finds its own. */
void *store_listener_ctx(const struct ckpt_store *s, const struct store_listener_ops *ops);

/* Events: checkpoint step is durable (ops->commit), a multi-rank one is (ops->commit_dist). */
void store_notify_commit(struct ckpt_store *s, uint64_t step);
void store_notify_dist(struct ckpt_store *s, uint64_t step, int rank, unsigned world,
		       const bool *sharing);
/* The upload key of the handle's listeners, 0 when none uploads (atomic). */
uint64_t store_upload_key(const struct ckpt_store *s);

/* Readers: whether a listener fetches what is not local (ops->manifest and ops->pack), and
 * whether readers ask it even for what is (read_first). The fetches ask that listener (its
 * ops->manifest, ops->pack); without one they return -CKPT_E_NOTFOUND. */
bool store_remote_reads(const struct ckpt_store *s);
bool store_remote_first(const struct ckpt_store *s);
int store_remote_manifest(struct ckpt_store *s, uint64_t step, struct manifest *m);
int store_remote_pack(struct ckpt_store *s, const struct manifest *m, uint32_t id, char *what,
		      size_t len);

#endif
