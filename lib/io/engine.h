/* Asynchronous I/O engines behind one ops table: io_uring (one ring, registered buffers, its own
 * completion thread) and psync (a thread pool doing pread/pwrite), chosen by probing. Requests
 * complete through a callback on an engine thread. Fault injection (io.h; test builds only) applies
 * to both. */
#ifndef CKPT_ENGINE_H
#define CKPT_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* IO_READV: a vectored read at off into iov[0..iovcnt) (at most IOV_MAX segments), so that one
 * O_DIRECT read fills a caller's buffer and small scratch pieces at once (reader.c). */
enum io_op { IO_READ, IO_WRITE, IO_FSYNC, IO_READV };

struct io_req {
	enum io_op op;
	int fd;
	void *buf;
	size_t len;
	uint64_t off;
	int buf_index;        /* registered buffer holding buf, or -1 */
	ssize_t res;          /* bytes transferred, or -errno */
	size_t done_bytes;    /* internal: progress across short transfers */
	size_t first_max;     /* internal: test builds' fault injection caps the first transfer (0: none) */
	const struct iovec *iov; /* IO_READV: the segments, unchanged by the engine */
	int iovcnt;
	struct iovec *iov_work;  /* IO_READV: iovcnt entries the engine may use while r is in flight
				  * (the part of iov still to transfer after a short read) */
	void (*done)(struct io_req *r);
	void *arg;
	struct io_req *next;  /* internal queue link */
};

struct io_engine;

struct io_engine_ops {
	const char *name;
	int (*create)(struct io_engine *e);
	void (*submit)(struct io_engine *e, struct io_req *r);
	void (*destroy)(struct io_engine *e);
};

struct io_engine {
	const struct io_engine_ops *ops;
	unsigned qd;
	void **bufs;          /* buffers to register (io_uring), nbufs of buf_len bytes */
	size_t buf_len;
	unsigned nbufs;
	void *priv;
};

/* Creates an engine: kind is CKPT_ENGINE_AUTO (io_uring, else psync when io_uring is missing or
 * forbidden: ENOSYS, EPERM under seccomp), CKPT_ENGINE_IO_URING or CKPT_ENGINE_PSYNC.
 * CKPT_IO_ENGINE=psync|io_uring in the environment overrides AUTO (documented in ckpt.h and
 * ckptctl(1)). Returns 0 or
 * -CKPT_E_*. */
int io_engine_create(int kind, unsigned qd, void **bufs, size_t buf_len, unsigned nbufs,
		     struct io_engine **out);
/* Queues r (for IO_READV, len is set here to the total of the segments); r->done is called exactly once, possibly before this returns. io_uring blocks while qd
 * requests are in flight; psync queues without limit (its callers bound what they submit). */
void io_engine_submit(struct io_engine *e, struct io_req *r);
/* Waits for in-flight requests, stops the threads, frees e; accepts NULL. */
void io_engine_destroy(struct io_engine *e);
const char *io_engine_name(const struct io_engine *e);

/* Completes r synchronously: submits it and waits. Returns r->res. */
ssize_t io_engine_run(struct io_engine *e, struct io_req *r);

/* For engines, IO_READV: fills r->iov_work with the segments of r->iov after its first
 * r->done_bytes bytes, at most max bytes of them (0: all). Returns the number of segments.
 * Inline: both engine files use it, and neither may depend on the other (t-modgraph). */
static inline int io_req_window(struct io_req *r, size_t max)
{
	size_t skip = r->done_bytes, left = max ? max : SIZE_MAX;
	int n = 0;
	for (int i = 0; i < r->iovcnt && left; i++) {
		size_t l = r->iov[i].iov_len;
		if (skip >= l) {
			skip -= l;
			continue;
		}
		size_t take = l - skip < left ? l - skip : left;
		r->iov_work[n++] = (struct iovec){(uint8_t *)r->iov[i].iov_base + skip, take};
		left -= take;
		skip = 0;
	}
	return n;
}

extern const struct io_engine_ops ckpt_engine_psync;
extern const struct io_engine_ops ckpt_engine_uring;

#endif
