/* ckptctl prune: retention. Removes the checkpoints a policy does not keep (the newest N, every
 * K-th step, listed steps; the newest valid checkpoint always stays), then the packs nothing
 * references any more, through ckpt_store_prune() under the store's writer lock. */
#include "ckptctl.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_prune[] =
	"Usage: ckptctl prune STORE --keep-last N [--keep-every K] [--keep STEP]... [OPTIONS]\n"
	"Remove the checkpoints of STORE that the retention policy does not keep, then the pack\n"
	"files no remaining checkpoint references. Kept: the newest N valid checkpoints, every\n"
	"checkpoint whose step is a multiple of K, and each STEP given with --keep. The newest\n"
	"valid checkpoint is never removed. Manifests are removed first (durably), packs after: a\n"
	"kill at any point leaves every remaining checkpoint intact. Prints each checkpoint\n"
	"removed and the space freed. Takes the store's writer lock: fails with exit status 3 while\n"
	"a save, prune or gc runs. Refuses (exit 1, nothing removed) while a manifest is damaged,\n"
	"unless --force.\n"
	"\n"
	"Options:\n"
	"  -n, --keep-last N    keep the newest N valid checkpoints (N >= 1; required)\n"
	"  -k, --keep-every K   also keep every checkpoint whose step is a multiple of K\n"
	"      --keep STEP      also keep the checkpoint of STEP (may be repeated)\n"
	"      --dry-run        print what would be removed and freed; change nothing\n"
	"      --force          proceed although manifests are damaged (they stay; chunks only\n"
	"                       they reference may be removed)\n"
	"      --json           print a JSON object: dry_run, removed (steps), kept (steps),\n"
	"                       packs_removed, packs_compacted, manifests_rewritten,\n"
	"                       leftovers_removed, bytes_freed and bytes_copied (bytes)\n"
	"  -h, --help           show this help\n"
	"\n"
	"Exit status: 0 pruned (or nothing to prune); 1 failed or refused (damaged manifest);\n"
	"2 usage error; 3 busy (another process holds the lock); 4 no such store.\n"
	"\n"
	"Example:\n"
	"  ckptctl prune /mnt/nvme/ckpt --keep-last 3 --keep-every 10000 --dry-run\n";

enum { OPT_JSON = 256, OPT_KEEP, OPT_DRY_RUN, OPT_FORCE };

static const struct option prune_opts[] = {
	{"keep-last", required_argument, NULL, 'n'},
	{"keep-every", required_argument, NULL, 'k'},
	{"keep", required_argument, NULL, OPT_KEEP},
	{"dry-run", no_argument, NULL, OPT_DRY_RUN},
	{"force", no_argument, NULL, OPT_FORCE},
	{"json", no_argument, NULL, OPT_JSON},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static bool removed(const ckpt_gc_report *r, uint64_t step)
{
	for (size_t k = 0; k < r->n_steps_removed; k++)
		if (r->steps_removed[k] == step)
			return true;
	return false;
}

static int run_prune(const char *cmd, const char *path, const ckpt_prune_policy *pol, bool dry,
		     bool force, bool json)
{
	ckpt_store *store;
	int rc = ck_open_store(cmd, path, false, NULL, &store);
	if (rc)
		return rc;
	ckpt_info *list = NULL;
	ckpt_gc_report *rep = NULL;
	int n = ckpt_store_list(store, 0, &list);
	if (n < 0) {
		rc = ck_fail(cmd, n, "cannot list the store");
		goto out;
	}
	if ((rc = ck_check_damaged(cmd, store, path, force)))
		goto out;
	int r = ckpt_store_prune(store, pol, (dry ? CKPT_GC_DRY_RUN : 0) | (force ? CKPT_GC_FORCE : 0),
				 &rep);
	if (r < 0) {
		rc = ck_fail(cmd, r, "prune failed");
		goto out;
	}
	if (json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_obj_begin(&w);
		jw_key(&w, "dry_run"); jw_bool(&w, dry);
		jw_key(&w, "removed");
		jw_arr_begin(&w);
		for (size_t k = 0; k < rep->n_steps_removed; k++)
			jw_u64(&w, rep->steps_removed[k]);
		jw_arr_end(&w);
		jw_key(&w, "kept");
		jw_arr_begin(&w);
		for (int k = 0; k < n; k++)
			if (!removed(rep, list[k].step))
				jw_u64(&w, list[k].step);
		jw_arr_end(&w);
		ck_report_json(&w, rep);
		jw_obj_end(&w);
		jw_finish(&w);
	} else {
		size_t kept = 0;
		for (int k = 0; k < n; k++) {
			char t[32], a[32];
			if (!removed(rep, list[k].step)) {
				kept++;
				continue;
			}
			printf("%s step %llu (saved %s, %s new)\n",
			       dry ? "would remove" : "removed", (unsigned long long)list[k].step,
			       cli_fmt_time(list[k].time, t, sizeof t),
			       cli_fmt_iec(list[k].new_bytes, a, sizeof a));
		}
		printf("%s %zu checkpoint%s, kept %zu:", dry ? "would remove" : "removed",
		       rep->n_steps_removed, rep->n_steps_removed == 1 ? "" : "s", kept);
		for (int k = 0; k < n; k++)
			if (!removed(rep, list[k].step))
				printf(" %llu", (unsigned long long)list[k].step);
		printf("\n");
		ck_report_text(rep, dry);
	}
	rc = ck_stdout_done(cmd);
out:
	ckpt_gc_report_free(rep);
	ckpt_info_free(list);
	ckpt_store_close(store);
	return rc;
}

int cmd_prune(int argc, char **argv)
{
	const char *cmd = "prune";
	bool json = false, dry = false, force = false, have_last = false;
	ckpt_prune_policy pol = {0};
	uint64_t *keep = NULL;
	size_t nkeep = 0;
	int c, rc;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":n:k:h", prune_opts, NULL)) != -1) {
		uint64_t v;
		switch (c) {
		case 'n':
			if (cli_parse_u64(optarg, &v) || v < 1) {
				free(keep);
				return cli_usage_err(cmd, "invalid --keep-last '%s': expected a number >= 1 "
						     "(the newest checkpoint is always kept)", optarg);
			}
			pol.keep_last = v;
			have_last = true;
			break;
		case 'k':
			if (cli_parse_u64(optarg, &v) || v < 1) {
				free(keep);
				return cli_usage_err(cmd, "invalid --keep-every '%s': expected a number >= 1",
						     optarg);
			}
			pol.keep_every = v;
			break;
		case OPT_KEEP: {
			if (cli_parse_u64(optarg, &v) || v == CKPT_STEP_LATEST) {
				free(keep);
				return cli_usage_err(cmd, "invalid --keep '%s': expected a step number",
						     optarg);
			}
			uint64_t *nk = realloc(keep, (nkeep + 1) * sizeof *keep);
			if (!nk) {
				free(keep);
				cli_err("%s: out of memory", cmd);
				return EXIT_FAIL;
			}
			keep = nk;
			keep[nkeep++] = v;
			break;
		}
		case OPT_DRY_RUN: dry = true; break;
		case OPT_FORCE: force = true; break;
		case OPT_JSON: json = true; break;
		case 'h': free(keep); fputs(usage_prune, stdout); return EXIT_OK;
		default: free(keep); return ck_bad_option(cmd, c, argv);
		}
	}
	if (argc - optind != 1)
		rc = cli_usage_err(cmd, argc - optind < 1 ? "expected STORE" : "too many arguments");
	else if (!have_last)
		rc = cli_usage_err(cmd, "--keep-last N is required");
	else {
		pol.keep_steps = keep;
		pol.n_keep_steps = nkeep;
		rc = run_prune(cmd, argv[optind], &pol, dry, force, json);
	}
	free(keep);
	return rc;
}
