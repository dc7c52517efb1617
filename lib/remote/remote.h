/* A remote: a flat namespace of immutable objects named by keys ("S/packs/00000001.pack"), behind
 * one ops table, so that the tier above (uploads, pulls, remote reads) never knows whether it
 * talks to S3 or to a directory on a shared file system. Internal to lib/.
 *
 * The contract every backend keeps (the tier's crash safety rests on it):
 * - put is all or nothing: after a failed or killed put the key is absent or holds its previous
 *   complete object, never a prefix (S3: a single PUT or a completed multipart upload; a
 *   directory: a temporary file, fsync, rename).
 * - RMT_PUT_NOREPLACE: the put fails with -CKPT_E_EXISTS when the key exists. Backends that
 *   cannot make that atomic (S3 servers without conditional writes) check first and say so in
 *   rmt_caps; the tier only relies on it where the caps promise it.
 * - get reads [off, off + len) of an object; a short object is -CKPT_E_CORRUPT, a missing one
 *   -CKPT_E_NOTFOUND. Every error message names the object (bucket/key or path) and the cause
 *   (HTTP status and the server's error code, or errno), through ckpt_fail().
 * - list calls cb for every key under a prefix, in no promised order; cb returning non-zero stops
 *   the listing and list returns that value.
 * - Transient failures (timeouts, connection refused or reset, HTTP 5xx, 429) are retried inside
 *   the backend with exponential backoff up to cfg.retries times; what reaches the caller is
 *   final. A request that moves no byte for cfg.timeout_s fails (an endpoint that stopped
 *   answering fails each request within (retries + 1) timeouts and the backoffs: the exact
 *   bounds are in docs/remote-s3.md). Every function may be called from several threads at once
 *   on one handle.
 */
#ifndef CKPT_REMOTE_H
#define CKPT_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

struct rmt;

/* Settings common to every backend; zero means the default. */
struct rmt_config {
	unsigned parallel;        /* requests in flight for one large object (multipart); default 4 */
	unsigned retries;         /* attempts after the first for a transient failure; default 5 */
	uint64_t part_size;       /* multipart part size in bytes; default 64 MiB (S3 minimum 5 MiB) */
	uint64_t bandwidth;       /* bytes/s cap on uploads, summed over the handle's threads; 0: none */
	unsigned timeout_s;       /* a request that makes no progress for this long fails; default 60 */
	unsigned connect_timeout_s; /* default 10 */
};

/* What a backend promises beyond the contract above. */
enum rmt_caps {
	RMT_CAP_ATOMIC_NOREPLACE = 1u << 0, /* RMT_PUT_NOREPLACE is atomic against concurrent puts */
	RMT_CAP_RANGE = 1u << 1,            /* get of a range costs that range, not the object */
};

enum rmt_put_flags {
	RMT_PUT_NOREPLACE = 1u << 0,
};

/* The bytes of a put: a buffer, or [off, off + len) of an open file (read with pread, so the
 * caller's offset is untouched and several puts may share one fd). */
struct rmt_src {
	const void *buf; /* NULL: read from fd */
	int fd;
	uint64_t off;
	uint64_t len;
};

struct rmt_obj {
	const char *key;  /* relative to the remote's prefix */
	uint64_t size;
	int64_t mtime;    /* unix seconds, 0 when unknown */
};

typedef int (*rmt_list_cb)(void *arg, const struct rmt_obj *obj);

/* Progress of a long put or get: called from the calling thread (or a transfer thread of the same
 * call) with the bytes moved so far; returning non-zero cancels the call (-CKPT_E_CANCELED). It is
 * also called with done unchanged while a request waits for its answer (S3: about every 0.2 s to
 * 1 s), so that a cancel takes effect in flight, not only when bytes move. */
typedef int (*rmt_progress_cb)(void *arg, uint64_t done, uint64_t total);

/* The bound of a cleanup request (rmt_del_cleanup, the abort of a failed multipart upload): one
 * attempt of at most min(cfg.timeout_s, RMT_CLEANUP_S) seconds, connection included. */
#define RMT_CLEANUP_S 5

struct rmt_ops {
	const char *scheme; /* "s3", "file" */
	/* Opens the remote named by url (scheme://...). Returns 0 and sets *out, or -CKPT_E_INVAL (a
	 * malformed url), -CKPT_E_NOTFOUND (no such bucket or directory), -CKPT_E_PERM (credentials
	 * refused), -CKPT_E_IO (unreachable). Opening checks that the remote answers. */
	int (*open)(const char *url, const struct rmt_config *cfg, struct rmt **out);
	void (*close)(struct rmt *r);
	unsigned (*caps)(struct rmt *r);
	int (*put)(struct rmt *r, const char *key, const struct rmt_src *src, unsigned flags,
		   rmt_progress_cb progress, void *arg);
	int (*get)(struct rmt *r, const char *key, uint64_t off, uint64_t len, void *buf);
	/* Sets *size (and *mtime when not NULL). -CKPT_E_NOTFOUND when absent. */
	int (*stat)(struct rmt *r, const char *key, uint64_t *size, int64_t *mtime);
	int (*list)(struct rmt *r, const char *prefix, rmt_list_cb cb, void *arg);
	/* Deleting a missing key succeeds (as S3's DELETE does). */
	int (*del)(struct rmt *r, const char *key);
	/* Optional (NULL: del is bounded already, as a directory's is): del as the cleanup after a
	 * failed or canceled transfer (an upload marker): a single attempt bounded as RMT_CLEANUP_S
	 * says, no retries, and not stopped by rmt_cancel. Callers use rmt_del_cleanup. */
	int (*del_cleanup)(struct rmt *r, const char *key);
	/* Optional (NULL: the backend leaves nothing behind): removes what killed puts of this
	 * backend left under prefix (a key prefix as list takes, "" for all) that is older than
	 * older_than_s seconds: a directory's dot temporaries (regular files named as put names
	 * them, links never followed), S3's incomplete multipart uploads (initiated before then,
	 * aborted). Objects are never touched. Adds what it removed to *removed and their bytes to
	 * *bytes (S3: the parts' bytes are not known, 0). Returns 0, or the first failure's
	 * -CKPT_E_* after removing what it could. A put still running is safe when older_than_s is
	 * longer than a put can last (the tier's gc uses its grace period). */
	int (*sweep)(struct rmt *r, const char *prefix, int64_t older_than_s, uint64_t *removed,
		     uint64_t *bytes);
};

/* Every handle starts with this; a backend's own state follows in its private struct. */
struct rmt {
	const struct rmt_ops *ops;
	char *url;                 /* as given */
	struct rmt_config cfg;     /* with the defaults filled in */
	int canceled;              /* atomic: rmt_cancel was called */
};

/* Stops every request of r in flight, and fails those that start later, with -CKPT_E_CANCELED,
 * as soon as the backend can (S3: within about a second, even while waiting for an answer; a
 * directory: between the chunks of a put's copy); cleanups excepted (rmt_del_cleanup and the
 * abort of a multipart upload still get their one bounded attempt). For a close that must not
 * wait on a stalled endpoint: call it, join the threads that use r, then rmt_close. Cannot be
 * undone. Thread-safe. */
static inline void rmt_cancel(struct rmt *r)
{
	__atomic_store_n(&r->canceled, 1, __ATOMIC_RELEASE);
}

static inline int rmt_canceled(const struct rmt *r)
{
	return __atomic_load_n(&r->canceled, __ATOMIC_ACQUIRE);
}

/* Fills the zero fields of cfg with the defaults stated above (rmt_open does it; a backend's own
 * open too, for callers that open it directly). Inline: remote.c dispatches to the backends, so
 * they cannot call into it without a cycle. */
static inline void rmt_config_defaults(struct rmt_config *cfg)
{
	if (!cfg->parallel)
		cfg->parallel = 4;
	if (!cfg->retries)
		cfg->retries = 5;
	if (!cfg->part_size)
		cfg->part_size = 64ull << 20;
	if (!cfg->timeout_s)
		cfg->timeout_s = 60;
	if (!cfg->connect_timeout_s)
		cfg->connect_timeout_s = 10;
}

extern const struct rmt_ops rmt_file_ops; /* file:///abs/dir, or an absolute path */
extern const struct rmt_ops rmt_s3_ops;   /* s3://bucket/prefix */

/* Picks the backend by the url's scheme and opens it (an absolute path is file://). Fills the
 * config's defaults first. Returns as the backend's open does; -CKPT_E_INVAL for an unknown
 * scheme, naming the schemes there are. */
int rmt_open(const char *url, const struct rmt_config *cfg, struct rmt **out);
void rmt_close(struct rmt *r);
/* r's del_cleanup, or its del where it has none. */
int rmt_del_cleanup(struct rmt *r, const char *key);

#endif
