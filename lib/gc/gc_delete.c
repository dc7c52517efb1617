/* Removal of listed checkpoints (retain_delete) through gc_prune_run(): an unknown step fails
 * naming the steps there are, and the newest valid one is kept unless CKPT_GC_NEWEST. */
#include <stdio.h>

#include "common/common.h"
#include "gc/gc_int.h"
#include "store/store.h"

struct step_list {
	const uint64_t *steps;
	size_t n;
};

/* "10, 20, 30" (the first few) into buf: the steps a mistyped one could have meant. */
static void list_steps(const struct mfset *ms, char *buf, size_t len)
{
	buf[0] = 0;
	for (size_t k = 0; k < ms->n; k++) {
		char one[32];
		if (k == 8) {
			strncat(buf, ", ...", len - strlen(buf) - 1);
			break;
		}
		snprintf(one, sizeof one, "%s%llu", k ? ", " : "", (unsigned long long)ms->steps[k]);
		strncat(buf, one, len - strlen(buf) - 1);
	}
}

static int choose_steps(struct ckpt_store *s, const struct mfset *ms, const void *ctx, int flags,
			bool *drop)
{
	const struct step_list *sl = ctx;
	char have[256];
	for (size_t q = 0; q < sl->n; q++) {
		size_t k = 0;
		while (k < ms->n && ms->steps[k] != sl->steps[q])
			k++;
		if (k == ms->n) {
			list_steps(ms, have, sizeof have);
			return ckpt_fail(CKPT_E_NOTFOUND, "store %s has no checkpoint of step %llu (%s%s)",
					 s->path, (unsigned long long)sl->steps[q],
					 ms->n ? "steps: " : "it has none", have);
		}
		drop[k] = true;
	}
	size_t newest = ms->n;
	while (newest-- > 0 && ms->err[newest])
		;
	if (newest < ms->n && drop[newest] && !(flags & CKPT_GC_NEWEST))
		return ckpt_fail(CKPT_E_INVAL, "step %llu is the newest valid checkpoint of %s, which "
				 "is kept", (unsigned long long)ms->steps[newest], s->path);
	return 0;
}

int retain_delete(ckpt_store *s, const uint64_t *steps, size_t n,
			       const gc_rules *g, int flags, gc_report **report)
{
	if (report)
		*report = NULL;
	if (!s || (n && !steps))
		return ckpt_fail(CKPT_E_INVAL, "delete: NULL store or steps");
	if (g && (!(g->compact_below >= 0 && g->compact_below <= 1) ||
		  !(g->max_unused >= 0 && g->max_unused <= 1)))
		return ckpt_fail(CKPT_E_INVAL, "delete: compact_below and max_unused must be 0 to 1");
	struct step_list sl = {steps, n};
	return gc_prune_run(s, choose_steps, &sl, g, flags, report);
}
