/* ckptctl delete: removes the checkpoints of the steps given (restic forget ID, borg delete), then
 * the packs nothing references any more, through ckpt_store_delete() under the store's writer
 * lock. The newest valid checkpoint stays unless --force. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct delete_args {
	struct ck_removal rm;
	uint64_t *steps;
	size_t n;
};


static const struct cli_opt delete_opts[] = {
	CK_REMOVAL_OPTS(struct delete_args,
			"also remove the newest valid checkpoint, and proceed although\n"
			"manifests are damaged (a damaged one may be deleted by its step)"),
	CLI_OPT_END,
};

static int cmd_delete(int argc, char **argv);

const struct cli_cmd ck_cmd_delete = {
	.name = "delete", .fn = cmd_delete, .help = "remove the checkpoints of given steps",
	.args = "STORE STEP...", .opts = delete_opts,
	.desc = "Remove the checkpoints of the STEPs given from STORE, then the pack files no remaining\n"
		"checkpoint references. STEP may be 'latest'. Refuses, removing nothing, when a STEP has no\n"
		"checkpoint (exit 4; the message lists the steps that exist) and when it would remove the\n"
		"newest valid checkpoint, unless --force. Manifests are removed first (durably), packs\n"
		"after: a kill at any point leaves every remaining checkpoint intact. With --gc, the\n"
		"garbage is then collected as 'ckptctl gc' does, under the same lock. Takes the store's\n"
		"writer lock: fails with exit status 3 while a save, prune or gc runs. Refuses (exit 1,\n"
		"nothing removed) while a manifest is damaged, unless --force.\n",
	.tail = "\n"
		"Exit status: 0 deleted; 1 failed or refused (the newest checkpoint, a damaged manifest);\n"
		"2 usage error; 3 busy (another process holds the lock); 4 no such store or step.\n"
		"\n"
		"Example:\n"
		"  ckptctl delete /mnt/nvme/ckpt 1500 2500 --dry-run\n",
};

static const struct ck_pos delete_pos = {2, -1, true, {"expected STORE and STEP...",
						       "expected at least one STEP"}};


/* 'latest' becomes the newest valid step (list is ascending). Returns 0 or an exit status. */
static int resolve_latest(const char *cmd, const char *path, const ckpt_info *list, int n,
			  void *arg)
{
	struct delete_args *a = arg;
	for (size_t q = 0; q < a->n; q++) {
		if (a->steps[q] != CKPT_STEP_LATEST)
			continue;
		if (n <= 0) {
			cli_err("%s: store %s has no checkpoint", cmd, path);
			return EXIT_NOTFOUND;
		}
		a->steps[q] = list[n - 1].step;
	}
	return 0;
}

static int delete_steps(const char *cmd, ckpt_store *store, const ckpt_gc_policy *pol, int flags,
			void *arg, ckpt_report **rep)
{
	const struct delete_args *a = arg;
	/* --force lets the newest valid checkpoint go too. */
	int r = ckpt_store_delete(store, a->steps, a->n, pol,
				  flags | (a->rm.force ? CKPT_GC_NEWEST : 0), rep);
	if (r == -CKPT_E_INVAL) {
		/* The newest valid checkpoint: say how to override it. */
		cli_err("%s: %s; nothing was removed (--force deletes it)", cmd, ckpt_errmsg());
		return EXIT_FAIL;
	}
	return r < 0 ? ck_fail(cmd, r, "delete failed") : 0;
}

static void delete_text(bool dry, const ckpt_report *rep, const ckpt_info *list, int n,
			void *arg)
{
	for (size_t k = 0; k < rep->n_steps_removed; k++)
		printf("%s step %llu\n", dry ? "would remove" : "removed",
		       (unsigned long long)rep->steps_removed[k]);
	ck_report_text(rep, dry);
}

static const struct ck_removal_ops delete_ops = {
	.prepare = resolve_latest, .remove = delete_steps, .print_text = delete_text,
};

static int cmd_delete(int argc, char **argv)
{
	const char *cmd = "delete";
	struct delete_args a = {0};
	int rc = ck_parse(&ck_cmd_delete, &a, &argc, &argv, &delete_pos);
	if (rc >= 0 || (rc = ck_removal_check(cmd, &a.rm)) >= 0)
		return rc;
	rc = 0;
	a.n = (size_t)(argc - 2);
	if (!(a.steps = calloc(a.n, sizeof *a.steps))) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	for (size_t q = 0; !rc && q < a.n; q++)
		rc = ck_parse_step(cmd, argv[2 + q], &a.steps[q]);
	if (!rc)
		rc = ck_removal_run(cmd, argv[1], &a.rm, &delete_ops, &a);
	free(a.steps);
	return rc;
}
