/* ckptctl gc: removes the packs no checkpoint references and the leftovers of interrupted saves,
 * and compacts partly live packs until at most --max-unused of the pack bytes is garbage (or
 * those below a live share), through ckpt_store_gc() under the store's writer lock. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gc_args {
	struct ck_gc_opts g;
	bool json, dry, force, no_progress;
	const char *remote;
};


static const struct cli_opt gc_opts[] = {
	{CLI_OPT(CLI_CALL, "max-unused", 0, CLI_AT(struct gc_args, g), "LIMIT",
	 "leave at most LIMIT of the pack bytes as garbage: a\n"
	 "percentage such as 5% or 'unlimited' (default 10%, or\n"
	 "unlimited when only --compact-below is given)"),
	 .values = ck_max_unused_words, .call = ck_gc_option, .code = CK_OPT_MAX_UNUSED},
	{CLI_OPT(CLI_CALL, "compact-below", 'c', CLI_AT(struct gc_args, g), "FRACTION",
	 "also compact every pack whose live share is below\n"
	 "FRACTION, 0 to 1 (default 0; --compact-below 0 alone\n"
	 "disables compaction)"),
	 .values = ck_fraction_words, .call = ck_gc_option, .code = CK_OPT_COMPACT_BELOW},
	CK_GRACE_OPT(CLI_AT(struct gc_args, g)),
	{CLI_OPT(CLI_FLAG, "dry-run", 0, CLI_AT(struct gc_args, dry), NULL,
	 "print what would be done, copied and freed; change nothing")},
	{CLI_OPT(CLI_FLAG, "force", 0, CLI_AT(struct gc_args, force), NULL,
	 "proceed although manifests are damaged (chunks only they\n"
	 "reference may be removed)")},
	{CLI_OPT(CLI_FLAG, "no-progress", 0, CLI_AT(struct gc_args, no_progress), NULL,
	 "no progress line while compacting (it is shown only\n"
	 "when standard error is a terminal, and not with --json)")},
	{CLI_OPT(CLI_STRING, "remote", 'r', CLI_AT(struct gc_args, remote), "URL",
	 "collect this store's garbage on the remote URL instead\n"
	 "(packs no remote manifest references; never another store's\n"
	 "objects, nor the packs of an upload in flight)")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct gc_args, json), NULL,
	 "print a JSON object: dry_run, compact_below, max_unused,\n"
	 "packs_removed, packs_compacted, manifests_rewritten,\n"
	 "leftovers_removed, bytes_freed and bytes_copied (bytes); with\n"
	 "--remote: dry_run, remote, packs_removed, bytes_freed,\n"
	 "parts_removed, packs_spared, uploads_in_flight")},
	CLI_OPT_END,
};

static int cmd_gc(int argc, char **argv);

const struct cli_cmd ck_cmd_gc = {
	.name = "gc", .fn = cmd_gc, .help = "remove unreferenced packs and leftovers; compact packs",
	.args = "STORE", .opts = gc_opts,
	.desc = "Collect the garbage of STORE: pack files no checkpoint references, temporary files left by\n"
		"interrupted saves, and the dead records of packs that are partly live: such a pack is\n"
		"compacted (its live records are copied to a new pack, the manifests that name it are\n"
		"rewritten atomically, each once per run, then the old pack is removed) while the garbage\n"
		"left is more than LIMIT of the pack bytes, the pack with the most garbage first. A kill at\n"
		"any point leaves every checkpoint intact. Prints what was done, the bytes copied and the\n"
		"space freed, and, when the limit leaves garbage, what --max-unused 0% would free. Takes the store's writer lock: fails with exit status 3 while a save, prune\n"
		"or gc runs. Refuses (exit 1, nothing removed) while a manifest is damaged, unless --force.\n"
		"With --remote, the store's objects on the remote are collected instead (the local store\n"
		"is opened read-only; --max-unused and --compact-below do not apply).\n",
	.tail = "\n"
		"Exit status: 0 collected (or nothing to do); 1 failed or refused (damaged manifest);\n"
		"2 usage error; 3 busy (another process holds the lock); 4 no such store.\n"
		"\n"
		"Example:\n"
		"  ckptctl gc /mnt/nvme/ckpt --max-unused 5% --dry-run\n",
};

/* The limit as the option would be written: "10%", "unlimited". */
static const char *limit_text(double max_unused, char *buf, size_t len)
{
	if (max_unused >= 1)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%g%%", max_unused * 100);
	return buf;
}

/* After a gc under a limit that let garbage stay: how much there is, the limit that kept it
 * (the 10% default is easy to miss: du counts that garbage as reclaimable) and what
 * --max-unused 0% would free, from a dry run with it. Prints nothing when that frees nothing. */
static void gc_hint(ckpt_store *store, const struct ck_gc_opts *g, const ckpt_report *rep,
		    bool dry, bool nothing)
{
	ckpt_gc_policy zero = {.struct_size = sizeof zero, .compact_below = g->pol.compact_below,
			       .max_unused = 0};
	ckpt_report *z = NULL;
	/* Packs deferred for open readers: a dry run counts them freed, so its figure would promise
	 * what no gc can do yet. */
	if (g->pol.max_unused <= 0 || rep->packs_deferred ||
	    ckpt_store_gc(store, &zero, CKPT_GC_DRY_RUN, &z) < 0 || !z || z->packs_deferred) {
		if (nothing)
			printf("nothing to collect\n");
		ckpt_report_free(z);
		return;
	}
	/* A dry run's own report counts what the limit frees already; a real one has freed it. */
	bool sub = dry && z->bytes_freed >= rep->bytes_freed && z->bytes_copied >= rep->bytes_copied;
	uint64_t more = z->bytes_freed - (sub ? rep->bytes_freed : 0);
	uint64_t copy = z->bytes_copied - (sub ? rep->bytes_copied : 0);
	char lim[64], a[32], b[32];
	limit_text(g->pol.max_unused, lim, sizeof lim);
	if (!g->have_max_unused)
		strcat(lim, g->have_compact_below ? " (the default with --compact-below)"
						  : " (the default)");
	if (more && nothing)
		printf("nothing to collect within --max-unused %s: --max-unused 0%% would free %s "
		       "(copying %s of live records)\n", lim, cli_fmt_iec(more, a, sizeof a),
		       cli_fmt_iec(copy, b, sizeof b));
	else if (more)
		printf("%s garbage within --max-unused %s: --max-unused 0%% would free %s more "
		       "(copying %s more)\n", dry ? "would leave" : "left", lim,
		       cli_fmt_iec(more, a, sizeof a), cli_fmt_iec(copy, b, sizeof b));
	else if (nothing)
		printf("nothing to collect\n");
	ckpt_report_free(z);
}

static int cmd_gc(int argc, char **argv)
{
	const char *cmd = "gc";
	struct gc_args opt = {0};
	ckpt_store *store;
	int rc = ck_parse(&ck_cmd_gc, &opt, &argc, &argv, &ck_pos_store);
	if (rc >= 0)
		return rc;
	if (opt.remote)
		return opt.g.have_max_unused || opt.g.have_compact_below
		       ? cli_usage_err(cmd, "--max-unused and --compact-below do not apply with --remote")
		       : ck_remote_gc(cmd, argv[1], opt.remote, NULL,
				      (opt.dry ? CKPT_GC_DRY_RUN : 0) | (opt.force ? CKPT_GC_FORCE : 0),
				      opt.json, opt.g.have_grace ? opt.g.grace_s : -1);
	if ((rc = ck_open_for_gc(cmd, argv[1], &opt.g, &store)))
		return rc;
	bool json = opt.json, dry = opt.dry, force = opt.force;
	struct ck_gc_opts g = opt.g;
	const char *path = argv[1];
	ck_gc_finish(&g);
	ck_gc_progress(&g, !json && !opt.no_progress);
	ckpt_report *rep = NULL;
	if ((rc = ck_check_damaged(cmd, store, path, force)))
		goto out;
	int r = ckpt_store_gc(store, &g.pol, (dry ? CKPT_GC_DRY_RUN : 0) | (force ? CKPT_GC_FORCE : 0),
			      &rep);
	ck_gc_progress_end(&g);
	if (r < 0) {
		rc = ck_fail(cmd, r, "gc failed");
		goto out;
	}
	if (json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_obj_begin(&w);
		jw_key(&w, "dry_run"); jw_bool(&w, dry);
		ck_gc_json(&w, &g);
		ck_report_json(&w, rep);
		jw_obj_end(&w);
		jw_finish(&w);
	} else {
		bool nothing = !rep->packs_removed && !rep->leftovers_removed && !rep->packs_compacted;
		bool hint = !rep->packs_spared && !rep->in_flight; /* else a later gc does more anyway */
		if (nothing && !hint)
			printf("nothing to collect\n");
		else if (nothing)
			gc_hint(store, &g, rep, dry, true);
		ck_report_text(rep, dry);
		if (!nothing && hint)
			gc_hint(store, &g, rep, dry, false);
	}
	rc = ck_stdout_done(cmd);
out:
	ckpt_report_free(rep);
	ckpt_store_close(store);
	return rc;
}
