/* The public remote handle: a store's remote (tier/) as an object of its own. A store has at
 * most one; the handle is a plain allocation the store frees at close, so that a caller who
 * closes the store without closing the remote leaks nothing. */
#include <stdlib.h>

#include "api/api.h"
#include "store/store.h"

struct ckpt_remote {
	ckpt_store *s;
};

CKPT_API int ckpt_remote_open(ckpt_store *s, const char *url, unsigned flags, ckpt_remote **out)
{
	if (!out || !s || !url)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_remote_open: NULL argument");
	*out = NULL;
	if (flags & ~(unsigned)(CKPT_REMOTE_UPLOAD | CKPT_REMOTE_READ))
		return ckpt_fail(CKPT_E_INVAL, "unknown remote flags 0x%x", flags);
	ckpt_remote *r = s->api_remote;
	if (!r && !(r = calloc(1, sizeof *r)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	r->s = s;
	s->api_remote = r;
	int rc = rstore_set(s, url, flags);
	if (rc) {
		(void)rstore_set(s, NULL, 0);
		s->api_remote = NULL;
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

CKPT_API void ckpt_remote_close(ckpt_remote *r)
{
	if (!r)
		return;
	(void)rstore_set(r->s, NULL, 0);
	r->s->api_remote = NULL;
	free(r);
}

CKPT_API const char *ckpt_remote_url(const ckpt_remote *r)
{
	return rstore_url(r->s);
}

/* push and pull fill the caller's stats through a full copy (struct_size). */
static int stats_ok(const ckpt_remote_stats *st)
{
	return st ? api_size_ok(st->struct_size, sizeof *st, "ckpt_remote_stats") : 0;
}

CKPT_API int ckpt_remote_push(ckpt_remote *r, uint64_t step, ckpt_remote_stats *stats,
			      ckpt_progress_fn progress, void *arg)
{
	ckpt_remote_stats st = {.struct_size = sizeof st};
	int rc = stats_ok(stats);
	if (rc)
		return rc;
	rc = rstore_push(r->s, step, &st, progress, arg);
	if (stats) {
		st.struct_size = sizeof st;
		api_copy_out(stats, &st, sizeof st);
	}
	return rc;
}

CKPT_API int ckpt_remote_pull(ckpt_remote *r, uint64_t step, uint64_t *pulled,
			      ckpt_remote_stats *stats, ckpt_progress_fn progress, void *arg)
{
	ckpt_remote_stats st = {.struct_size = sizeof st};
	int rc = stats_ok(stats);
	if (rc)
		return rc;
	rc = rstore_pull(r->s, step, pulled, &st, progress, arg);
	if (stats) {
		st.struct_size = sizeof st;
		api_copy_out(stats, &st, sizeof st);
	}
	return rc;
}

CKPT_API int ckpt_remote_state(ckpt_remote *r, uint64_t step)
{
	return rstore_upload_state(r->s, step);
}

CKPT_API int ckpt_remote_wait(ckpt_remote *r, uint64_t step, int64_t timeout_ms)
{
	return rstore_wait_uploaded(r->s, step, timeout_ms);
}

CKPT_API long ckpt_remote_list(ckpt_remote *r, int include_invalid, ckpt_info **out)
{
	return rstore_list(r->s, include_invalid, out);
}
