/* Options that gc, prune --gc and delete share: how compaction chooses its packs (--max-unused,
 * --compact-below), parsed into a ckpt_gc_policy. */
#include "ckptctl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const ck_max_unused_words[] = {"5%", "10%", "20%", "unlimited", NULL};
const char *const ck_fraction_words[] = {"0", "0.25", "0.5", "0.75", NULL};

int ck_parse_fraction(const char *s, double *out)
{
	char *end;
	if (!*s || !strchr("0123456789.", *s))
		return -1;
	double v = strtod(s, &end);
	if (*end || !isfinite(v) || v < 0 || v > 1)
		return -1;
	*out = v;
	return 0;
}

/* "10%" (0 to 100) or "unlimited", as restic's --max-unused takes a share of the repository. */
static int parse_max_unused(const char *s, double *out)
{
	char *end;
	if (!strcmp(s, "unlimited")) {
		*out = 1;
		return 0;
	}
	if (!*s || !strchr("0123456789.", *s))
		return -1;
	double v = strtod(s, &end);
	if (strcmp(end, "%") || !isfinite(v) || v < 0 || v > 100)
		return -1;
	*out = v / 100;
	return 0;
}

int ck_gc_option(const char *cmd, int c, const char *arg, void *target)
{
	struct ck_gc_opts *o = target;
	switch (c) {
	case CK_OPT_MAX_UNUSED:
		if (parse_max_unused(arg, &o->pol.max_unused))
			return cli_usage_err(cmd, "invalid --max-unused '%s': expected a percentage from "
					     "0%% to 100%% (such as 10%%) or 'unlimited'", arg);
		o->have_max_unused = true;
		return 0;
	case CK_OPT_COMPACT_BELOW:
		if (ck_parse_fraction(arg, &o->pol.compact_below))
			return cli_usage_err(cmd, "invalid --compact-below '%s': expected a fraction from "
					     "0 to 1", arg);
		o->have_compact_below = true;
		return 0;
	}
	return EXIT_USAGE;
}

void ck_gc_finish(struct ck_gc_opts *o)
{
	/* --compact-below alone is the threshold of old: no share limit on top of it. */
	if (!o->have_max_unused)
		o->pol.max_unused = o->have_compact_below ? 1 : CKPT_GC_MAX_UNUSED_DEFAULT;
	if (!o->have_compact_below)
		o->pol.compact_below = 0;
}

static void on_compact(uint64_t done, uint64_t total, void *arg)
{
	struct ck_gc_opts *o = arg;
	if (!o->bar_started) {
		progress_start(&o->bar, "gc: compacting", total, o->progress);
		o->bar_started = true;
	}
	progress_update(&o->bar, done);
}

void ck_gc_progress(struct ck_gc_opts *o, bool enable)
{
	o->progress = enable;
	o->pol.on_progress = on_compact;
	o->pol.progress_arg = o;
}

void ck_gc_progress_end(struct ck_gc_opts *o)
{
	if (o->bar_started)
		progress_end(&o->bar);
}

void ck_gc_json(struct jw *w, const struct ck_gc_opts *o)
{
	jw_key(w, "compact_below");
	jw_dbl(w, o->pol.compact_below);
	jw_key(w, "max_unused");
	jw_dbl(w, o->pol.max_unused);
}
