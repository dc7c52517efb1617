/* The remote tier's public API (include/ckpt.h, "Remote tier") and the background upload: one
 * thread per handle with CKPT_REMOTE_UPLOAD, taking steps from a FIFO that the store's commit event
 * (store_notify_commit, to the tier's listener) fills, each pushed with the remote's parallelism. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "common/hash.h"
#include "gc/gc.h"
#include "tier/tier.h"

struct tier_fail {
	uint64_t step;
	int rank; /* the job's: -1 a whole push, else this handle's share of a multi-rank one */
	int rc;
	char msg[512];
};

/* One upload: a whole push (rank -1), or the handle's share of a multi-rank checkpoint (rank
 * 0 also finishes it: sharing[r] for r < world says which ranks put their own shares). */
struct up_job {
	uint64_t step;
	int rank;
	unsigned world;
	bool *sharing;
};

struct tier_up {
	struct tier_ref ref;
	struct ckpt_store *s;
	bool upload;          /* CKPT_REMOTE_UPLOAD */
	bool stop;            /* atomic: cancels the push in flight (tier_push's cancel) */
	int64_t wait_ms;      /* rank 0: how long a sharing rank may make no progress */
	pthread_mutex_t mu;   /* everything below; a leaf */
	pthread_cond_t cv;    /* queue changes, a push ends */
	struct up_job *q;     /* uploads to do, FIFO */
	size_t nq, capq;
	bool busy;            /* cur is being pushed */
	struct up_job cur;
	uint64_t *done;       /* steps known to be on the remote */
	size_t ndone, capdone;
	uint64_t *shared;     /* multi-rank steps whose share this handle (rank > 0) put */
	size_t nshared, capshared;
	uint64_t *pending;    /* multi-rank steps to resume once the handle's rank is known */
	size_t npending, cappending;
	bool ranked;          /* a multi-rank commit told this handle its rank */
	struct tier_fail *fail; /* the last failure of each step that failed, until it succeeds */
	size_t nfail, capfail;
	bool has_thread;
	pthread_t th;
	ckpt_remote_stats sent; /* what the upload thread sent (tier_upload_stats) */
	uint64_t fetched; /* atomic: bytes readers read from the remote (tier_fetch_pack) */
	struct store_listener lis; /* the store's events and reads (tier_ops) */
};

static const struct store_listener_ops tier_ops;

/* The tier of handle s (its listener's), NULL when none is set. */
static struct tier_up *tier_of(const struct ckpt_store *s)
{
	return s ? store_listener_ctx(s, &tier_ops) : NULL;
}

static bool in(const uint64_t *v, size_t n, uint64_t x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

/* Under u->mu: appends x to v unless there (out of memory: left out, as a step not recorded). */
static void add(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
	if (!in(*v, *n, x) && !ckpt_grow((void **)v, cap, *n + 1, sizeof **v))
		(*v)[(*n)++] = x;
}

/* Under u->mu: whether step is queued or being pushed. */
static bool queued(const struct tier_up *u, uint64_t step)
{
	for (size_t i = 0; i < u->nq; i++)
		if (u->q[i].step == step)
			return true;
	return u->busy && u->cur.step == step;
}

static struct tier_fail *failure_of(struct tier_up *u, uint64_t step)
{
	for (size_t i = 0; i < u->nfail; i++)
		if (u->fail[i].step == step)
			return &u->fail[i];
	return NULL;
}

/* Under u->mu: queues an upload of step unless one is queued or it is known remote (or, for a
 * share, put). sharing (world entries, rank 0) is copied. */
static void enqueue(struct tier_up *u, uint64_t step, int rank, unsigned world, const bool *sharing)
{
	if (queued(u, step) || in(u->done, u->ndone, step) ||
	    (rank > 0 && in(u->shared, u->nshared, step)))
		return;
	struct up_job j = {.step = step, .rank = rank, .world = world};
	if (sharing && !(j.sharing = malloc(world * sizeof *sharing)))
		j.rank = -1; /* out of memory: a whole push, which needs no one */
	if (j.sharing)
		memcpy(j.sharing, sharing, world * sizeof *sharing);
	if (ckpt_grow((void **)&u->q, &u->capq, u->nq + 1, sizeof *u->q))
		free(j.sharing);
	else
		u->q[u->nq++] = j;
}

/* Whether checkpoint step is still in the local store (a push that failed because it was pruned
 * or deleted meanwhile is no failure: there is nothing left to upload). */
static bool still_local(struct ckpt_store *s, uint64_t step)
{
	char name[64], p[4096];
	store_mf_name(step, name, sizeof name);
	snprintf(p, sizeof p, "%s/%s", s->layout.mf_dir, name);
	return access(p, F_OK) == 0;
}

/* Under u->mu: records the outcome of an upload of step (a share: rank > 0). */
static void record(struct tier_up *u, uint64_t step, int rank, int rc)
{
	struct tier_fail *f = failure_of(u, step);
	if (rc && !still_local(u->s, step)) {
		if (f)
			*f = u->fail[--u->nfail];
		return;
	}
	if (!rc) {
		if (f)
			*f = u->fail[--u->nfail];
		if (rank > 0)
			add(&u->shared, &u->nshared, &u->capshared, step);
		else
			add(&u->done, &u->ndone, &u->capdone, step);
		return;
	}
	if (!f && !ckpt_grow((void **)&u->fail, &u->capfail, u->nfail + 1, sizeof *u->fail))
		f = &u->fail[u->nfail++];
	if (f) {
		f->step = step;
		f->rank = rank > 0 ? rank : -1; /* rank 0's retry: a whole push, waiting for no one */
		f->rc = rc;
		snprintf(f->msg, sizeof f->msg, "%s", ckpt_errmsg());
	}
}

static void *upload_thread(void *arg)
{
	struct tier_up *u = arg;
	pthread_mutex_lock(&u->mu);
	while (!__atomic_load_n(&u->stop, __ATOMIC_ACQUIRE)) {
		if (!u->nq) {
			pthread_cond_wait(&u->cv, &u->mu);
			continue;
		}
		struct up_job j = u->q[0];
		memmove(u->q, u->q + 1, --u->nq * sizeof *u->q);
		u->busy = true;
		u->cur = j;
		pthread_mutex_unlock(&u->mu);
		ckpt_remote_stats st = {0};
		int rc = j.rank < 0 ? tier_push(u->s, &u->ref, j.step, &st, NULL, NULL, &u->stop)
			 : tier_push_dist(u->s, &u->ref, j.step, (unsigned)j.rank, j.sharing, j.world,
					  u->wait_ms, &st, &u->stop);
		free(j.sharing);
		pthread_mutex_lock(&u->mu);
		u->busy = false;
		u->sent.packs_sent += st.packs_sent;
		u->sent.bytes_sent += st.bytes_sent;
		u->sent.packs_present += st.packs_present;
		u->sent.bytes_present += st.bytes_present;
		if (rc != -CKPT_E_CANCELED) /* a canceled one resumes later from the remote */
			record(u, j.step, j.rank, rc);
		pthread_cond_broadcast(&u->cv);
	}
	pthread_mutex_unlock(&u->mu);
	return NULL;
}

void tier_upload_stats(struct ckpt_store *s, ckpt_remote_stats *st)
{
	struct tier_up *u = tier_of(s);
	*st = (ckpt_remote_stats){0};
	if (!u)
		return;
	pthread_mutex_lock(&u->mu);
	*st = u->sent;
	pthread_mutex_unlock(&u->mu);
}

/* Under u->mu: the failed uploads again, then the resumed multi-rank steps in the role the
 * handle now has (rank -1: it has none, they are pushed whole). */
static void requeue(struct tier_up *u, int rank, unsigned world, const bool *sharing)
{
	for (size_t i = 0; i < u->nfail; i++)
		enqueue(u, u->fail[i].step, u->fail[i].rank, 0, NULL);
	for (size_t i = 0; i < u->npending; i++)
		enqueue(u, u->pending[i], rank, world, sharing);
	u->npending = 0;
}

/* The store's commit events: queue the new checkpoint, and again those whose upload failed (a
 * handle without CKPT_REMOTE_UPLOAD only reads from the remote). */
static void on_commit(void *arg, uint64_t step)
{
	struct tier_up *u = arg;
	if (!u->upload)
		return;
	pthread_mutex_lock(&u->mu);
	requeue(u, -1, 0, NULL);
	enqueue(u, step, -1, 0, NULL);
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
}

static void on_commit_dist(void *arg, uint64_t step, int rank, unsigned world, const bool *sharing)
{
	struct tier_up *u = arg;
	if (!u->upload)
		return;
	pthread_mutex_lock(&u->mu);
	u->ranked = true;
	requeue(u, rank, world, sharing);
	enqueue(u, step, rank, world, sharing);
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
}

static void up_free(void *arg)
{
	struct tier_up *u = arg;
	if (!u)
		return;
	pthread_mutex_lock(&u->mu);
	__atomic_store_n(&u->stop, true, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
	/* The push in flight stops too, inside a request (a stat or get against a stalled endpoint
	 * would otherwise hold the close for the backend's whole retry cycle); the next handle
	 * resumes it. */
	if (u->ref.r)
		rmt_cancel(u->ref.r);
	if (u->has_thread)
		pthread_join(u->th, NULL);
	rmt_close(u->ref.r);
	pthread_mutex_destroy(&u->mu);
	pthread_cond_destroy(&u->cv);
	for (size_t i = 0; i < u->nq; i++)
		free(u->q[i].sharing);
	free(u->q);
	free(u->done);
	free(u->shared);
	free(u->pending);
	free(u->fail);
	free(u);
}

/* Whether local checkpoint step is a multi-rank one (a manifest that does not load: no). */
static bool multi_rank(struct ckpt_store *s, uint64_t step)
{
	struct manifest m;
	if (store_load_manifest(s, step, &m))
		return false;
	bool dist = tier_world(&m) > 0;
	manifest_free(&m);
	return dist;
}

/* Queues the local checkpoints the remote lacks, newest first (the resumption of an upload that
 * was killed or failed), and starts the thread. A multi-rank one waits until the handle's first
 * commit says its rank (every rank then puts its share again, rank 0 finishing), or is pushed
 * whole when the handle turns out to have none (a one-process commit, a wait). */
static int start_uploads(struct tier_up *u)
{
	uint64_t *local = NULL, *remote = NULL;
	long nl = store_steps(u->s, &local);
	long nr = nl < 0 ? 0 : tier_remote_steps(&u->ref, &remote);
	int rc = nl < 0 ? (int)nl : nr < 0 ? (int)nr : 0;
	for (long i = nl - 1; !rc && i >= 0; i--) {
		if (in(remote, (size_t)MAX(nr, 0), local[i]))
			record(u, local[i], -1, 0);
		else if (multi_rank(u->s, local[i]))
			add(&u->pending, &u->npending, &u->cappending, local[i]);
		else
			enqueue(u, local[i], -1, 0, NULL);
	}
	free(local);
	free(remote);
	if (!rc && pthread_create(&u->th, NULL, upload_thread, u))
		rc = ckpt_fail(CKPT_E_NOMEM, "store %s: cannot start the upload thread", u->s->path);
	u->has_thread = !rc;
	return rc;
}

/* The store's reads (hooks.h): a checkpoint or a pack that is not local. */
static int hook_manifest(void *arg, uint64_t step, struct manifest *m)
{
	struct tier_up *u = arg;
	uint8_t *raw;
	uint64_t len;
	int rc = tier_fetch_manifest(&u->ref, u->s->hdr.uuid, step, m, &raw, &len);
	if (!rc)
		free(raw);
	return rc;
}

static int hook_pack(void *arg, const struct manifest *m, uint32_t id, char *what, size_t len)
{
	struct tier_up *u = arg;
	return tier_fetch_pack(u->s, &u->ref, m, id, what, len, &u->fetched);
}

static const struct store_listener_ops tier_ops = {
	.commit = on_commit,
	.commit_dist = on_commit_dist,
	.manifest = hook_manifest,
	.pack = hook_pack,
	.close = up_free,
};

uint64_t tier_bytes_fetched(struct ckpt_store *s)
{
	struct tier_up *u = tier_of(s);
	return u ? __atomic_load_n(&u->fetched, __ATOMIC_RELAXED) : 0;
}

int rstore_set(ckpt_store *s, const char *url, unsigned flags)
{
	if (!s || (flags & ~(unsigned)(CKPT_REMOTE_UPLOAD | CKPT_REMOTE_READ)))
		return ckpt_fail(CKPT_E_INVAL, "rstore_set: %s", s ? "unknown flags" : "no store");
	struct tier_up *old = tier_of(s);
	if (old)
		store_unlisten(s, &old->lis);
	if (!url)
		return 0;
	struct tier_up *u = calloc(1, sizeof *u);
	if (!u)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cv, NULL);
	u->s = s;
	u->upload = flags & CKPT_REMOTE_UPLOAD;
	tier_id_of(s->hdr.uuid, u->ref.id);
	struct rmt_config cfg = {.parallel = s->opt.remote_parallel,
				 .bandwidth = s->opt.remote_bandwidth};
	int rc = rmt_open(url, &cfg, &u->ref.r);
	const char *w = getenv("CKPT_REMOTE_SHARE_WAIT_S");
	u->wait_ms = w && *w ? (int64_t)(strtod(w, NULL) * 1000) : TIER_SHARE_WAIT_S * 1000;
	if (!rc && u->upload)
		rc = start_uploads(u);
	if (rc) {
		up_free(u);
		return rc;
	}
	u->lis = (struct store_listener){
		.ops = &tier_ops,
		.ctx = u,
		.read_first = flags & CKPT_REMOTE_READ,
		.upkey = u->upload ? ckpt_checksum64(url, strlen(url)) | 1 : 0,
	};
	store_listen(s, &u->lis);
	return 0;
}

const char *rstore_url(const ckpt_store *s)
{
	const struct tier_up *u = tier_of(s);
	return u ? u->ref.r->url : NULL;
}

CKPT_API void ckpt_store_id(const ckpt_store *s, char id[33])
{
	tier_id_of(s->hdr.uuid, id);
}

static struct tier_up *remote_of(ckpt_store *s)
{
	struct tier_up *u = tier_of(s);
	if (!u)
		ckpt_fail(CKPT_E_STATE, "store %s has no remote (rstore_set)",
			  s ? s->path : "(null)");
	return u;
}

int rstore_push(ckpt_store *s, uint64_t step, ckpt_remote_stats *stats,
			     ckpt_progress_fn progress, void *arg)
{
	struct tier_up *u = remote_of(s);
	if (!u)
		return -CKPT_E_STATE;
	if (stats)
		*stats = (ckpt_remote_stats){0};
	uint64_t got;
	int rc = ckpt_store_resolve(s, step, &got);
	if (rc)
		return rc;
	rc = tier_push(s, &u->ref, got, stats, progress, arg, NULL);
	pthread_mutex_lock(&u->mu);
	record(u, got, -1, rc);
	pthread_mutex_unlock(&u->mu);
	return rc;
}

int rstore_pull(ckpt_store *s, uint64_t step, uint64_t *pulled,
			     ckpt_remote_stats *stats, ckpt_progress_fn progress, void *arg)
{
	struct tier_up *u = remote_of(s);
	if (!u)
		return -CKPT_E_STATE;
	if (stats)
		*stats = (ckpt_remote_stats){0};
	if (s->opt.read_only)
		return ckpt_fail(CKPT_E_PERM, "store %s is open read-only: cannot pull into it", s->path);
	return tier_pull(s, &u->ref, step, pulled, stats, progress, arg);
}

/* Whether the remote holds step's manifest: 1, 0, or -CKPT_E_*. */
static int manifest_there(struct tier_up *u, uint64_t step)
{
	char key[256];
	uint64_t size;
	tier_key_mf(&u->ref, step, key, sizeof key);
	int rc = u->ref.r->ops->stat(u->ref.r, key, &size, NULL);
	return rc == -CKPT_E_NOTFOUND ? 0 : rc ? rc : 1;
}

int rstore_upload_state(ckpt_store *s, uint64_t step)
{
	struct tier_up *u = remote_of(s);
	if (!u)
		return -CKPT_E_STATE;
	pthread_mutex_lock(&u->mu);
	int st = queued(u, step) || in(u->pending, u->npending, step) ? CKPT_UPLOAD_UPLOADING
		 : in(u->done, u->ndone, step) ? CKPT_UPLOAD_REMOTE : -1;
	bool shared = in(u->shared, u->nshared, step);
	pthread_mutex_unlock(&u->mu);
	if (st >= 0)
		return st;
	int rc = manifest_there(u, step);
	if (rc)
		return rc < 0 ? rc : CKPT_UPLOAD_REMOTE;
	if (shared) /* our share is there, rank 0 finishes the checkpoint */
		return CKPT_UPLOAD_UPLOADING;
	struct manifest m;
	if ((rc = store_load_manifest(s, step, &m)))
		return rc;
	manifest_free(&m);
	return CKPT_UPLOAD_LOCAL;
}

/* Under u->mu: whether the wait for step is over, and its outcome in *rc (2: this handle's share
 * is there, the manifest is rank 0's to put; 1: not queued). */
static bool wait_over(struct tier_up *u, uint64_t step, int *rc)
{
	if (!u->ranked && u->npending) { /* no rank learned: the resumed ones go whole */
		requeue(u, -1, 0, NULL);
		pthread_cond_broadcast(&u->cv);
	}
	if (step == CKPT_STEP_LATEST) {
		if (u->nq || u->busy)
			return false;
		*rc = u->nfail ? ckpt_fail(-u->fail[0].rc, "%s", u->fail[0].msg) : 0;
		return true;
	}
	if (queued(u, step))
		return false;
	const struct tier_fail *f = failure_of(u, step);
	*rc = in(u->done, u->ndone, step) ? 0 : f ? ckpt_fail(-f->rc, "%s", f->msg)
	      : in(u->shared, u->nshared, step) ? 2 : 1;
	return true;
}

/* The deadline timeout_ms from now (CLOCK_REALTIME, for pthread_cond_timedwait). */
static struct timespec deadline_of(int64_t timeout_ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	int64_t ns = dl.tv_nsec + (timeout_ms % 1000) * 1000000;
	dl.tv_sec += (time_t)(timeout_ms / 1000 + ns / 1000000000);
	dl.tv_nsec = (long)(ns % 1000000000);
	return dl;
}

/* A rank's share is there: polls the remote (with backoff) for the manifest rank 0 puts. */
static int wait_manifest(struct tier_up *u, uint64_t step, int64_t timeout_ms)
{
	double end = ckpt_now() + (double)timeout_ms / 1e3;
	for (unsigned ms = 5;; ms = MIN(ms * 2, 1000u)) {
		int rc = manifest_there(u, step);
		if (rc < 0)
			return rc;
		if (rc) {
			pthread_mutex_lock(&u->mu);
			add(&u->done, &u->ndone, &u->capdone, step);
			pthread_mutex_unlock(&u->mu);
			return 0;
		}
		if (timeout_ms >= 0 && ckpt_now() >= end)
			return ckpt_fail(CKPT_E_BUSY, "checkpoint %" PRIu64 " of %s: this rank's share is "
					 "on %s, rank 0 has not put the manifest after %" PRId64 " ms",
					 step, u->s->path, u->ref.r->url, timeout_ms);
		struct timespec ts = {0, (long)ms * 1000000};
		nanosleep(&ts, NULL);
	}
}

int rstore_wait_uploaded(ckpt_store *s, uint64_t step, int64_t timeout_ms)
{
	struct tier_up *u = remote_of(s);
	if (!u)
		return -CKPT_E_STATE;
	struct timespec dl = deadline_of(timeout_ms);
	double start = ckpt_now();
	int rc = 0;
	pthread_mutex_lock(&u->mu);
	while (!wait_over(u, step, &rc)) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&u->cv, &u->mu);
		} else if (pthread_cond_timedwait(&u->cv, &u->mu, &dl) == ETIMEDOUT &&
			   !wait_over(u, step, &rc)) {
			rc = ckpt_fail(CKPT_E_BUSY, "checkpoint %" PRIu64 " of %s: still uploading to "
				       "%s after %" PRId64 " ms", step, s->path, u->ref.r->url, timeout_ms);
			break;
		}
	}
	pthread_mutex_unlock(&u->mu);
	if (rc == 2) {
		int64_t left = (int64_t)((ckpt_now() - start) * 1e3);
		return wait_manifest(u, step, timeout_ms < 0 ? -1 : MAX(timeout_ms - left, 0));
	}
	if (rc != 1)
		return rc;
	rc = rstore_upload_state(s, step); /* not queued: on the remote already? */
	if (rc == CKPT_UPLOAD_REMOTE)
		return 0;
	return rc < 0 ? rc : ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " of %s is not queued for "
				       "upload (CKPT_REMOTE_UPLOAD is not set)", step, s->path);
}

long rstore_steps(ckpt_store *s, uint64_t **steps)
{
	*steps = NULL;
	struct tier_up *u = remote_of(s);
	return u ? tier_remote_steps(&u->ref, steps) : -CKPT_E_STATE;
}

int rstore_list(ckpt_store *s, int include_invalid, ckpt_info **out)
{
	*out = NULL;
	struct tier_up *u = remote_of(s);
	if (!u)
		return -CKPT_E_STATE;
	uint64_t *steps;
	long n = tier_remote_steps(&u->ref, &steps);
	if (n < 0)
		return (int)n;
	int rc = store_info_list(steps, n, include_invalid, hook_manifest, u, out);
	free(steps);
	return rc;
}

int rstore_gc(ckpt_store *s, int flags, rgc_report *report)
{
	rgc_report local;
	struct tier_up *u = remote_of(s);
	if (!u)
		return -CKPT_E_STATE;
	return tier_gc(&u->ref, s->hdr.uuid, s->opt.gc_grace_s, flags, report ? report : &local);
}

int rstore_prune_gc(ckpt_store *s, const retain_rules *retention,
					int flags, rgc_report *report, uint64_t **removed)
{
	rgc_report local, gc;
	uint64_t *steps = NULL;
	if (removed)
		*removed = NULL;
	struct tier_up *u = remote_of(s);
	if (!u)
		return -CKPT_E_STATE;
	if (!retention)
		return ckpt_fail(CKPT_E_INVAL, "remote prune: no retention policy");
	if (!report)
		report = &local;
	int rc = gc_retention_check(retention);
	if (!rc)
		rc = tier_prune(&u->ref, s->hdr.uuid, retention, flags, report, &steps);
	if (!rc && !(flags & CKPT_GC_DRY_RUN)) {
		uint64_t n = report->manifests_removed;
		rc = tier_gc(&u->ref, s->hdr.uuid, s->opt.gc_grace_s, flags, &gc);
		*report = gc;
		report->manifests_removed = n;
		pthread_mutex_lock(&u->mu); /* pruned steps are no longer known remote */
		u->ndone = 0;
		u->nshared = 0;
		pthread_mutex_unlock(&u->mu);
	}
	if (removed && !rc)
		*removed = steps;
	else
		free(steps);
	return rc;
}

int rstore_prune(ckpt_store *s, const retain_keep *policy, int flags,
				     rgc_report *report)
{
	if (!policy)
		return ckpt_fail(CKPT_E_INVAL, "rstore_prune: no policy");
	retain_rules r = {.keep = *policy};
	return rstore_prune_gc(s, &r, flags, report, NULL);
}

CKPT_API int ckpt_remote_adopt(const char *url, const char *store_id, const char *path)
{
	if (!url || !path || !*path)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_remote_adopt: no %s", url ? "path" : "url");
	struct rmt *r;
	int rc = rmt_open(url, NULL, &r);
	if (rc)
		return rc;
	rc = tier_adopt(r, store_id, path);
	rmt_close(r);
	return rc;
}

CKPT_API long ckpt_remote_stores(const char *url, ckpt_remote_store **out)
{
	if (!out)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_remote_stores: no out");
	*out = NULL;
	if (!url)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_remote_stores: no url");
	struct rmt *r;
	int rc = rmt_open(url, NULL, &r);
	if (rc)
		return rc;
	long n = tier_remote_summary(r, out);
	rmt_close(r);
	return n;
}

CKPT_API void ckpt_remote_stores_free(ckpt_remote_store *list)
{
	free(list);
}
