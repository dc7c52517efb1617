/* The public store handle: ckpt_store_open, ckpt_store_close and ckpt_store_reserve. The top of
 * lib/'s one-way module graph (handle -> save -> pipeline -> store): a handle is the store plus
 * the save layer's state (struct save_store: live saves, the pipeline), so the store below never
 * learns of saves, and closing drains the saves and stops the pipeline before the store goes. */
#include <stdlib.h>

#include "common/common.h"
#include "save/pipeline.h"
#include "save/save.h"
#include "store/store.h"

CKPT_API int ckpt_store_open(const char *path, const ckpt_options *opts, ckpt_store **out)
{
	*out = NULL;
	if (!path || !*path)
		return ckpt_fail(CKPT_E_INVAL, "store path is empty");
	struct save_store *ss = calloc(1, sizeof *ss);
	if (!ss)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	pthread_mutex_init(&ss->mu, NULL);
	int rc = store_init(&ss->store, path, opts);
	if (rc) {
		ckpt_store_close(&ss->store);
		return rc;
	}
	*out = &ss->store;
	return 0;
}

CKPT_API void ckpt_store_close(ckpt_store *s)
{
	if (!s)
		return;
	struct save_store *ss = save_store_of(s);
	/* Saves in flight are finished (a trainer that closes right after submitting still gets
	 * its checkpoint); saves never submitted are aborted. Their handles die with the store. */
	save_drain(ss);
	pipe_destroy(ss->pipe);
	ss->pipe = NULL;
	pthread_mutex_destroy(&ss->mu);
	free(s->api_remote);
	store_fini(s);
	free(ss);
}

/* Allocates (and pins) the staging pool now instead of in the first save. ss->mu keeps saves
 * from beginning meanwhile, and a pool is only replaced while no save of the handle is live. */
CKPT_API int ckpt_store_reserve(ckpt_store *s, uint64_t pool_bytes)
{
	if (!s)
		return ckpt_fail(CKPT_E_INVAL, "reserve: NULL store");
	if (s->opt.read_only)
		return ckpt_fail(CKPT_E_PERM, "%s: opened read-only: no staging pool to reserve",
				 s->path);
	if (pool_bytes && pool_bytes < (1u << 20))
		return ckpt_fail(CKPT_E_INVAL, "reserve: pool of %llu bytes: must be at least 1 MiB",
				 (unsigned long long)pool_bytes);
	uint64_t want = pool_bytes ? pool_bytes : s->opt.pool_size;
	uint64_t bytes = pipe_pool_bytes_for(s, want);
	struct save_store *ss = save_store_of(s);
	int rc = 0;
	pthread_mutex_lock(&ss->mu);
	struct pipe *p = ss->pipe;
	if (p && pipe_pool_bytes(p) >= bytes) {
		rc = 0; /* large enough already */
	} else if (p && ss->live) {
		rc = ckpt_fail(CKPT_E_BUSY, "%s: cannot grow the staging pool (%llu to %llu bytes) "
			       "while a save is in flight", s->path,
			       (unsigned long long)pipe_pool_bytes(p), (unsigned long long)bytes);
	} else {
		s->opt.pool_size = want;
		if ((rc = pipe_replace(s, &ss->pipe, want)))
			ckpt_fail_prefix("%s: reserving the staging pool", s->path);
	}
	pthread_mutex_unlock(&ss->mu);
	return rc;
}
