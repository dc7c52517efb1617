/* Pipelined reads: the read groups one thread restores to host memory, with up to n reads in
 * flight in the reader's engine and each checked as soon as it completes (rpipe_run), and the
 * reader's in-flight accounting (reader_inflight_max). CUDA jobs are handed to stage.c. Uses
 * stage.c, group.c and pack.c. */
#include <stdio.h>
#include <stdlib.h>

#include <pthread.h>

#include "common/common.h"
#include "io/engine.h"
#include "read/reader.h"
#include "read/read_int.h"

/* A group read in flight: its job, its own read buffer and segments, its request. */
struct rslot {
	struct rjob j;
	struct rres x;         /* buf and iov are the slot's; codec is the pipe's */
	struct pack_fd *p;
	int niov;
	bool busy;             /* its read is in flight or not yet checked */
	uint64_t seq;          /* the job's number in the order next() handed it out */
	struct rslot *next_done; /* the pipe's completed reads (pipe mu) */
	struct io_req q;
	struct rpipe *pp;
};

/* The reads one thread keeps in flight: n slots, filled in job order, each checked as soon as
 * its read completes (in any order: a slow read does not hold back the slots behind it). The
 * next groups' reads are at the device while one is hashed; memory is n read buffers whatever
 * the tensor's size. */
struct rpipe {
	struct reader1 *r;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct rslot *slot;
	unsigned n, busy;
	struct rslot *done_head, *done_tail; /* completed, not yet checked (mu) */
	uint64_t seq;          /* jobs handed out so far */
	struct rres *sync_x;   /* CUDA groups: restored one at a time through its staging */
	char msg[1024];        /* the message of the first error in job order */
};

void rpipe_free(struct rpipe *pp)
{
	if (!pp)
		return;
	for (unsigned k = 0; k < pp->n; k++) {
		pp->slot[k].x.codec = NULL;
		rres_free(&pp->slot[k].x);
	}
	free(pp->slot);
	pthread_mutex_destroy(&pp->mu);
	pthread_cond_destroy(&pp->cv);
	free(pp);
}

struct rpipe *rpipe_create(struct reader1 *r, unsigned n, ckpt_codec_ctx *codec,
			   struct rres *sync_x)
{
	struct rpipe *pp = calloc(1, sizeof *pp);
	if (!pp)
		return NULL;
	pp->r = r;
	pp->sync_x = sync_x;
	pthread_mutex_init(&pp->mu, NULL);
	pthread_cond_init(&pp->cv, NULL);
	pp->slot = calloc(n, sizeof *pp->slot);
	if (!pp->slot) {
		rpipe_free(pp);
		return NULL;
	}
	pp->n = n;
	for (unsigned k = 0; k < n; k++) {
		pp->slot[k].pp = pp;
		pp->slot[k].x.codec = codec;
		if (!(pp->slot[k].x.buf = ckpt_aligned_alloc(r->buf_cap))) {
			rpipe_free(pp);
			return NULL;
		}
	}
	return pp;
}

/* Engine thread: the slot's read completed. */
static void rslot_done(struct io_req *q)
{
	struct rslot *sl = q->arg;
	struct rpipe *pp = sl->pp;
	pthread_mutex_lock(&pp->mu);
	sl->next_done = NULL;
	if (pp->done_tail)
		pp->done_tail->next_done = sl;
	else
		pp->done_head = sl;
	pp->done_tail = sl;
	pthread_cond_signal(&pp->cv);
	pthread_mutex_unlock(&pp->mu);
}

static void inflight_add(struct reader1 *r, int64_t reads, int64_t bytes)
{
	uint64_t n = __atomic_add_fetch(&r->inflight, (uint64_t)reads, __ATOMIC_RELAXED);
	uint64_t b = __atomic_add_fetch(&r->inflight_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
	if (reads <= 0)
		return;
	uint64_t m = __atomic_load_n(&r->inflight_max, __ATOMIC_RELAXED);
	while (n > m && !__atomic_compare_exchange_n(&r->inflight_max, &m, n, true,
						     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	m = __atomic_load_n(&r->inflight_bytes_max, __ATOMIC_RELAXED);
	while (b > m && !__atomic_compare_exchange_n(&r->inflight_bytes_max, &m, b, true,
						     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

void reader_inflight_max(const reader1 *r, uint64_t *reads, uint64_t *bytes)
{
	*reads = __atomic_load_n(&r->inflight_max, __ATOMIC_RELAXED);
	*bytes = __atomic_load_n(&r->inflight_bytes_max, __ATOMIC_RELAXED);
}

/* Starts job j (number seq): a host group's read is submitted into a free slot (one must
 * exist); a CUDA group is restored at once. Returns 0 or the error (the pack's, or the CUDA
 * group's). */
static int rpipe_start(struct rpipe *pp, const struct rjob *j, uint64_t seq)
{
	struct reader1 *r = pp->r;
	const struct mf_tensor *t = &r->m.tensors[j->ti];
	if (j->mem != CKPT_MEM_HOST) {
		return rd_restore_group(r, pp->sync_x, t, j->j0, j->j1, j->len, j->mem, j->dst);
	}
	struct rslot *sl = pp->slot;
	while (sl->busy)
		sl++;
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j->j0]];
	int rc = rd_group_pack(r, t, j->j0, c, &sl->p);
	if (rc)
		return rc;
	sl->j = *j;
	sl->niov = rd_direct_plan(r, &sl->x, sl->p, t, j->j0, j->j1, j->dst);
	sl->q = rd_read_req(&sl->x, sl->p, c->offset, (size_t)j->len, sl->niov);
	sl->q.done = rslot_done;
	sl->q.arg = sl;
	sl->seq = seq;
	sl->busy = true;
	pp->busy++;
	inflight_add(r, 1, (int64_t)j->len);
	io_engine_submit(r->eng, &sl->q); /* may complete before it returns */
	return 0;
}

/* Waits for a read to complete, checks and places its group, frees its slot. Returns 0 or the
 * group's error; *seq gets its job number. */
static int rpipe_finish_next(struct rpipe *pp, uint64_t *seq)
{
	struct reader1 *r = pp->r;
	pthread_mutex_lock(&pp->mu);
	while (!pp->done_head)
		pthread_cond_wait(&pp->cv, &pp->mu);
	struct rslot *sl = pp->done_head;
	if (!(pp->done_head = sl->next_done))
		pp->done_tail = NULL;
	pthread_mutex_unlock(&pp->mu);
	const struct mf_tensor *t = &r->m.tensors[sl->j.ti];
	int rc = rd_group_finish(r, &sl->x, sl->p, t, sl->j.j0, sl->j.j1, sl->j.len, sl->j.dst,
				 sl->niov, sl->q.res);
	inflight_add(r, -1, -(int64_t)sl->j.len);
	*seq = sl->seq;
	sl->busy = false;
	pp->busy--;
	return rc;
}

/* Keeps the error of the earliest job: failures are seen in completion order. */
static void rpipe_error(struct rpipe *pp, int rc, uint64_t seq, int *err, uint64_t *err_seq)
{
	if (!rc || seq >= *err_seq)
		return;
	*err = rc;
	*err_seq = seq;
	snprintf(pp->msg, sizeof pp->msg, "%s", ckpt_errmsg());
}

/* Restores the jobs next() hands out (false: none left) with up to pp->n reads in flight.
 * Returns 0 once every group is checked, or the error of the first failed group in job order:
 * after a failure no job starts, and the reads in flight are still checked (an earlier job's
 * may fail too; and their buffers are the pipe's). */
int rpipe_run(struct rpipe *pp, bool (*next)(void *arg, struct rjob *j), void *arg)
{
	int err = 0;
	uint64_t err_seq = UINT64_MAX, seq;
	bool more = true;
	for (;;) {
		while (!err && more && pp->busy < pp->n) {
			struct rjob j;
			if ((more = next(arg, &j))) {
				seq = pp->seq++;
				rpipe_error(pp, rpipe_start(pp, &j, seq), seq, &err, &err_seq);
			}
		}
		if (!pp->busy)
			break;
		int rc = rpipe_finish_next(pp, &seq);
		rpipe_error(pp, rc, seq, &err, &err_seq);
	}
	return err ? ckpt_fail(-err, "%s", pp->msg) : 0;
}
