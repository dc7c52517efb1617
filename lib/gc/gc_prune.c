/* Retention (retain_prune, retain_prune_gc) and the removal of chosen manifests that it
 * shares with delete: gc_prune_run() removes them durably, then collects through gc.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "gc/gc.h"
#include "gc/gc_int.h"
#include "store/store.h"


/* Removes the manifests choose picks (durably, first), then collects under g. Damaged manifests
 * refuse everything unless CKPT_GC_FORCE. */
int gc_prune_run(struct ckpt_store *s, gc_choose_fn choose, const void *ctx,
		 const gc_rules *g, int flags, gc_report **report)
{
	int rc = gc_maint_lock(s);
	if (rc)
		return rc;
	bool dry = flags & CKPT_GC_DRY_RUN;
	gc_report *rep = gc_new_report();
	struct mfset ms;
	bool *drop = NULL;
	if (!rep) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out_unlock;
	}
	if ((rc = gc_mfset_load(s, &ms)))
		goto out_unlock;
	/* With a damaged manifest nothing is removed unless forced: the operator looks first. */
	if ((rc = gc_refuse_invalid(s, &ms, flags)))
		goto out;
	drop = calloc(ms.n + 1, sizeof *drop);
	rep->steps_removed = calloc(ms.n + 1, sizeof *rep->steps_removed);
	if (!drop || !rep->steps_removed) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = choose(s, &ms, ctx, flags, drop)))
		goto out;
	for (size_t k = 0; k < ms.n; k++)
		if (drop[k]) {
			rep->steps_removed[rep->n_steps_removed++] = ms.steps[k];
			rep->bytes_freed += ms.size[k];
		}
	/* Every pack directory must be there before anything goes: without one, the packs it
	 * holds are unknown and the collection below would fail after the manifests were removed. */
	if ((rc = gc_pack_dirs_present(s)))
		goto out;
	/* Manifests first, durably: after this no remaining checkpoint needs what goes next. */
	for (size_t k = 0; !dry && k < ms.n; k++) {
		if (!drop[k])
			continue;
		char name[64], p[4096];
		store_mf_name(ms.steps[k], name, sizeof name);
		snprintf(p, sizeof p, "%s/%s", s->layout.mf_dir, name);
		if (unlink(p) && errno != ENOENT) {
			int e = errno;
			rc = ckpt_fail(ckpt_errno_code(e), "remove %s: %s", p, strerror(e));
			goto out;
		}
		gc_kill_point();
	}
	if (!dry && rep->n_steps_removed && (rc = io_fsync_dir(s->layout.mf_dir)))
		goto out;
	rc = gc_collect(s, &ms, drop, g, dry, rep);
out:
	gc_mfset_free(&ms);
out_unlock:
	free(drop);
	gc_maint_unlock(s);
	if (rc || !report)
		gc_report_free(rep);
	else
		*report = rep;
	return rc;
}

struct by_time {
	const struct mfset *ms;
	size_t *idx; /* valid manifests, newest commit time first (then highest step) */
	size_t n;
};

static int cmp_newest(const void *a, const void *b, void *arg)
{
	const struct mfset *ms = arg;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	if (ms->m[x].time_ns != ms->m[y].time_ns)
		return ms->m[x].time_ns > ms->m[y].time_ns ? -1 : 1;
	return ms->steps[x] > ms->steps[y] ? -1 : ms->steps[x] < ms->steps[y];
}

/* The period of a commit time for a rule: hour, day, ISO week, month or year, in UTC (borg uses
 * local time; UTC makes a store's retention the same on every node and in every time zone). */
static void period_of(int64_t time_ns, char rule, char *buf, size_t len)
{
	time_t t = (time_t)(time_ns / 1000000000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, rule == 'H' ? "%Y-%m-%d %H" : rule == 'd' ? "%Y-%m-%d" : rule == 'w' ? "%G-%V"
			   : rule == 'm' ? "%Y-%m" : "%Y", &tm);
}

/* What keeps each checkpoint: the first rule that did (CKPT_KEEP_*, 0: none yet) and, for
 * keep_last and the period rules, the how-manieth it kept (0: the oldest, kept for want of
 * periods). keep_as() records a rule only for a checkpoint none kept before. */
struct keep {
	unsigned char *rule;
	uint32_t *nth;
};

static bool keep_as(struct keep *kp, size_t k, int rule, uint32_t nth)
{
	if (kp->rule[k])
		return false;
	kp->rule[k] = (unsigned char)rule;
	kp->nth[k] = nth;
	return true;
}

/* borg's prune_split: the newest checkpoint of each of the newest n periods, skipping periods whose
 * newest is kept already; the oldest checkpoint too when fewer than n periods were found. */
static void keep_split(const struct by_time *bt, char period, int rule, uint64_t n, struct keep *kp)
{
	char last[32] = "", cur[32];
	uint64_t kept = 0;
	if (!n || !bt->n)
		return;
	for (size_t i = 0; i < bt->n && kept < n; i++) {
		size_t k = bt->idx[i];
		period_of(bt->ms->m[k].time_ns, period, cur, sizeof cur);
		if (!strcmp(cur, last))
			continue;
		strcpy(last, cur);
		if (keep_as(kp, k, rule, (uint32_t)(kept + 1)))
			kept++;
	}
	if (kept < n)
		keep_as(kp, bt->idx[bt->n - 1], rule, 0);
}

/* Retention (retain_rules), in borg's order: within, last, hourly, daily, weekly, monthly,
 * yearly; then the tagged checkpoints, the multiples of keep_every, the listed steps and the newest
 * valid checkpoint. */
static int retention(const struct mfset *ms, const retain_rules *r, bool *drop,
		     ckpt_prune_choice *why)
{
	struct by_time bt = {ms, calloc(ms->n + 1, sizeof(size_t)), 0};
	struct keep kp = {calloc(ms->n + 1, 1), calloc(ms->n + 1, sizeof(uint32_t))};
	if (!bt.idx || !kp.rule || !kp.nth) {
		free(bt.idx);
		free(kp.rule);
		free(kp.nth);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	for (size_t k = 0; k < ms->n; k++)
		if (!ms->err[k])
			bt.idx[bt.n++] = k;
	qsort_r(bt.idx, bt.n, sizeof *bt.idx, cmp_newest, (void *)ms);
	int64_t now = r->now ? r->now : ckpt_wall_ns() / 1000000000;
	for (size_t i = 0; r->keep_within > 0 && i < bt.n; i++)
		if (ms->m[bt.idx[i]].time_ns / 1000000000 > now - r->keep_within)
			keep_as(&kp, bt.idx[i], CKPT_KEEP_WITHIN, 0);
	/* keep_last counts by step, as retain_prune() always has. */
	uint64_t kept = 0;
	for (size_t k = ms->n; k-- > 0 && kept < r->keep.keep_last;)
		if (!ms->err[k] && keep_as(&kp, k, CKPT_KEEP_LAST, (uint32_t)(kept + 1)))
			kept++;
	keep_split(&bt, 'H', CKPT_KEEP_HOURLY, r->keep_hourly, &kp);
	keep_split(&bt, 'd', CKPT_KEEP_DAILY, r->keep_daily, &kp);
	keep_split(&bt, 'w', CKPT_KEEP_WEEKLY, r->keep_weekly, &kp);
	keep_split(&bt, 'm', CKPT_KEEP_MONTHLY, r->keep_monthly, &kp);
	keep_split(&bt, 'y', CKPT_KEEP_YEARLY, r->keep_yearly, &kp);
	/* after the period rules, as restic's --keep-tag: a tagged checkpoint a period rule would
	 * have kept anyway still counts for its period */
	for (size_t i = 0; i < bt.n; i++)
		for (size_t q = 0; q < r->n_keep_tags; q++)
			if (tags_match(manifest_tags(&ms->m[bt.idx[i]]), r->keep_tags[q]))
				keep_as(&kp, bt.idx[i], CKPT_KEEP_TAG, 0);
	bool newest = false;
	for (size_t k = ms->n; k-- > 0;) {
		if (ms->err[k]) { /* never removed here: verify shows them, an operator decides */
			keep_as(&kp, k, CKPT_KEEP_DAMAGED, 0);
			continue;
		}
		if (!newest)
			newest = true, keep_as(&kp, k, CKPT_KEEP_NEWEST, 0);
		if (r->keep.keep_every && ms->steps[k] % r->keep.keep_every == 0)
			keep_as(&kp, k, CKPT_KEEP_EVERY, 0);
		for (size_t q = 0; q < r->keep.n_keep_steps; q++)
			if (r->keep.keep_steps[q] == ms->steps[k])
				keep_as(&kp, k, CKPT_KEEP_STEP, 0);
		drop[k] = !kp.rule[k];
	}
	for (size_t k = 0; why && k < ms->n; k++)
		why[k] = (ckpt_prune_choice){ms->steps[k], kp.rule[k], kp.nth[k]};
	free(bt.idx);
	free(kp.rule);
	free(kp.nth);
	return 0;
}

static int choose_retention(struct ckpt_store *s, const struct mfset *ms, const void *ctx,
			    int flags, bool *drop)
{
	(void)s;
	(void)flags;
	return retention(ms, ctx, drop, NULL);
}

int gc_retention_choose(const uint64_t *steps, const struct manifest *m, const int *err, size_t n,
			const retain_rules *r, bool *drop)
{
	struct mfset ms = {.n = n, .steps = (uint64_t *)steps, .m = (struct manifest *)m,
			   .err = (int *)err};
	return retention(&ms, r, drop, NULL);
}

int gc_retention_check(const retain_rules *r)
{
	if (r->keep_within < 0)
		return ckpt_fail(CKPT_E_INVAL, "prune: keep_within must not be negative");
	for (size_t q = 0; q < r->n_keep_tags; q++) {
		int rc = r->keep_tags && r->keep_tags[q] ? tag_check(r->keep_tags[q])
				: ckpt_fail(CKPT_E_INVAL, "prune: NULL keep_tags entry");
		if (rc)
			return rc;
	}
	return 0;
}

int retain_prune_gc(ckpt_store *s, const retain_rules *r, const gc_rules *g,
				 int flags, gc_report **report)
{
	if (report)
		*report = NULL;
	if (!s || !r)
		return ckpt_fail(CKPT_E_INVAL, "prune: NULL store or policy");
	int rc = gc_retention_check(r);
	if (rc)
		return rc;
	if (g && (!(g->compact_below >= 0 && g->compact_below <= 1) ||
		  !(g->max_unused >= 0 && g->max_unused <= 1)))
		return ckpt_fail(CKPT_E_INVAL, "prune: compact_below and max_unused must be 0 to 1");
	return gc_prune_run(s, choose_retention, r, g, flags, report);
}

int retain_prune(ckpt_store *s, const retain_keep *pol, int flags,
			      gc_report **report)
{
	if (report)
		*report = NULL;
	if (!s || !pol)
		return ckpt_fail(CKPT_E_INVAL, "prune: NULL store or policy");
	retain_rules r = {.keep = *pol};
	return retain_prune_gc(s, &r, NULL, flags, report);
}

long retain_prune_explain(ckpt_store *s, const retain_rules *r,
				       ckpt_prune_choice **out)
{
	if (out)
		*out = NULL;
	if (!s || !r || !out)
		return ckpt_fail(CKPT_E_INVAL, "prune: NULL store, policy or out");
	int rc = gc_retention_check(r);
	struct mfset ms;
	if (rc || (rc = gc_mfset_load(s, &ms)))
		return rc;
	bool *drop = calloc(ms.n + 1, sizeof *drop);
	ckpt_prune_choice *why = calloc(ms.n + 1, sizeof *why);
	rc = drop && why ? retention(&ms, r, drop, why) : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	long n = (long)ms.n;
	free(drop);
	gc_mfset_free(&ms);
	if (rc) {
		free(why);
		return rc;
	}
	*out = why;
	return n;
}
