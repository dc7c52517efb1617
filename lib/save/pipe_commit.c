/* The save pipeline's COMMIT stage, on a worker once the head save's last job is written: makes
 * its packs durable (pipe_pack.c), calls the save's commit callback (the manifest), commits or
 * drops its pending dedup index entries, learns the snapshot hints (pipe_hint.c), fills the
 * timing statistics and passes the head on (pipe_sched.c). Calls down into those three. */
#include "save/pipe_int.h"

#include <stdlib.h>

void pipe_finalize_task(struct task *t)
{
	struct save_task *ft = (struct save_task *)t;
	struct pipe_save *ps = ft->ps;
	struct pipe *p = ps->p;
	struct ckpt_store *s = p->s;
	free(ft);
	/* Decided once: a cancel that arrives while the commit runs is too late (the checkpoint
	 * may already be visible), so it cannot make us remove packs a manifest names. */
	bool failed = save_failed(ps);
	int rc = failed ? 0 : pipe_close_packs(ps, true);
	if (!failed && !rc)
		rc = ps->ops->commit(ps, &ps->keep_packs);
	if (rc) {
		pipe_set_error(ps, rc);
		failed = true;
	}
	if (!failed) {
		pthread_mutex_lock(&p->mu);
		__atomic_store_n(&ps->err, 0, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&p->mu);
	}
	if (failed) {
		pipe_close_packs(ps, false);
		index_drop_pending(store_index_lock(s));
		store_index_unlock(s);
	} else {
		index_commit_pending(store_index_lock(s));
		store_index_resync(s);
		store_index_unlock(s);
		pipe_learn_snapshot(p, ps);
	}
	double t1 = ckpt_now();
	pthread_mutex_lock(&p->mu);
	ps->st.seconds = t1 - ps->t_submit;
	ps->st.snapshot_seconds = (ps->snapshot_done ? ps->t_snapshot : t1) - ps->t_submit;
	ps->st.persist_seconds = t1 - (ps->snapshot_done ? ps->t_snapshot : t1);
	ps->st.pool_peak = pool_take_peak(&p->pool);
	/* What this save did: O_DIRECT on every pack it wrote (a save that wrote nothing: what
	 * the handle would do). */
	bool direct = store_direct_io(s);
	if (ps->npacks) {
		direct = true;
		for (size_t i = 0; i < ps->npacks; i++)
			direct &= ps->packs[i].direct;
	}
	ps->st.direct_io = direct;
	pipe_finish_head(p, ps);
	pthread_mutex_unlock(&p->mu);
}
