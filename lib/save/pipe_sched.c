/* The save pipeline's scheduler: the grant queue (jobs waiting for a pool slab, granted in order)
 * and the FIFO of saves (only the head save is processed and committed), and the errors of a save.
 * It is the bottom of the pipeline's files: it queues the stages' tasks through p->stages and
 * calls no other file of the pipeline (pipe_int.h shows the order).
 *
 *   submit ─(slab granted in order)─► worker: COPY (snapshot) ─► worker: PROCESS
 *             hash, dedup, encode, compact records ─► engine: WRITE ─► last job ─► worker: COMMIT
 *
 * A slab job is one pool slab's worth of chunks laid out as records. Nobody blocks on the pool: a
 * job waits in the grant queue until a slab is free, and whoever frees one (the write's
 * completion) grants it to the next job in order, so workers always make progress; saves are
 * processed (hashed against the dedup
 * index, written, committed) strictly in submission order, so a save only ever references chunks
 * that are committed or its own, and a failed save cannot leave a later one dangling. A slab goes
 * back to the pool only when its write completed (never reused while in flight). */
#include "save/pipe_int.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- errors ------------------------------------------------------------------------------ */
void pipe_set_error(struct pipe_save *ps, int err)
{
	struct pipe *p = ps->p;
	pthread_mutex_lock(&p->mu);
	if (!ps->err) {
		__atomic_store_n(&ps->err, err, __ATOMIC_RELEASE);
		snprintf(ps->errmsg, sizeof ps->errmsg, "saving checkpoint %llu: %s",
			 (unsigned long long)ps->step, ckpt_errmsg());
	}
	pthread_mutex_unlock(&p->mu);
}

/* ---- job bookkeeping ---------------------------------------------------------------------- */
static void queue_finalize(struct pipe *p, struct pipe_save *ps)
{
	/* With p->mu held. */
	ps->finalizing = true;
	struct save_task *ft = calloc(1, sizeof *ft);
	if (!ft) {
		/* Cannot even queue the commit: fail the save in place. */
		if (!ps->err) {
			ps->err = -CKPT_E_NOMEM;
			snprintf(ps->errmsg, sizeof ps->errmsg, "saving checkpoint %llu: out of memory",
				 (unsigned long long)ps->step);
		}
		ft = NULL;
	}
	if (ft) {
		ft->task.fn = p->stages->finalize;
		ft->ps = ps;
		workers_submit(p->w, &ft->task);
	}
}

static void become_head(struct pipe *p, struct pipe_save *ps)
{
	ps->is_head = true;
	while (ps->ready) {
		struct slabjob *j = ps->ready;
		ps->ready = j->next;
		j->task.fn = p->stages->process;
		workers_submit(p->w, &j->task);
	}
	if (ps->jobs_done == ps->njobs && !ps->finalizing)
		queue_finalize(p, ps);
}

/* Grants free slabs to the jobs waiting in the grant queue, in order, and queues their copies.
 * With p->mu held, by whoever may have made a grant possible: the submit that queued jobs, every
 * release of a slab and every start of a copy. A dispatcher thread used to do this, blocked in the
 * pool and woken for each released slab: two thread handoffs (release -> dispatcher -> worker) on
 * the path of every slab once the pool is full, one voluntary context switch per slab.
 * At most one copy per worker waits granted: more would not copy sooner, and granting the whole
 * pool ahead made the copies cycle through all of it, so that with a fast disk every copy wrote
 * to memory out of the caches (the slab released last, the one the pool hands out, is warm). */
void pipe_grant_slabs(struct pipe *p)
{
	unsigned slab;
	while (p->dq_head && p->granted_queued < workers_count(p->w)) {
		if (!pool_try_acquire(&p->pool, &slab)) {
			if (!p->starved_since)
				p->starved_since = ckpt_now();
			return;
		}
		struct slabjob *j = p->dq_head;
		p->dq_head = j->next;
		if (!p->dq_head)
			p->dq_tail = NULL;
		j->slab = slab;
		if (p->starved_since) {
			/* Backpressure: the time this job waited at the head for a free slab. */
			j->ps->st.wait_seconds += ckpt_now() - p->starved_since;
			p->starved_since = 0;
		}
		j->task.fn = p->stages->copy;
		p->granted_queued++;
		workers_submit_urgent(p->w, &j->task);
	}
}

/* A job is over (written, or abandoned): its slab goes back and may be granted to the next job
 * at once; written bytes are counted in the same critical section. */
void pipe_job_finished(struct slabjob *j, uint64_t written)
{
	struct pipe_save *ps = j->ps;
	struct pipe *p = ps->p;
	pool_release(&p->pool, j->slab);
	pthread_mutex_lock(&p->mu);
	pipe_grant_slabs(p);
	ps->st.bytes_written += written;
	ps->jobs_done++;
	if (ps->jobs_done == ps->njobs && ps->is_head && !ps->finalizing)
		queue_finalize(p, ps);
	pthread_mutex_unlock(&p->mu);
}

/* The save's copies are done (or it finished, failed or not): trainer streams waiting in a fence
 * may run. Lock held. */
void pipe_fence_release(struct pipe *p, struct pipe_save *ps)
{
	if (ps->fence_val)
		__atomic_store_n(&p->flags[ps->fence_slot], ps->fence_val, __ATOMIC_RELEASE);
}

/* Queues a planned save: joins the FIFO, its jobs the grant queue. */
void pipe_enqueue(struct pipe *p, struct pipe_save *ps)
{
	pthread_mutex_lock(&p->mu);
	if (p->fifo_tail)
		p->fifo_tail->next_fifo = ps;
	else
		p->fifo_head = ps;
	p->fifo_tail = ps;
	if (!ps->njobs) {
		ps->snapshot_done = true;
		ps->t_snapshot = ps->t_submit;
		pipe_fence_release(p, ps);
	}
	for (size_t i = 0; i < ps->njobs; i++) {
		struct slabjob *j = &ps->jobs[i];
		j->next = NULL;
		if (p->dq_tail)
			p->dq_tail->next = j;
		else
			p->dq_head = j;
		p->dq_tail = j;
	}
	pipe_grant_slabs(p);
	if (p->fifo_head == ps)
		become_head(p, ps);
	pthread_mutex_unlock(&p->mu);
}

void pipe_finish_head(struct pipe *p, struct pipe_save *ps)
{
	pipe_fence_release(p, ps);
	ps->finished = true;
	pthread_cond_broadcast(&ps->cv);
	p->fifo_head = ps->next_fifo;
	if (!p->fifo_head)
		p->fifo_tail = NULL;
	if (p->fifo_head)
		become_head(p, p->fifo_head);
}
