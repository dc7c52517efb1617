/* reader1_restore_all: every tensor's read groups planned as jobs in tensor order and
 * restored by worker threads, each with its own pipe (rpipe.c), codec and staging, so that reads
 * stay queued across groups and tensors. Uses restore.c, reader.c, rpipe.c and stage.c. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <pthread.h>

#include "format/codec.h"
#include "common/common.h"
#include "read/read_int.h"
#include "store/store.h"
#include "common/workers.h"

/* Threads of restore_all: one per core (or CKPT_OPT_THREADS), each keeping at least two of the
 * rd_restore_slots reads in flight so that its next read is at the device while it hashes. Reads
 * wait on the device, not the CPU: the slots, not the threads, keep the queue full. */
static unsigned restore_threads(const struct reader1 *r)
{
	unsigned n = r->s->opt.threads ? r->s->opt.threads : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	return MAX(MIN(n, rd_restore_slots(r) / 2), 1u);
}

/* ---- parallel restore --------------------------------------------------------------------- */
struct rall {
	struct reader1 *r;
	pthread_mutex_t mu;
	struct rjob *jobs;
	size_t njobs, next;    /* jobs handed out (mu) */
	unsigned slots;        /* per thread */
	int err;               /* the first error (mu), which stops handing out jobs */
	char msg[1024];
};

static bool rall_next(void *arg, struct rjob *out)
{
	struct rall *a = arg;
	pthread_mutex_lock(&a->mu);
	bool more = !a->err && a->next < a->njobs;
	if (more)
		*out = a->jobs[a->next++];
	pthread_mutex_unlock(&a->mu);
	return more;
}

struct rtask {
	struct task task;
	struct rall *all;
};

/* One restore_all thread: its own pipe and staging, fed from the shared job list. */
static void rthread_run(struct task *tk)
{
	struct rall *a = ((struct rtask *)tk)->all;
	struct reader1 *r = a->r;
	struct rres x = {0};
	x.codec = ckpt_codec_ctx_create(r->m.chunk_size);
	x.buf = ckpt_aligned_alloc(r->buf_cap);
	struct rpipe *pp = x.codec && x.buf ? rpipe_create(r, a->slots, x.codec, &x) : NULL;
	int rc;
	if (!pp) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	} else {
		rc = rpipe_run(pp, rall_next, a);
	}
	int drc = rd_restore_drain(&x); /* its CUDA groups' copies */
	rc = rc ? rc : drc;
	rpipe_free(pp);
	rres_free(&x);
	pthread_mutex_lock(&a->mu);
	if (rc && !a->err) {
		a->err = rc;
		snprintf(a->msg, sizeof a->msg, "%s", ckpt_errmsg());
	}
	pthread_mutex_unlock(&a->mu);
}

/* Plans restore_all: one job per read group, destinations asked for in tensor order. Returns 0
 * or the first error (of dst_for's destinations, or out of memory). */
static int rall_plan(struct rall *a, ckpt_dst_fn dst_for, void *arg)
{
	struct reader1 *r = a->r;
	size_t cap = 64;
	if (!(a->jobs = malloc(cap * sizeof *a->jobs)))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; i < r->m.n_tensors; i++) {
		ckpt_tensor_info info;
		reader1_tensor(r, i, &info);
		int mem = CKPT_MEM_HOST, rc;
		void *dst = dst_for(i, &info, &mem, arg);
		if (!dst && info.nbytes)
			continue;
		if ((rc = rd_check_dst(r, i, mem, dst, info.nbytes)))
			return rc;
		const struct mf_tensor *t = &r->m.tensors[i];
		if (!t->nrefs)
			rd_count_restored(r, t);
		for (uint64_t j = 0; j < t->nrefs;) {
			uint64_t len, k = rd_group_end(r, t, j, &len);
			if (a->njobs == cap) {
				struct rjob *n = realloc(a->jobs, (cap *= 2) * sizeof *n);
				if (!n)
					return ckpt_fail(CKPT_E_NOMEM, "out of memory");
				a->jobs = n;
			}
			a->jobs[a->njobs++] = (struct rjob){.ti = i, .j0 = j, .j1 = k, .len = len,
							    .mem = mem, .dst = dst,
							    .last = k == t->nrefs};
			j = k;
		}
	}
	return 0;
}

/* The read groups of every tensor go to restore_threads threads, each keeping its share of
 * rd_restore_slots reads in flight (rpipe_run), so reads stay queued across groups and tensors. */
int reader1_restore_all(reader1 *r, ckpt_dst_fn dst_for, void *arg)
{
	if (!r || !dst_for)
		return ckpt_fail(CKPT_E_INVAL, "restore_all: NULL reader or callback");
	double t0 = ckpt_now();
	pthread_mutex_lock(&r->mu);
	r->gen++;
	pthread_mutex_unlock(&r->mu);
	struct rall a = {.r = r};
	pthread_mutex_init(&a.mu, NULL);
	int rc = rall_plan(&a, dst_for, arg);
	bool devs[16] = {false};
	for (size_t k = 0; k < a.njobs; k++)
		if (a.jobs[k].mem != CKPT_MEM_HOST)
			devs[a.jobs[k].mem] = true;
	if (!rc)
		rc = rd_order_on_caller(r, devs);
	if (!rc && a.njobs) {
		unsigned n = (unsigned)MIN((size_t)restore_threads(r), a.njobs);
		a.slots = MAX(rd_restore_slots(r) / n, 2u);
		struct rtask *tasks = calloc(n, sizeof *tasks);
		struct workers *w = tasks ? workers_create(n) : NULL;
		if (!w) {
			rc = ckpt_fail(CKPT_E_NOMEM, "cannot start restore threads");
		} else {
			r->st.threads = MAX(r->st.threads, workers_count(w));
			for (unsigned k = 0; k < n; k++) {
				tasks[k] = (struct rtask){.task.fn = rthread_run, .all = &a};
				workers_submit(w, &tasks[k].task);
			}
			workers_destroy(w); /* runs the tasks to completion */
			if (a.err)
				rc = ckpt_fail(-a.err, "%s", a.msg);
		}
		/* The tensors count once all their groups are checked: none when the call fails. */
		for (size_t k = 0; !rc && k < a.njobs; k++)
			if (a.jobs[k].last)
				rd_count_restored(r, &r->m.tensors[a.jobs[k].ti]);
		free(tasks);
	}
	free(a.jobs);
	pthread_mutex_destroy(&a.mu);
	r->st.seconds += ckpt_now() - t0;
	return rc;
}
