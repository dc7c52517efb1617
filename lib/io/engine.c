/* Engine selection, fault injection at submission (test builds only: io/fault.c), and the psync
 * engine (a pool of threads each doing one blocking pread/pwrite/fdatasync at a time: the fallback
 * when io_uring is missing). */
#include "io/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"

#ifdef CKPT_TEST_HOOKS
#include "io/fault.h"

/* Test builds only: an engine that discards writes (and syncs) and completes them at once, the
 * pipeline's ceiling with an infinitely fast disk (bench/pipe-sweep). CKPT_IO_ENGINE=discard. */
static int discard_create(struct io_engine *e) { (void)e; return 0; }
static void discard_submit(struct io_engine *e, struct io_req *r)
{
	(void)e;
	r->res = r->op == IO_READ || r->op == IO_READV ? -EIO : r->op == IO_FSYNC ? 0 : (ssize_t)r->len;
	r->done(r);
}
static void discard_destroy(struct io_engine *e) { (void)e; }
static const struct io_engine_ops engine_discard = {"discard", discard_create, discard_submit,
						    discard_destroy};
#endif

int io_engine_create(int kind, unsigned qd, void **bufs, size_t buf_len, unsigned nbufs,
		     struct io_engine **out)
{
	*out = NULL;
	const char *env = getenv("CKPT_IO_ENGINE");
	if (kind == CKPT_ENGINE_AUTO && env) {
		if (!strcmp(env, "psync"))
			kind = CKPT_ENGINE_PSYNC;
		else if (!strcmp(env, "io_uring"))
			kind = CKPT_ENGINE_IO_URING;
	}
	struct io_engine *e = calloc(1, sizeof *e);
	if (!e)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	e->qd = qd ? qd : 1;
	e->bufs = bufs;
	e->buf_len = buf_len;
	e->nbufs = nbufs;
	int rc = -CKPT_E_UNSUPPORTED;
#ifdef CKPT_TEST_HOOKS
	if (env && !strcmp(env, "discard")) {
		e->ops = &engine_discard;
		*out = e;
		return 0;
	}
#endif
	if (kind != CKPT_ENGINE_PSYNC) {
		e->ops = &ckpt_engine_uring;
		rc = e->ops->create(e);
		if (rc && kind == CKPT_ENGINE_IO_URING) {
			free(e);
			return rc;
		}
	}
	if (rc) {
		e->ops = &ckpt_engine_psync;
		if ((rc = e->ops->create(e))) {
			free(e);
			return rc;
		}
	}
	*out = e;
	return 0;
}

void io_engine_submit(struct io_engine *e, struct io_req *r)
{
	r->res = 0;
	r->done_bytes = 0;
	r->first_max = 0;
	r->next = NULL;
	if (r->op == IO_READV) {
		r->len = 0;
		for (int i = 0; i < r->iovcnt; i++)
			r->len += r->iov[i].iov_len;
	}
#ifdef CKPT_TEST_HOOKS
	/* Faults are injected here (test builds only) so that every engine sees the same failures. */
	if (ckpt_io_fault_submit(r))
		return;
#endif
	e->ops->submit(e, r);
}

void io_engine_destroy(struct io_engine *e)
{
	if (!e)
		return;
	e->ops->destroy(e);
	free(e);
}

const char *io_engine_name(const struct io_engine *e)
{
	return e->ops->name;
}

struct sync_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
};

static void sync_done(struct io_req *r)
{
	struct sync_wait *w = r->arg;
	pthread_mutex_lock(&w->mu);
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

ssize_t io_engine_run(struct io_engine *e, struct io_req *r)
{
	struct sync_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	r->done = sync_done;
	r->arg = &w;
	io_engine_submit(e, r);
	pthread_mutex_lock(&w.mu);
	while (!w.done)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	return r->res;
}

/* ---- psync ------------------------------------------------------------------------------ */
struct psync {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct io_req *head, *tail;
	int stop;
	unsigned nthreads;
	pthread_t *threads;
};

static void run_one(struct io_req *r)
{
	if (r->op == IO_FSYNC) {
		r->res = fdatasync(r->fd) ? -errno : 0;
		return;
	}
	while (r->done_bytes < r->len) {
		size_t want = r->len - r->done_bytes;
		if (r->first_max && want > r->first_max) {
			want = r->first_max;
			r->first_max = 0;
		}
		uint8_t *p = r->buf ? (uint8_t *)r->buf + r->done_bytes : NULL; /* NULL: IO_READV */
		off_t off = (off_t)(r->off + r->done_bytes);
		ssize_t n;
		if (r->op == IO_READV)
			n = preadv(r->fd, r->iov_work, io_req_window(r, want), off);
		else
			n = r->op == IO_WRITE ? pwrite(r->fd, p, want, off) : pread(r->fd, p, want, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r->res = -errno;
			return;
		}
		if (n == 0)
			break; /* end of file on a read */
		r->done_bytes += (size_t)n;
	}
	r->res = (ssize_t)r->done_bytes;
}

static void *psync_thread(void *arg)
{
	struct psync *ps = arg;
	pthread_mutex_lock(&ps->mu);
	for (;;) {
		while (!ps->head && !ps->stop)
			pthread_cond_wait(&ps->cv, &ps->mu);
		if (!ps->head)
			break;
		struct io_req *r = ps->head;
		ps->head = r->next;
		if (!ps->head)
			ps->tail = NULL;
		pthread_mutex_unlock(&ps->mu);
		run_one(r);
		r->done(r);
		pthread_mutex_lock(&ps->mu);
	}
	pthread_mutex_unlock(&ps->mu);
	return NULL;
}

static int psync_create(struct io_engine *e)
{
	struct psync *ps = calloc(1, sizeof *ps);
	if (!ps)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	pthread_mutex_init(&ps->mu, NULL);
	pthread_cond_init(&ps->cv, NULL);
	ps->nthreads = e->qd < 64 ? e->qd : 64;
	ps->threads = calloc(ps->nthreads, sizeof *ps->threads);
	if (!ps->threads) {
		free(ps);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	for (unsigned i = 0; i < ps->nthreads; i++)
		if (pthread_create(&ps->threads[i], NULL, psync_thread, ps)) {
			ps->nthreads = i;
			break;
		}
	if (!ps->nthreads) {
		free(ps->threads);
		free(ps);
		return ckpt_fail(CKPT_E_NOMEM, "cannot start I/O threads");
	}
	e->priv = ps;
	return 0;
}

static void psync_submit(struct io_engine *e, struct io_req *r)
{
	struct psync *ps = e->priv;
	pthread_mutex_lock(&ps->mu);
	if (ps->tail)
		ps->tail->next = r;
	else
		ps->head = r;
	ps->tail = r;
	pthread_cond_signal(&ps->cv);
	pthread_mutex_unlock(&ps->mu);
}

static void psync_destroy(struct io_engine *e)
{
	struct psync *ps = e->priv;
	pthread_mutex_lock(&ps->mu);
	ps->stop = 1;
	pthread_cond_broadcast(&ps->cv);
	pthread_mutex_unlock(&ps->mu);
	for (unsigned i = 0; i < ps->nthreads; i++)
		pthread_join(ps->threads[i], NULL);
	pthread_mutex_destroy(&ps->mu);
	pthread_cond_destroy(&ps->cv);
	free(ps->threads);
	free(ps);
}

const struct io_engine_ops ckpt_engine_psync = {"psync", psync_create, psync_submit, psync_destroy};
