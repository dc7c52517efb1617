/* ckptctl gc: removes the packs no checkpoint references and the leftovers of interrupted saves,
 * and compacts packs whose live share is below a threshold, through ckpt_store_gc() under the
 * store's writer lock. */
#include "ckptctl.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_gc[] =
	"Usage: ckptctl gc STORE [--dry-run] [--compact-below FRACTION] [--force] [--json]\n"
	"Collect the garbage of STORE: pack files no checkpoint references, temporary files left by\n"
	"interrupted saves, and packs whose live share (bytes some checkpoint references) is below\n"
	"FRACTION: their live records are copied to a new pack, the manifests that name them are\n"
	"rewritten atomically, then the old pack is removed. A kill at any point leaves every\n"
	"checkpoint intact. Prints what was done and the space freed. Takes the store's writer\n"
	"lock: fails with exit status 3 while a save, prune or gc runs. Refuses (exit 1, nothing\n"
	"removed) while a manifest is damaged, unless --force.\n"
	"\n"
	"Options:\n"
	"  -c, --compact-below FRACTION  compact packs whose live share is below FRACTION, 0 to 1\n"
	"                                (default 0.5; 0 disables compaction)\n"
	"      --dry-run                 print what would be done and freed; change nothing\n"
	"      --force                   proceed although manifests are damaged (chunks only they\n"
	"                                reference may be removed)\n"
	"      --json                    print a JSON object: dry_run, compact_below,\n"
	"                                packs_removed, packs_compacted, manifests_rewritten,\n"
	"                                leftovers_removed, bytes_freed and bytes_copied (bytes)\n"
	"  -h, --help                    show this help\n"
	"\n"
	"Exit status: 0 collected (or nothing to do); 1 failed or refused (damaged manifest);\n"
	"2 usage error; 3 busy (another process holds the lock); 4 no such store.\n"
	"\n"
	"Example:\n"
	"  ckptctl gc /mnt/nvme/ckpt --compact-below 0.3 --dry-run\n";

enum { OPT_JSON = 256, OPT_DRY_RUN, OPT_FORCE };

static const struct option gc_opts[] = {
	{"compact-below", required_argument, NULL, 'c'},
	{"dry-run", no_argument, NULL, OPT_DRY_RUN},
	{"force", no_argument, NULL, OPT_FORCE},
	{"json", no_argument, NULL, OPT_JSON},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int parse_fraction(const char *s, double *out)
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

int cmd_gc(int argc, char **argv)
{
	const char *cmd = "gc";
	bool json = false, dry = false, force = false;
	double below = 0.5;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:h", gc_opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (parse_fraction(optarg, &below))
				return cli_usage_err(cmd, "invalid --compact-below '%s': expected a "
						     "fraction from 0 to 1", optarg);
			break;
		case OPT_DRY_RUN: dry = true; break;
		case OPT_FORCE: force = true; break;
		case OPT_JSON: json = true; break;
		case 'h': fputs(usage_gc, stdout); return EXIT_OK;
		default: return ck_bad_option(cmd, c, argv);
		}
	}
	if (argc - optind != 1)
		return cli_usage_err(cmd, argc - optind < 1 ? "expected STORE" : "too many arguments");
	const char *path = argv[optind];

	ckpt_store *store;
	int rc = ck_open_store(cmd, path, false, NULL, &store);
	if (rc)
		return rc;
	ckpt_gc_report *rep = NULL;
	if ((rc = ck_check_damaged(cmd, store, path, force)))
		goto out;
	int r = ckpt_store_gc(store, below, (dry ? CKPT_GC_DRY_RUN : 0) | (force ? CKPT_GC_FORCE : 0),
			      &rep);
	if (r < 0) {
		rc = ck_fail(cmd, r, "gc failed");
		goto out;
	}
	if (json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_obj_begin(&w);
		jw_key(&w, "dry_run"); jw_bool(&w, dry);
		jw_key(&w, "compact_below"); jw_dbl(&w, below);
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
