/* Options that gc, prune --gc and delete share: how compaction chooses its packs (--max-unused,
 * --compact-below), parsed into a ckpt_gc_policy, and how old another node's in-flight marker
 * or reader lease must be to be dead (--grace, the handle's CKPT_OPT_GC_GRACE_S). */
#include "ckptctl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const ck_max_unused_words[] = {"5%", "10%", "20%", "unlimited", NULL};
const char *const ck_fraction_words[] = {"0", "0.25", "0.5", "0.75", NULL};
const char *const ck_grace_words[] = {"0", "1H", "6H", "1d", NULL};

int ck_parse_duration(const char *s, bool zero_ok, int64_t *out)
{
	static const char units[] = "SMHdwmy";
	static const int64_t secs[] = {1, 60, 3600, 86400, 7 * 86400, 31 * 86400, 365 * 86400};
	size_t n = strlen(s);
	uint64_t v;
	char num[32];
	if (zero_ok && !strcmp(s, "0")) {
		*out = 0;
		return 0;
	}
	const char *u = n > 1 ? strchr(units, s[n - 1]) : NULL;
	if (!u || !s[n - 1] || n - 1 >= sizeof num)
		return -1;
	memcpy(num, s, n - 1);
	num[n - 1] = 0;
	int64_t k = secs[u - units];
	if (cli_parse_u64(num, &v) || v < 1 || v > (uint64_t)INT64_MAX / (uint64_t)k)
		return -1;
	*out = (int64_t)v * k;
	return 0;
}

int ck_open_for_gc(const char *cmd, const char *path, const struct ck_gc_opts *g,
		   ckpt_store **out)
{
	if (!g->have_grace)
		return ck_open_store(cmd, path, false, NULL, out);
	ckpt_options *o = ckpt_options_create();
	if (!o) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	int rc = ckpt_options_set(o, CKPT_OPT_GC_GRACE_S, g->grace_s);
	rc = rc < 0 ? ck_fail(cmd, rc, "--grace") : ck_open_store(cmd, path, false, o, out);
	ckpt_options_free(o);
	return rc;
}

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
	case CK_OPT_GRACE:
		if (ck_parse_duration(arg, true, &o->grace_s) || o->grace_s > CKPT_MAX_GC_GRACE_S)
			return cli_usage_err(cmd, "invalid --grace '%s': expected 0, or a number and a "
					     "unit, S M H d w m y (such as 6H), of at most 30d", arg);
		o->have_grace = true;
		return 0;
	}
	return EXIT_USAGE;
}

void ck_gc_finish(struct ck_gc_opts *o)
{
	o->pol.struct_size = sizeof o->pol;
	/* --compact-below alone is the threshold of old: no share limit on top of it. */
	if (!o->have_max_unused)
		o->pol.max_unused = o->have_compact_below ? 1 : CKPT_GC_MAX_UNUSED_DEFAULT;
	if (!o->have_compact_below)
		o->pol.compact_below = 0;
}

static int on_compact(void *arg, uint64_t done, uint64_t total)
{
	struct ck_gc_opts *o = arg;
	if (!o->bar_started) {
		progress_start(&o->bar, "gc: compacting", total, o->progress);
		o->bar_started = true;
	}
	progress_update(&o->bar, done);
	return 0;
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
