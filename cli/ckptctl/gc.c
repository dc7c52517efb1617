/* ckptctl gc: removes the packs no checkpoint references and the leftovers of interrupted saves,
 * and compacts partly live packs until at most --max-unused of the pack bytes is garbage (or
 * those below a live share), through ckpt_store_gc_with() under the store's writer lock. */
#include "ckptctl.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_gc[] =
	"Usage: ckptctl gc STORE [--dry-run] [--max-unused LIMIT] [--compact-below FRACTION]\n"
	"                        [--force] [--json]\n"
	"Collect the garbage of STORE: pack files no checkpoint references, temporary files left by\n"
	"interrupted saves, and the dead records of packs that are partly live: such a pack is\n"
	"compacted (its live records are copied to a new pack, the manifests that name it are\n"
	"rewritten atomically, each once per run, then the old pack is removed) while the garbage\n"
	"left is more than LIMIT of the pack bytes, the pack with the most garbage first. A kill at\n"
	"any point leaves every checkpoint intact. Prints what was done, the bytes copied and the\n"
	"space freed. Takes the store's writer lock: fails with exit status 3 while a save, prune\n"
	"or gc runs. Refuses (exit 1, nothing removed) while a manifest is damaged, unless --force.\n"
	"\n"
	"Options:\n"
	"      --max-unused LIMIT        leave at most LIMIT of the pack bytes as garbage: a\n"
	"                                percentage such as 5% or 'unlimited' (default 10%, or\n"
	"                                unlimited when only --compact-below is given)\n"
	"  -c, --compact-below FRACTION  also compact every pack whose live share is below\n"
	"                                FRACTION, 0 to 1 (default 0; --compact-below 0 alone\n"
	"                                disables compaction)\n"
	"      --dry-run                 print what would be done, copied and freed; change nothing\n"
	"      --force                   proceed although manifests are damaged (chunks only they\n"
	"                                reference may be removed)\n"
	"      --no-progress             no progress line while compacting (it is shown only\n"
	"                                when standard error is a terminal, and not with --json)\n"
	"      --json                    print a JSON object: dry_run, compact_below, max_unused,\n"
	"                                packs_removed, packs_compacted, manifests_rewritten,\n"
	"                                leftovers_removed, bytes_freed and bytes_copied (bytes)\n"
	"  -h, --help                    show this help\n"
	"\n"
	"Exit status: 0 collected (or nothing to do); 1 failed or refused (damaged manifest);\n"
	"2 usage error; 3 busy (another process holds the lock); 4 no such store.\n"
	"\n"
	"Example:\n"
	"  ckptctl gc /mnt/nvme/ckpt --max-unused 5% --dry-run\n";

enum { OPT_JSON = 256, OPT_DRY_RUN, OPT_FORCE, OPT_NO_PROGRESS };

static const struct option gc_opts[] = {
	{"compact-below", required_argument, NULL, CK_OPT_COMPACT_BELOW},
	{"max-unused", required_argument, NULL, CK_OPT_MAX_UNUSED},
	{"dry-run", no_argument, NULL, OPT_DRY_RUN},
	{"force", no_argument, NULL, OPT_FORCE},
	{"json", no_argument, NULL, OPT_JSON},
	{"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

int cmd_gc(int argc, char **argv)
{
	const char *cmd = "gc";
	bool json = false, dry = false, force = false, no_progress = false;
	struct ck_gc_opts g = {0};
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:h", gc_opts, NULL)) != -1) {
		switch (c) {
		case CK_OPT_COMPACT_BELOW:
		case CK_OPT_MAX_UNUSED:
			if (ck_gc_option(cmd, c, optarg, &g))
				return EXIT_USAGE;
			break;
		case OPT_DRY_RUN: dry = true; break;
		case OPT_FORCE: force = true; break;
		case OPT_JSON: json = true; break;
		case OPT_NO_PROGRESS: no_progress = true; break;
		case 'h': fputs(usage_gc, stdout); return EXIT_OK;
		default: return ck_bad_option(cmd, c, argv);
		}
	}
	argc = ck_default_store(argc, &argv, optind, 1, false);
	if (argc - optind != 1)
		return cli_usage_err(cmd, argc - optind < 1 ? "expected STORE" : "too many arguments");
	const char *path = argv[optind];
	ck_gc_finish(&g);
	ck_gc_progress(&g, !json && !no_progress);

	ckpt_store *store;
	int rc = ck_open_store(cmd, path, false, NULL, &store);
	if (rc)
		return rc;
	ckpt_gc_report *rep = NULL;
	if ((rc = ck_check_damaged(cmd, store, path, force)))
		goto out;
	int r = ckpt_store_gc_with(store, &g.pol,
				   (dry ? CKPT_GC_DRY_RUN : 0) | (force ? CKPT_GC_FORCE : 0), &rep);
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
		if (!rep->packs_removed && !rep->leftovers_removed && !rep->packs_compacted)
			printf("nothing to collect\n");
		ck_report_text(rep, dry);
	}
	rc = ck_stdout_done(cmd);
out:
	ckpt_gc_report_free(rep);
	ckpt_store_close(store);
	return rc;
}
