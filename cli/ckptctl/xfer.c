/* Block-parallel export of a safetensors byte stream (see xfer.h). Why blocks and not tensors:
 * a file restored through a shared mapping spent 74% of its time in the kernel zeroing page-cache
 * pages and only started writing at fsync; fixed-size aligned blocks let O_DIRECT
 * writes start at once, keep memory at threads * XFER_BLOCK whatever the tensor sizes, and split
 * a large tensor among threads as well as they gather many small ones. */
#include "xfer.h"

#include "ckpt.h"
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* O_DIRECT needs offsets, lengths and buffers aligned to the logical block size; 4 KiB covers
 * every device we meet. */
#define XFER_ALIGN 4096u

struct xjob {
	int fd;
	bool seekable;
	atomic_bool direct;     /* O_DIRECT on fd; cleared for good at the first refusal */
	const uint8_t *hdr;
	size_t hlen;
	const uint64_t *start;  /* file offset of each tensor */
	const uint64_t *nbytes;
	size_t nt;
	uint64_t size, nblocks;
	uint64_t *cut;          /* block b is file bytes [cut[b], cut[b + 1]) */
	struct edge *edge;      /* edge[b]: the 4 KiB page around cut[b] when it is not aligned */
	const struct xfer_src *src;
	atomic_uint_fast64_t next;   /* next block to take */
	atomic_uint_fast64_t done;   /* tensor bytes written */
	atomic_bool failed;
	pthread_mutex_t mu;     /* guards rc and err */
	int rc;
	char *err;
	size_t errlen;
	struct progress *bar;   /* updated by thread 0 only (the caller's) */
};

/* With O_DIRECT, the page that holds an unaligned cut belongs to two blocks: each copies its
 * part into page (under job.mu) and the second to arrive writes it whole. */
struct edge {
	uint8_t *page;
	unsigned parts;
};

struct xworker {
	struct xjob *job;
	unsigned t;
	uint8_t *buf;
	pthread_t tid;
};

unsigned xfer_threads(uint64_t size)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t blocks = (size + XFER_BLOCK - 1) / XFER_BLOCK;
	/* Measured on a virtual disk: 8 to 16 reads of a block in flight beat fewer. */
	unsigned t = n < 8 ? 8 : n > XFER_MAX_THREADS ? XFER_MAX_THREADS : (unsigned)n;
	return blocks < t ? (blocks ? (unsigned)blocks : 1) : t;
}

/* Records the first failure; the others stop at their next block. */
static void job_fail(struct xjob *j, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void job_fail(struct xjob *j, int rc, const char *fmt, ...)
{
	pthread_mutex_lock(&j->mu);
	if (!atomic_load(&j->failed)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(j->err, j->errlen, fmt, ap);
		va_end(ap);
		j->rc = rc;
		atomic_store(&j->failed, true);
	}
	pthread_mutex_unlock(&j->mu);
}

/* Index of the first tensor that ends after off (zero-size tensors at off are passed over). */
static size_t first_after(const struct xjob *j, uint64_t off)
{
	size_t lo = 0, hi = j->nt;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (j->start[mid] + j->nbytes[mid] > off)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* Fills buf with file bytes [lo, hi): the header's share, then each overlapping tensor's. Returns
 * the tensor bytes filled, or -1 after a failure (recorded). */
static int64_t fill_block(struct xjob *j, unsigned t, uint8_t *buf, uint64_t lo, uint64_t hi)
{
	if (lo < j->hlen)
		memcpy(buf, j->hdr + lo, (size_t)((hi < j->hlen ? hi : j->hlen) - lo));
	int64_t got = 0;
	for (size_t k = first_after(j, lo); k < j->nt && j->start[k] < hi; k++) {
		uint64_t a = j->start[k] > lo ? j->start[k] : lo;
		uint64_t e = j->start[k] + j->nbytes[k], b = e < hi ? e : hi;
		if (b <= a)
			continue;
		int r = j->src->read(j->src->ctx[t], k, a - j->start[k], buf + (a - lo), b - a);
		if (r < 0) {
			const char *m = ckpt_errmsg();
			job_fail(j, r, "%s", m && *m ? m : ckpt_strerror(r));
			return -1;
		}
		got += (int64_t)(b - a);
	}
	return got;
}

static int pwrite_all(int fd, const uint8_t *p, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return -1;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Test builds only ($B/tests/hooks/ckptctl): CKPTCTL_TEST_DIRECT=refuse makes the file system
 * refuse O_DIRECT, =einval makes it take the flag and refuse the first write with EINVAL (as
 * some do), so that both fallbacks to buffered writes are tested on any file system. */
#ifdef CKPT_TEST_HOOKS
static bool test_direct(const char *what)
{
	const char *e = getenv("CKPTCTL_TEST_DIRECT");
	return e && !strcmp(e, what);
}
#else
static inline bool test_direct(const char *what) { (void)what; return false; }
#endif

/* Stops using O_DIRECT on fd: for every thread, since the flag belongs to the open file. */
static void drop_direct(struct xjob *j)
{
	if (atomic_exchange(&j->direct, false)) {
		int fl = fcntl(j->fd, F_GETFL);
		if (fl >= 0)
			fcntl(j->fd, F_SETFL, fl & ~O_DIRECT);
	}
}

/* Writes n bytes at file offset off from buf (4 KiB-aligned, with room to round n up). With
 * O_DIRECT the length is rounded up to the alignment (the tail is zeros; the file is cut to its
 * size at the end). A file system that takes the O_DIRECT flag but refuses a write with EINVAL
 * gets buffered writes from then on. */
static int write_at(struct xjob *j, uint8_t *buf, size_t n, uint64_t off)
{
	if (atomic_load(&j->direct)) {
		size_t al = (n + XFER_ALIGN - 1) / XFER_ALIGN * XFER_ALIGN;
		memset(buf + n, 0, al - n);
		static atomic_bool refused;
		if (test_direct("einval") && !atomic_exchange(&refused, true))
			errno = EINVAL;
		else if (pwrite_all(j->fd, buf, al, off) == 0)
			return 0;
		if (errno != EINVAL)
			return -1;
		drop_direct(j);
	}
	return pwrite_all(j->fd, buf, n, off);
}

#define ALIGN_DOWN(x) ((x) / XFER_ALIGN * XFER_ALIGN)

/* Adds file bytes [a, b) (inside the page around cut[c]; from p) to that page; the second block
 * to do so writes the page. Returns 0 or -1 with errno set. */
static int edge_put(struct xjob *j, uint64_t c, const uint8_t *p, uint64_t a, uint64_t b)
{
	struct edge *e = &j->edge[c];
	uint64_t page = ALIGN_DOWN(j->cut[c]);
	uint8_t *full = NULL;
	int rc = 0;
	pthread_mutex_lock(&j->mu);
	if (!e->page && posix_memalign((void **)&e->page, XFER_ALIGN, XFER_ALIGN)) {
		e->page = NULL;
		rc = -1;
		errno = ENOMEM;
	} else {
		if (!e->parts)
			memset(e->page, 0, XFER_ALIGN);
		memcpy(e->page + (a - page), p, (size_t)(b - a));
		if (++e->parts == 2)
			full = e->page, e->page = NULL;
	}
	pthread_mutex_unlock(&j->mu);
	if (full) {
		uint64_t end = page + XFER_ALIGN < j->size ? page + XFER_ALIGN : j->size;
		rc = write_at(j, full, (size_t)(end - page), page);
		free(full);
	}
	return rc;
}

/* Writes block b: file bytes [lo, hi) at buf + (lo - ALIGN_DOWN(lo)). The pages that it shares
 * with its neighbours (an unaligned cut) go through edge_put; the rest (with O_DIRECT, the last
 * page rounded up) in one write. Returns 0 or -1 with errno set. */
static int write_block(struct xjob *j, uint64_t b, uint8_t *buf)
{
	uint64_t lo = j->cut[b], hi = j->cut[b + 1], base = ALIGN_DOWN(lo);
	if (!j->seekable)
		return write_all(j->fd, buf + (lo - base), (size_t)(hi - lo));
	/* Edges go through edge_put even when buffered: O_DIRECT may be dropped after a
	 * neighbour put its part there. */
	uint64_t a = lo, e = hi == j->size ? hi : ALIGN_DOWN(hi);
	if (lo % XFER_ALIGN) {
		a = base + XFER_ALIGN < hi ? base + XFER_ALIGN : hi;
		if (edge_put(j, b, buf + (lo - base), lo, a))
			return -1;
	}
	if (e > a && write_at(j, buf + (a - base), (size_t)(e - a), a))
		return -1;
	uint64_t t = e > lo ? e : lo;
	if (hi != j->size && hi % XFER_ALIGN)
		return edge_put(j, b + 1, buf + (t - base), t, hi);
	return 0;
}

static void *worker(void *arg)
{
	struct xworker *w = arg;
	struct xjob *j = w->job;
	for (;;) {
		if (atomic_load(&j->failed))
			break;
		uint64_t b = atomic_fetch_add(&j->next, 1);
		if (b >= j->nblocks)
			break;
		uint64_t lo = j->cut[b], hi = j->cut[b + 1];
		int64_t got = fill_block(j, w->t, w->buf + (lo - ALIGN_DOWN(lo)), lo, hi);
		if (got < 0)
			break;
		if (write_block(j, b, w->buf)) {
			job_fail(j, 1, "write at offset %llu: %s", (unsigned long long)lo,
				 strerror(errno));
			break;
		}
		uint64_t d = atomic_fetch_add(&j->done, (uint64_t)got) + (uint64_t)got;
		if (w->t == 0)
			progress_update(j->bar, d);
	}
	return NULL;
}

/* The end of the block that starts at pos: XFER_BLOCK bytes on, moved back to a multiple of
 * the grain of the tensor there (a cut chunk would be read twice), unless that leaves less
 * than half a block. */
static uint64_t block_end(const struct xjob *j, uint64_t pos)
{
	uint64_t want = pos + XFER_BLOCK;
	if (want >= j->size)
		return j->size;
	size_t k = first_after(j, want);
	const uint64_t *g = j->src->grain;
	if (want < j->hlen || k >= j->nt || j->start[k] > want || !g || !g[k])
		return want;
	uint64_t c = j->start[k] + (want - j->start[k]) / g[k] * g[k];
	return c >= pos + XFER_BLOCK / 2 ? c : want;
}

/* Fills j->cut (nblocks + 1 entries) and j->edge. Returns 0 or -1 when out of memory. */
static int plan_blocks(struct xjob *j)
{
	uint64_t n = 0, cap = j->size / (XFER_BLOCK / 2) + 2;
	j->cut = malloc(cap * sizeof *j->cut);
	j->edge = calloc(cap, sizeof *j->edge);
	if (!j->cut || !j->edge)
		return -1;
	j->cut[0] = 0;
	while (j->cut[n] < j->size) {
		j->cut[n + 1] = block_end(j, j->cut[n]);
		n++;
	}
	j->nblocks = n;
	return 0;
}

/* Turns O_DIRECT on for fd where the file system allows it (where it refuses, as tmpfs before
 * Linux 6.6 does: buffered writes). */
static bool try_direct(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return !test_direct("refuse") && fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
}

int xfer_export(int fd, int seekable, const uint8_t *hdr, size_t hlen, const uint64_t *nbytes,
		size_t nt, const struct xfer_src *src, struct progress *bar, char *err,
		size_t errlen)
{
	struct xjob j = {.fd = fd, .seekable = seekable, .hdr = hdr, .hlen = hlen,
			 .nbytes = nbytes, .nt = nt, .src = src, .err = err, .errlen = errlen,
			 .bar = bar};
	uint64_t *start = malloc((nt ? nt : 1) * sizeof *start), off = hlen;
	unsigned nw = seekable ? src->threads : 1;
	struct xworker *w = calloc(nw, sizeof *w);
	if (!start || !w) {
		free(start);
		free(w);
		snprintf(err, errlen, "out of memory");
		return -CKPT_E_NOMEM;
	}
	for (size_t k = 0; k < nt; k++) {
		start[k] = off;
		off += nbytes[k];
	}
	j.start = start;
	j.size = off;
	if (plan_blocks(&j)) {
		free(j.cut);
		free(j.edge);
		free(start);
		free(w);
		snprintf(err, errlen, "out of memory");
		return -CKPT_E_NOMEM;
	}
	/* Blocks reserved ahead make the parallel O_DIRECT writes overwrites inside the file's size,
	 * which ext4 and XFS run concurrently (extending or hole-filling ones are serialized), and a
	 * full disk fails here, before anything is read. A file system without fallocate (EOPNOTSUPP)
	 * is written as it is; glibc's posix_fallocate would write zeros instead. */
	int fa = seekable ? fallocate(fd, 0, 0, (off_t)off) : 0;
	/* tmpfs gives up with EINTR whenever a signal or io_uring task work is pending (the readers'
	 * rings set it); what it allocated stays, so asking again goes on from there. */
	while (fa && errno == EINTR)
		fa = fallocate(fd, 0, 0, (off_t)off);
	if (fa && errno != EOPNOTSUPP && errno != ENOSYS) {
		snprintf(err, errlen, "cannot allocate %llu bytes: %s", (unsigned long long)off,
			 strerror(errno));
		free(j.cut);
		free(j.edge);
		free(start);
		free(w);
		return 1;
	}
	atomic_init(&j.direct, seekable && try_direct(fd));
	atomic_init(&j.next, 0);
	atomic_init(&j.done, 0);
	atomic_init(&j.failed, false);
	pthread_mutex_init(&j.mu, NULL);
	unsigned started = 0;
	for (unsigned t = 0; t < nw; t++) {
		w[t] = (struct xworker){.job = &j, .t = t};
		/* A block starts up to a page after its buffer's and its end is rounded up. */
		if (posix_memalign((void **)&w[t].buf, XFER_ALIGN, XFER_BLOCK + 2 * XFER_ALIGN)) {
			w[t].buf = NULL;
			job_fail(&j, -CKPT_E_NOMEM, "out of memory for %u buffers of %u bytes", nw,
				 XFER_BLOCK);
			break;
		}
	}
	/* Thread 0 is the caller's (it draws the progress line); the others only read and write. */
	for (unsigned t = 1; t < nw && !atomic_load(&j.failed); t++, started++) {
		int e = pthread_create(&w[t].tid, NULL, worker, &w[t]);
		if (e) {
			job_fail(&j, 1, "cannot start a thread: %s", strerror(e));
			break;
		}
	}
	if (!atomic_load(&j.failed))
		worker(&w[0]);
	for (unsigned t = 1; t <= started; t++)
		pthread_join(w[t].tid, NULL);
	/* An O_DIRECT tail was written rounded up: cut the file to its size. */
	if (!j.failed && seekable && ftruncate(fd, (off_t)j.size))
		job_fail(&j, 1, "truncate to %llu bytes: %s", (unsigned long long)j.size,
			 strerror(errno));
	for (unsigned t = 0; t < nw; t++)
		free(w[t].buf);
	for (uint64_t b = 0; b <= j.nblocks; b++)
		free(j.edge[b].page); /* only after a failure: the second part frees a page */
	free(j.cut);
	free(j.edge);
	free(w);
	free(start);
	pthread_mutex_destroy(&j.mu);
	return j.failed ? j.rc : 0;
}
