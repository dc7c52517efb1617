/* ckptctl prune: retention. Removes the checkpoints a policy does not keep (the newest N, borg's
 * time rules, tagged ones, every K-th step, listed steps; the newest valid checkpoint always
 * stays), then the packs nothing references any more, through ckpt_store_prune() under the
 * store's writer lock. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_KEEP = 256, OPT_WITHIN, OPT_HOURLY, OPT_DAILY, OPT_WEEKLY, OPT_MONTHLY, OPT_YEARLY,
	OPT_LAST, OPT_EVERY, OPT_TAG };


struct prune_args {
	ckpt_retention r;
	struct ck_removal rm;
	bool have_policy;
	uint64_t *keep;
	size_t nkeep;
	const char **tags; /* --keep-tag, pointing into argv */
	size_t ntags;
	const char *remote;
	bool list;                 /* --list */
	ckpt_prune_choice *why;    /* with --list: each checkpoint's rule (a dry run's choices) */
	size_t nwhy;
};

/* One policy or gc option; returns 0, EXIT_USAGE (reported) or -1 when c is none of them. */
static int prune_option(const char *cmd, int c, const char *arg, void *target)
{
	struct prune_args *a = target;
	static const char *names[] = {"keep-hourly", "keep-daily", "keep-weekly", "keep-monthly",
				      "keep-yearly"};
	uint64_t *period[] = {&a->r.keep_hourly, &a->r.keep_daily, &a->r.keep_weekly,
			      &a->r.keep_monthly, &a->r.keep_yearly};
	uint64_t v;
	switch (c) {
	case OPT_LAST:
		if (cli_parse_u64(arg, &v) || v < 1)
			return cli_usage_err(cmd, "invalid --keep-last '%s': expected a number >= 1 "
					     "(the newest checkpoint is always kept)", arg);
		a->r.keep_last = v;
		a->have_policy = true;
		return 0;
	case OPT_EVERY:
		if (cli_parse_u64(arg, &v) || v < 1)
			return cli_usage_err(cmd, "invalid --keep-every '%s': expected a number >= 1", arg);
		a->r.keep_every = v;
		return 0;
	case OPT_WITHIN:
		if (ck_parse_duration(arg, false, &a->r.keep_within))
			return cli_usage_err(cmd, "invalid --keep-within '%s': expected a number >= 1 and "
					     "a unit, S M H d w m y (such as 36H or 2d)", arg);
		a->have_policy = true;
		return 0;
	case OPT_HOURLY:
	case OPT_DAILY:
	case OPT_WEEKLY:
	case OPT_MONTHLY:
	case OPT_YEARLY:
		if (cli_parse_u64(arg, &v) || v < 1)
			return cli_usage_err(cmd, "invalid --%s '%s': expected a number >= 1",
					     names[c - OPT_HOURLY], arg);
		*period[c - OPT_HOURLY] = v;
		a->have_policy = true;
		return 0;
	case OPT_TAG:
		return ck_tag_option(cmd, "--keep-tag", arg, &a->tags, &a->ntags);
	case OPT_KEEP: {
		if (cli_parse_u64(arg, &v) || v == CKPT_STEP_LATEST)
			return cli_usage_err(cmd, "invalid --keep '%s': expected a step number", arg);
		uint64_t *nk = realloc(a->keep, (a->nkeep + 1) * sizeof *a->keep);
		if (!nk) {
			cli_err("%s: out of memory", cmd);
			return EXIT_FAIL;
		}
		a->keep = nk;
		a->keep[a->nkeep++] = v;
		return 0;
	}
	}
	return EXIT_USAGE;
}

static const char *const within_words[] = {"12H", "1d", "2d", "1w", "1m", NULL};

/* A rule: prune_option() parses it into the whole struct prune_args. */
#define PRUNE_RULE(lname, s, code_, val, text) \
	{CLI_OPT(CLI_CALL, lname, s, 0, val, text), .call = prune_option, .code = code_}
static const struct cli_opt prune_opts[] = {
	{.kind = CLI_GROUP, .help = "Policy (at least one of the first seven):"},
	PRUNE_RULE("keep-last", 'n', OPT_LAST, "N", "keep the newest N valid checkpoints (N >= 1)"),
	{CLI_OPT(CLI_CALL, "keep-within", 0, 0, "DURATION",
	 "keep the checkpoints saved within DURATION of now: a number\n"
	 "and a unit, S M H d w m y (seconds, minutes, hours, days,\n"
	 "weeks, months of 31 days, years of 365 days), such as 2d"),
	 .values = within_words, .call = prune_option, .code = OPT_WITHIN},
	PRUNE_RULE("keep-hourly", 0, OPT_HOURLY, "N",
		   "keep the newest checkpoint of each of the last N hours"),
	PRUNE_RULE("keep-daily", 0, OPT_DAILY, "N",
		   "keep the newest checkpoint of each of the last N days"),
	PRUNE_RULE("keep-weekly", 0, OPT_WEEKLY, "N",
		   "keep the newest checkpoint of each of the last N ISO weeks"),
	PRUNE_RULE("keep-monthly", 0, OPT_MONTHLY, "N",
		   "keep the newest checkpoint of each of the last N months"),
	PRUNE_RULE("keep-yearly", 0, OPT_YEARLY, "N",
		   "keep the newest checkpoint of each of the last N years"),
	{CLI_OPT(CLI_CALL, "keep-tag", 0, 0, "TAG",
	 "also keep every checkpoint tagged TAG (may be repeated)"),
	 .call = prune_option, .code = OPT_TAG, .complete_fn = ck_complete_tags},
	PRUNE_RULE("keep-every", 'k', OPT_EVERY, "K",
		   "also keep every checkpoint whose step is a multiple of K"),
	PRUNE_RULE("keep", 0, OPT_KEEP, "STEP", "also keep the checkpoint of STEP (may be repeated)"),
	{.kind = CLI_GROUP, .help = "Options:"},
	{CLI_OPT(CLI_STRING, "remote", 'r', CLI_AT(struct prune_args, remote), "URL",
	 "prune this store's checkpoints on the remote URL instead (the\n"
	 "same rules), then collect its garbage there")},
	{CLI_OPT(CLI_FLAG, "list", 'l', CLI_AT(struct prune_args, list), NULL,
	 "print every checkpoint with the rule that keeps it (keep-last #1,\n"
	 "keep-daily #2, keep-tag, ...) or that it goes, as borg prune --list")},
	CK_REMOVAL_OPTS(struct prune_args,
			"proceed although manifests are damaged (they stay; chunks only\n"
			"they reference may be removed)"),
	CLI_OPT_END,
};

static int cmd_prune(int argc, char **argv);

const struct cli_cmd ck_cmd_prune = {
	.name = "prune", .fn = cmd_prune, .help = "remove checkpoints by a retention policy",
	.args = "STORE", .opts = prune_opts,
	.desc = "Remove the checkpoints of STORE that the retention policy does not keep, then the pack\n"
		"files no remaining checkpoint references. The rules, as borg prune applies them (times are\n"
		"the commit times the manifests record, periods in UTC): --keep-within keeps every\n"
		"checkpoint of the last DURATION; --keep-last the newest N others; --keep-hourly,\n"
		"--keep-daily and --keep-weekly the newest checkpoint of each of the last N hours, days and\n"
		"ISO weeks that have one not already kept (the oldest checkpoint too when fewer exist),\n"
		"then --keep-monthly and --keep-yearly the same for calendar months and years: periods\n"
		"count back from the newest checkpoint, and one without a checkpoint does not count.\n"
		"What any rule keeps stays (their union). Also kept: every checkpoint tagged with a\n"
		"--keep-tag TAG, every checkpoint whose step is a multiple of K, each STEP given with\n"
		"--keep, and always the newest valid checkpoint. Manifests are removed first (durably), packs\n"
		"after: a kill at any point leaves every remaining checkpoint intact. With --gc, the\n"
		"garbage is then collected as 'ckptctl gc' does, under the same lock. Prints each\n"
		"checkpoint removed and the space freed. Takes the store's writer lock: fails with exit\n"
		"status 3 while a save, prune or gc runs. Refuses (exit 1, nothing removed) while a\n"
		"manifest is damaged, unless --force.\n"
		"With --remote, the store's checkpoints on the remote are pruned instead, by the same\n"
		"rules on the commit times the remote manifests record, then the remote garbage is\n"
		"collected as 'ckptctl gc --remote' does (not with --dry-run); the local store is not\n"
		"touched. As locally, a damaged remote manifest refuses it all (exit 1, nothing removed,\n"
		"the damaged key named) unless --force, and is never removed.\n",
	.tail = "\n"
		"Exit status: 0 pruned (or nothing to prune); 1 failed or refused (damaged manifest);\n"
		"2 usage error; 3 busy (another process holds the lock); 4 no such store.\n"
		"\n"
		"Examples:\n"
		"  ckptctl prune /mnt/nvme/ckpt --keep-last 3 --keep-every 10000 --dry-run\n"
		"  ckptctl prune /mnt/nvme/ckpt --keep-within 1d --keep-daily 7 --keep-weekly 4 --gc\n"
		"  ckptctl prune /mnt/nvme/ckpt --keep-daily 7 --keep-monthly 12 --keep-yearly 5 \\\n"
		"      --keep-tag release\n",
};

static const struct ck_pos prune_pos = {1, 1, false, {"expected STORE"}};

/* --list: the rule that keeps step, as its option is named ("keep-daily #2"), into buf. */
static const char *rule_text(const struct prune_args *a, uint64_t step, char *buf, size_t len)
{
	static const char *const names[] = {
		[CKPT_KEEP_WITHIN] = "keep-within", [CKPT_KEEP_LAST] = "keep-last",
		[CKPT_KEEP_HOURLY] = "keep-hourly", [CKPT_KEEP_DAILY] = "keep-daily",
		[CKPT_KEEP_WEEKLY] = "keep-weekly", [CKPT_KEEP_MONTHLY] = "keep-monthly",
		[CKPT_KEEP_YEARLY] = "keep-yearly", [CKPT_KEEP_TAG] = "keep-tag",
		[CKPT_KEEP_EVERY] = "keep-every", [CKPT_KEEP_STEP] = "keep",
		[CKPT_KEEP_NEWEST] = "the newest (always kept)",
		[CKPT_KEEP_DAMAGED] = "damaged manifest (never removed)",
	};
	const ckpt_prune_choice *c = NULL;
	for (size_t i = 0; i < a->nwhy && !c; i++)
		c = a->why[i].step == step ? &a->why[i] : NULL;
	if (!c || c->rule <= CKPT_KEEP_NONE || c->rule > CKPT_KEEP_DAMAGED)
		snprintf(buf, len, "kept"); /* saved after the choice was explained */
	else if (c->rule >= CKPT_KEEP_LAST && c->rule <= CKPT_KEEP_YEARLY)
		snprintf(buf, len, c->nth ? "%s #%u" : "%s (the oldest)", names[c->rule], c->nth);
	else
		snprintf(buf, len, "%s", names[c->rule]);
	return buf;
}

static void prune_text(bool dry, const ckpt_report *rep, const ckpt_info *list, int n,
		       void *arg)
{
	const struct prune_args *a = arg;
	size_t kept = 0;
	for (int k = 0; k < n; k++) {
		char t[32], b[32], why[64];
		if (!ck_step_removed(rep, list[k].step)) {
			kept++;
			if (a->list && list[k].error) /* no commit time to show */
				printf("keeping step %llu: %s\n", (unsigned long long)list[k].step,
				       rule_text(a, list[k].step, why, sizeof why));
			else if (a->list)
				printf("keeping step %llu (saved %s): %s\n",
				       (unsigned long long)list[k].step,
				       cli_fmt_time(list[k].time, t, sizeof t),
				       rule_text(a, list[k].step, why, sizeof why));
			continue;
		}
		printf("%s step %llu (saved %s, %s new)\n", dry ? "would remove" : "removed",
		       (unsigned long long)list[k].step, cli_fmt_time(list[k].time, t, sizeof t),
		       cli_fmt_iec(list[k].new_bytes, b, sizeof b));
	}
	printf("%s %zu checkpoint%s, kept %zu:", dry ? "would remove" : "removed",
	       rep->n_steps_removed, rep->n_steps_removed == 1 ? "" : "s", kept);
	for (int k = 0; k < n; k++)
		if (!ck_step_removed(rep, list[k].step))
			printf(" %llu", (unsigned long long)list[k].step);
	printf("\n");
	ck_report_text(rep, dry);
}

/* --list: takes the choices of a dry run's report rep (each checkpoint's rule) into a. */
static void take_choices(struct prune_args *a, ckpt_report *rep)
{
	free(a->why);
	a->why = rep->choices;
	a->nwhy = rep->n_choices;
	rep->choices = NULL;
	rep->n_choices = 0;
}

static int prune_steps(const char *cmd, ckpt_store *store, const ckpt_gc_policy *pol, int flags,
		       void *arg, ckpt_report **rep)
{
	struct prune_args *a = arg;
	/* A dry run's report says which rule keeps each checkpoint: --list of a real prune asks
	 * one first, of the store as it is before anything goes. */
	if (a->list && !(flags & CKPT_GC_DRY_RUN)) {
		ckpt_report *dry = NULL;
		int r = ckpt_store_prune(store, &a->r, NULL, flags | CKPT_GC_DRY_RUN, &dry);
		if (r < 0)
			return ck_fail(cmd, r, "prune failed");
		take_choices(a, dry);
		ckpt_report_free(dry);
	}
	int r = ckpt_store_prune(store, &a->r, pol, flags, rep);
	if (r < 0)
		return ck_fail(cmd, r, "prune failed");
	if (a->list && (flags & CKPT_GC_DRY_RUN) && *rep)
		take_choices(a, *rep);
	return 0;
}

static const struct ck_removal_ops prune_ops = {.remove = prune_steps, .print_text = prune_text};

static int cmd_prune(int argc, char **argv)
{
	const char *cmd = "prune";
	struct prune_args a = {0};
	int rc = ck_parse(&ck_cmd_prune, &a, &argc, &argv, &prune_pos);
	if (rc >= 0)
		; /* a usage error, or --help */
	else if (!a.have_policy)
		rc = cli_usage_err(cmd, "a retention policy is required: --keep-last N, --keep-within "
				   "DURATION, --keep-hourly, --keep-daily, --keep-weekly, "
				   "--keep-monthly or --keep-yearly N");
	else {
		a.r.struct_size = sizeof a.r;
		a.r.keep_steps = a.keep;
		a.r.n_keep_steps = a.nkeep;
		a.r.keep_tags = a.tags;
		a.r.n_keep_tags = a.ntags;
		if (a.remote && a.list)
			rc = cli_usage_err(cmd, "--list does not apply with --remote");
		else if (a.remote)
			rc = ck_remote_gc(cmd, argv[1], a.remote, &a.r, (a.rm.dry ? CKPT_GC_DRY_RUN : 0) |
					  (a.rm.force ? CKPT_GC_FORCE : 0), a.rm.json,
					  a.rm.g.have_grace ? a.rm.g.grace_s : -1);
		else if (a.list && a.rm.json)
			rc = cli_usage_err(cmd, "--list is for the text answer; --json has removed "
					   "and kept");
		else if ((rc = ck_removal_check(cmd, &a.rm)) < 0)
			rc = ck_removal_run(cmd, argv[1], &a.rm, &prune_ops, &a);
	}
	free(a.keep);
	free(a.tags);
	free(a.why);
	return rc;
}
