/* Retention for a store or its remote: prune, gc and delete, one report type. The local store's
 * rules run in gc/, the remote's in tier/; this file turns the public structs (with their
 * struct_size) into theirs and their reports into one. */
#include <stdlib.h>

#include "api/api.h"

static int rules_of(const ckpt_retention *in, retain_rules *out)
{
	if (!in)
		return ckpt_fail(CKPT_E_INVAL, "prune: no retention given");
	int rc = api_size_ok(in->struct_size, sizeof *in, "ckpt_retention");
	if (rc)
		return rc;
	*out = (retain_rules){
		.keep = {.keep_last = in->keep_last, .keep_every = in->keep_every,
			 .keep_steps = in->keep_steps, .n_keep_steps = in->n_keep_steps},
		.now = in->now, .keep_within = in->keep_within, .keep_hourly = in->keep_hourly,
		.keep_daily = in->keep_daily, .keep_weekly = in->keep_weekly,
		.keep_monthly = in->keep_monthly, .keep_yearly = in->keep_yearly,
		.keep_tags = in->keep_tags, .n_keep_tags = in->n_keep_tags};
	return 0;
}

/* The public progress callback behind gc's. */
struct gc_progress {
	ckpt_progress_fn fn;
	void *arg;
};

static void gc_progress_cb(uint64_t done, uint64_t total, void *arg)
{
	struct gc_progress *p = arg;
	(void)p->fn(p->arg, done, total);
}

/* *out NULL for a NULL policy (gc's own default). */
static int policy_of(const ckpt_gc_policy *in, gc_rules *buf, struct gc_progress *p,
		     const gc_rules **out)
{
	*out = NULL;
	if (!in)
		return 0;
	int rc = api_size_ok(in->struct_size, sizeof *in, "ckpt_gc_policy");
	if (rc)
		return rc;
	*p = (struct gc_progress){in->on_progress, in->progress_arg};
	*buf = (gc_rules){.compact_below = in->compact_below, .max_unused = in->max_unused,
			  .on_progress = in->on_progress ? gc_progress_cb : NULL, .progress_arg = p};
	*out = buf;
	return 0;
}

static int remote_policy(const ckpt_gc_policy *gc, int flags)
{
	if (!(flags & CKPT_GC_REMOTE) || !gc)
		return 0;
	return ckpt_fail(CKPT_E_UNSUPPORTED, "a remote is not compacted: pass no gc policy with "
			 "CKPT_GC_REMOTE");
}

/* Moves a local report into the public one (or drops it when the caller wants none). */
static int from_local(gc_report *g, ckpt_report **out)
{
	if (!out || !g) {
		gc_report_free(g);
		return 0;
	}
	ckpt_report *r = calloc(1, sizeof *r);
	if (!r) {
		gc_report_free(g);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	*r = (ckpt_report){.steps_removed = g->steps_removed, .n_steps_removed = g->n_steps_removed,
			   .packs_removed = g->packs_removed, .packs_compacted = g->packs_compacted,
			   .manifests_rewritten = g->manifests_rewritten,
			   .parts_removed = g->parts_removed,
			   .leftovers_removed = g->leftovers_removed, .bytes_freed = g->bytes_freed,
			   .bytes_copied = g->bytes_copied, .files_left_alone = g->files_left_alone,
			   .left_alone = g->left_alone, .packs_deferred = g->packs_deferred,
			   .reader = g->reader, .packs_spared = g->packs_spared,
			   .in_flight = g->in_flight};
	*g = (gc_report){0};
	gc_report_free(g);
	*out = r;
	return 0;
}

static int from_remote(const rgc_report *g, uint64_t *removed, ckpt_report **out)
{
	if (!out) {
		free(removed);
		return 0;
	}
	ckpt_report *r = calloc(1, sizeof *r);
	if (!r) {
		free(removed);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	*r = (ckpt_report){.steps_removed = removed, .n_steps_removed = g->manifests_removed,
			   .packs_removed = g->packs_removed, .bytes_freed = g->bytes_freed,
			   .parts_removed = g->parts_removed, .packs_spared = g->packs_spared,
			   .uploads_in_flight = g->uploads_in_flight,
			   .leftovers_removed = g->leftovers_removed,
			   .leftover_bytes = g->leftover_bytes};
	*out = r;
	return 0;
}

/* A dry run's report also says which rule keeps each checkpoint. */
static int add_choices(ckpt_store *s, const retain_rules *rules, ckpt_report *r)
{
	ckpt_prune_choice *c;
	long n = retain_prune_explain(s, rules, &c);
	if (n < 0)
		return (int)n;
	r->choices = c;
	r->n_choices = (size_t)n;
	return 0;
}

CKPT_API int ckpt_store_prune(ckpt_store *s, const ckpt_retention *retention,
			      const ckpt_gc_policy *gc, int flags, ckpt_report **report)
{
	if (report)
		*report = NULL;
	retain_rules rules;
	gc_rules buf;
	struct gc_progress p;
	const gc_rules *pol;
	int rc = rules_of(retention, &rules);
	if (rc || (rc = remote_policy(gc, flags)) || (rc = policy_of(gc, &buf, &p, &pol)))
		return rc;
	if (flags & CKPT_GC_REMOTE) {
		rgc_report rr = {0};
		uint64_t *removed = NULL;
		rc = rstore_prune_gc(s, &rules, flags & ~CKPT_GC_REMOTE, &rr, &removed);
		return rc ? (free(removed), rc) : from_remote(&rr, removed, report);
	}
	gc_report *g = NULL;
	if ((rc = retain_prune_gc(s, &rules, pol, flags, &g)) || (rc = from_local(g, report)))
		return rc;
	if ((flags & CKPT_GC_DRY_RUN) && report && (rc = add_choices(s, &rules, *report))) {
		ckpt_report_free(*report);
		*report = NULL;
	}
	return rc;
}

CKPT_API int ckpt_store_gc(ckpt_store *s, const ckpt_gc_policy *gc, int flags,
			   ckpt_report **report)
{
	if (report)
		*report = NULL;
	gc_rules buf;
	struct gc_progress p;
	const gc_rules *pol;
	int rc = remote_policy(gc, flags);
	if (rc || (rc = policy_of(gc, &buf, &p, &pol)))
		return rc;
	if (flags & CKPT_GC_REMOTE) {
		rgc_report rr = {0};
		rc = rstore_gc(s, flags & ~CKPT_GC_REMOTE, &rr);
		return rc ? rc : from_remote(&rr, NULL, report);
	}
	gc_report *g = NULL;
	rc = retain_gc_with(s, pol, flags, &g);
	return rc ? rc : from_local(g, report);
}

CKPT_API int ckpt_store_delete(ckpt_store *s, const uint64_t *steps, size_t n,
			       const ckpt_gc_policy *gc, int flags, ckpt_report **report)
{
	if (report)
		*report = NULL;
	if (flags & CKPT_GC_REMOTE)
		return ckpt_fail(CKPT_E_UNSUPPORTED, "delete acts on the local store; prune the "
				 "remote (ckpt_store_prune with CKPT_GC_REMOTE) instead");
	gc_rules buf;
	struct gc_progress p;
	const gc_rules *pol;
	int rc = policy_of(gc, &buf, &p, &pol);
	if (rc)
		return rc;
	gc_report *g = NULL;
	rc = retain_delete(s, steps, n, pol, flags, &g);
	return rc ? rc : from_local(g, report);
}

CKPT_API void ckpt_report_free(ckpt_report *r)
{
	if (!r)
		return;
	free(r->steps_removed);
	free(r->choices);
	free(r->left_alone);
	free(r->reader);
	free(r->in_flight);
	free(r);
}
