/* The public save: one object for one process or many. A save without a communicator is the
 * one-process save (save/), one with a communicator this rank's part of a multi-rank save
 * (dist/); every call here picks the one it holds, so that callers write one lifecycle. */
#include <stdbool.h>
#include <stdlib.h>

#include "api/api.h"
#include "common/common.h"

struct ckpt_save {
	save1 *one;  /* without a communicator */
	dsave *dist; /* with one */
	unsigned flags;
	bool submitted;
};

static int save_opts(const ckpt_save_options *o, ckpt_save_options *out)
{
	*out = (ckpt_save_options){.struct_size = sizeof *out};
	if (!o)
		return 0;
	int rc = api_size_ok(o->struct_size, sizeof *o, "ckpt_save_options");
	if (rc)
		return rc;
	*out = *o;
	if (o->flags & ~(CKPT_SAVE_THREADED | CKPT_SAVE_DEFER))
		return ckpt_fail(CKPT_E_INVAL, "unknown save flags 0x%x", o->flags);
	if (o->flags && !o->comm)
		return ckpt_fail(CKPT_E_INVAL, "CKPT_SAVE_THREADED and CKPT_SAVE_DEFER need a "
				 "communicator (ckpt_save_options.comm)");
	if ((o->flags & CKPT_SAVE_DEFER) && !(o->flags & CKPT_SAVE_THREADED))
		return ckpt_fail(CKPT_E_INVAL, "CKPT_SAVE_DEFER needs CKPT_SAVE_THREADED");
	if (o->comm)
		return api_size_ok(o->comm->struct_size, sizeof *o->comm, "ckpt_comm");
	return 0;
}

CKPT_API int ckpt_save_begin(ckpt_store *store, uint64_t step, const ckpt_save_options *opts,
			     ckpt_save **out)
{
	if (!out)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_save_begin: out is NULL");
	*out = NULL;
	ckpt_save_options o;
	int rc = save_opts(opts, &o);
	if (rc)
		return rc;
	ckpt_save *sv = calloc(1, sizeof *sv);
	if (!sv)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	sv->flags = o.flags;
	rc = o.comm ? dsave_begin(store, o.comm, step, &sv->dist) : save1_begin(store, step, &sv->one);
	if (rc) {
		free(sv);
		return rc;
	}
	*out = sv;
	return 0;
}

/* A piece of a global tensor in a save without a communicator: a one-process checkpoint holds
 * whole tensors only. */
static int add_one(ckpt_save *sv, const ckpt_tensor *t)
{
	if (t->global_shape || t->offsets || t->nreplicas > 1)
		return ckpt_fail(CKPT_E_INVAL, "tensor %s: a box, range or replica needs a multi-rank "
				 "save (ckpt_save_options.comm)", t->name ? t->name : "(null)");
	return save1_add_tensor(sv->one, t->name, t->dtype, t->ndim, t->shape, t->mem, t->data);
}

static int add_dist(ckpt_save *sv, const ckpt_tensor *t)
{
	unsigned nrep = t->nreplicas ? t->nreplicas : 1;
	if (t->offsets && !t->global_shape)
		return ckpt_fail(CKPT_E_INVAL, "tensor %s: offsets without global_shape",
				 t->name ? t->name : "(null)");
	if (!t->global_shape) {
		if (nrep > 1)
			return dsave_add_replicated(sv->dist, t->name, t->dtype, t->ndim, t->shape,
						    t->replica, nrep, t->mem, t->data);
		/* Held by this rank alone: a global tensor of one box. */
		uint64_t zero[CKPT_MAX_DIMS] = {0};
		if (t->ndim > CKPT_MAX_DIMS)
			return ckpt_fail(CKPT_E_INVAL, "tensor %s: %u dimensions, at most %d",
					 t->name ? t->name : "(null)", t->ndim, CKPT_MAX_DIMS);
		return dsave_add_shard(sv->dist, t->name, t->dtype, t->ndim, t->shape, zero,
				       t->shape, t->mem, t->data);
	}
	if (!t->offsets)
		return dsave_add_range(sv->dist, t->name, t->dtype, t->ndim, t->global_shape,
				       t->offset, t->count, t->replica, nrep, t->mem, t->data);
	if (nrep > 1)
		return dsave_add_shard_replica(sv->dist, t->name, t->dtype, t->ndim,
					       t->global_shape, t->offsets, t->shape, t->replica,
					       nrep, t->mem, t->data);
	return dsave_add_shard(sv->dist, t->name, t->dtype, t->ndim, t->global_shape, t->offsets,
			       t->shape, t->mem, t->data);
}

CKPT_API int ckpt_save_add(ckpt_save *sv, const ckpt_tensor *t)
{
	if (!sv || !t)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_save_add: NULL save or tensor");
	int rc = api_size_ok(t->struct_size, sizeof *t, "ckpt_tensor");
	if (rc)
		return rc;
	if (t->nreplicas > 1 && t->replica >= t->nreplicas)
		return ckpt_fail(CKPT_E_INVAL, "tensor %s: replica %u of %u",
				 t->name ? t->name : "(null)", t->replica, t->nreplicas);
	return sv->one ? add_one(sv, t) : add_dist(sv, t);
}

CKPT_API int ckpt_save_set_meta(ckpt_save *sv, const char *key, const char *value)
{
	return sv->one ? save1_set_meta(sv->one, key, value) : dsave_set_meta(sv->dist, key, value);
}

CKPT_API int ckpt_save_add_tag(ckpt_save *sv, const char *tag)
{
	return sv->one ? save1_add_tag(sv->one, tag) : dsave_add_tag(sv->dist, tag);
}

CKPT_API int ckpt_save_after_stream(ckpt_save *sv, void *stream)
{
	return sv->one ? save1_after_stream(sv->one, stream) : dsave_after_stream(sv->dist, stream);
}

CKPT_API int ckpt_save_submit(ckpt_save *sv)
{
	if (sv->submitted)
		return ckpt_fail(CKPT_E_STATE, "save: already submitted");
	sv->submitted = true;
	return sv->one ? save1_submit(sv->one) : dsave_submit(sv->dist, sv->flags);
}

CKPT_API int ckpt_save_wait_snapshot(ckpt_save *sv)
{
	return sv->one ? save1_wait_snapshot(sv->one) : dsave_wait_snapshot(sv->dist);
}

CKPT_API int ckpt_save_fence(ckpt_save *sv, void *stream)
{
	return sv->one ? save1_fence(sv->one, stream) : dsave_fence(sv->dist, stream);
}

CKPT_API int ckpt_save_poll(const ckpt_save *sv)
{
	return sv->one ? save1_poll(sv->one) : dsave_poll(sv->dist);
}

CKPT_API int ckpt_save_progress(const ckpt_save *sv, uint64_t *done)
{
	if (!sv || !done)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_save_progress: NULL argument");
	if (sv->one)
		return save1_progress(sv->one, done);
	/* A threaded multi-rank save hands its part to the commit thread, which frees it. */
	if (sv->flags & CKPT_SAVE_THREADED)
		return ckpt_fail(CKPT_E_UNSUPPORTED, "no progress count for a threaded multi-rank save");
	return dsave_progress(sv->dist, done);
}

CKPT_API int ckpt_save_release(ckpt_save *sv, int rc, const char *why)
{
	if (sv->one)
		return ckpt_fail(CKPT_E_STATE, "ckpt_save_release: a save without CKPT_SAVE_DEFER");
	return dsave_release(sv->dist, rc, why);
}

/* wait and commit free the inner save in every case (commit but after a submit). */
static int finish(ckpt_save *sv, ckpt_stats *stats, bool commit)
{
	ckpt_stats st = {.struct_size = sizeof st};
	int bad = stats ? api_size_ok(stats->struct_size, sizeof *stats, "ckpt_stats") : 0;
	int rc;
	if (commit && sv->submitted)
		return ckpt_fail(CKPT_E_STATE, "save: submitted; ckpt_save_wait() finishes it");
	if (commit) {
		rc = sv->one ? save1_commit(sv->one, &st) : dsave_commit(sv->dist, &st);
	} else {
		rc = sv->one ? save1_wait(sv->one, &st) : dsave_wait(sv->dist, &st);
	}
	free(sv);
	if (!rc && bad)
		return ckpt_fail(CKPT_E_INVAL, "the checkpoint is saved, but ckpt_stats.struct_size "
				 "is not set: stats not filled");
	if (stats && !bad)
		api_copy_out(stats, &st, sizeof st);
	return rc;
}

CKPT_API int ckpt_save_wait(ckpt_save *sv, ckpt_stats *stats)
{
	return finish(sv, stats, false);
}

CKPT_API int ckpt_save_commit(ckpt_save *sv, ckpt_stats *stats)
{
	return finish(sv, stats, true);
}

CKPT_API void ckpt_save_abort(ckpt_save *sv)
{
	if (!sv)
		return;
	if (sv->one)
		save1_abort(sv->one);
	else
		dsave_abort(sv->dist);
	free(sv);
}
