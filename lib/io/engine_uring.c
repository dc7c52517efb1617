/* io_uring engine: submitters fill the SQ under a mutex (at most qd requests in flight), one
 * completion thread reaps the CQ, finishes short transfers and calls the callbacks. Buffers of the
 * staging pool are registered once, so writes from them are WRITE_FIXED (no per-I/O page pinning). */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "common/common.h"
#include "io/engine.h"

struct uring {
	struct io_uring ring;
	pthread_mutex_t mu;       /* SQ side */
	pthread_cond_t room;
	unsigned inflight;
	int registered;
	pthread_t reaper;
	int stopping;
};

#define STOP_TAG ((uint64_t)1)

/* liburing maps a ring's SQ and CQ with raw mmap/munmap system calls, which ThreadSanitizer does
 * not intercept: when a ring is torn down and a later ring is mapped at the same address, TSan
 * still holds the old reaper's accesses for that memory and reports the new reaper's as a race
 * (seen as __io_uring_peek_cqe against __io_uring_peek_cqe). The kernel orders munmap before the
 * mmap that reuses the address; tell TSan so: release before a ring is unmapped, acquire after a
 * ring is mapped, on one object for all rings. Compiled only into ThreadSanitizer builds. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char ring_reuse_sync;
#define RING_MAPPED() __tsan_acquire(&ring_reuse_sync)
#define RING_UNMAPPING() __tsan_release(&ring_reuse_sync)
#else
#define RING_MAPPED() ((void)0)
#define RING_UNMAPPING() ((void)0)
#endif

static void prep(struct uring *u, struct io_req *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	/* The SQ has as many entries as qd, and inflight <= qd, so an SQE is always free. */
	uint8_t *buf = r->buf ? (uint8_t *)r->buf + r->done_bytes : NULL; /* NULL: IO_READV */
	size_t len = r->len - r->done_bytes;
	if (r->first_max && len > r->first_max) {
		len = r->first_max;
		r->first_max = 0;
	}
	off_t off = (off_t)(r->off + r->done_bytes);
	switch (r->op) {
	case IO_WRITE:
		if (r->buf_index >= 0 && u->registered)
			io_uring_prep_write_fixed(sqe, r->fd, buf, (unsigned)len, off, r->buf_index);
		else
			io_uring_prep_write(sqe, r->fd, buf, (unsigned)len, (uint64_t)off);
		break;
	case IO_READ:
		if (r->buf_index >= 0 && u->registered)
			io_uring_prep_read_fixed(sqe, r->fd, buf, (unsigned)len, off, r->buf_index);
		else
			io_uring_prep_read(sqe, r->fd, buf, (unsigned)len, (uint64_t)off);
		break;
	case IO_READV:
		io_uring_prep_readv(sqe, r->fd, r->iov_work, (unsigned)io_req_window(r, len),
				    (uint64_t)off);
		break;
	case IO_FSYNC:
		io_uring_prep_fsync(sqe, r->fd, IORING_FSYNC_DATASYNC);
		break;
	}
	io_uring_sqe_set_data(sqe, r);
}

static void *reaper(void *arg)
{
	struct uring *u = arg;
	for (;;) {
		struct io_uring_cqe *cqe;
		int rc = io_uring_wait_cqe(&u->ring, &cqe);
		if (rc == -EINTR)
			continue;
		if (rc < 0)
			break;
		uint64_t tag = (uint64_t)io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&u->ring, cqe);
		if (tag == STOP_TAG)
			break;
		struct io_req *r = (struct io_req *)(uintptr_t)tag;
		/* The request was filled under mu by its submitter: read it under mu too (the kernel
		 * orders it anyway, but ThreadSanitizer cannot see that). */
		pthread_mutex_lock(&u->mu);
		if (res == -EAGAIN || res == -EINTR ||
		    (res > 0 && r->op != IO_FSYNC && r->done_bytes + (size_t)res < r->len)) {
			/* Retry, or a short transfer: continue where it stopped. */
			if (res > 0)
				r->done_bytes += (size_t)res;
			prep(u, r);
			io_uring_submit(&u->ring);
			pthread_mutex_unlock(&u->mu);
			continue;
		}
		if (res > 0 && r->op != IO_FSYNC)
			r->done_bytes += (size_t)res;
		r->res = res < 0 ? res : (r->op == IO_FSYNC ? 0 : (ssize_t)r->done_bytes);
		u->inflight--;
		pthread_cond_signal(&u->room);
		pthread_mutex_unlock(&u->mu);
		r->done(r);
	}
	return NULL;
}

static int uring_create(struct io_engine *e)
{
	struct uring *u = calloc(1, sizeof *u);
	if (!u)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	int rc = io_uring_queue_init(e->qd + 1, &u->ring, 0);
	if (rc < 0) {
		free(u);
		return ckpt_fail(rc == -ENOMEM ? CKPT_E_NOMEM : CKPT_E_UNSUPPORTED,
				 "io_uring unavailable: %s", strerror(-rc));
	}
	RING_MAPPED();
	if (e->nbufs) {
		struct iovec *iov = calloc(e->nbufs, sizeof *iov);
		if (iov) {
			for (unsigned i = 0; i < e->nbufs; i++)
				iov[i] = (struct iovec){e->bufs[i], e->buf_len};
			/* Without registration (RLIMIT_MEMLOCK) plain writes still work. */
			u->registered = io_uring_register_buffers(&u->ring, iov, e->nbufs) == 0;
			free(iov);
		}
	}
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->room, NULL);
	if (pthread_create(&u->reaper, NULL, reaper, u)) {
		RING_UNMAPPING();
		io_uring_queue_exit(&u->ring);
		free(u);
		return ckpt_fail(CKPT_E_NOMEM, "cannot start the io_uring thread");
	}
	e->priv = u;
	return 0;
}

static void uring_submit(struct io_engine *e, struct io_req *r)
{
	struct uring *u = e->priv;
	pthread_mutex_lock(&u->mu);
	while (u->inflight >= e->qd)
		pthread_cond_wait(&u->room, &u->mu);
	u->inflight++;
	prep(u, r);
	int rc = io_uring_submit(&u->ring);
	if (rc < 0) {
		u->inflight--;
		pthread_mutex_unlock(&u->mu);
		r->res = rc;
		r->done(r);
		return;
	}
	pthread_mutex_unlock(&u->mu);
}

static void uring_destroy(struct io_engine *e)
{
	struct uring *u = e->priv;
	pthread_mutex_lock(&u->mu);
	while (u->inflight)
		pthread_cond_wait(&u->room, &u->mu);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, STOP_TAG);
	io_uring_submit(&u->ring);
	pthread_mutex_unlock(&u->mu);
	pthread_join(u->reaper, NULL);
	RING_UNMAPPING();
	io_uring_queue_exit(&u->ring);
	pthread_mutex_destroy(&u->mu);
	pthread_cond_destroy(&u->room);
	free(u);
}

const struct io_engine_ops ckpt_engine_uring = {"io_uring", uring_create, uring_submit, uring_destroy};
