/* ckptctl list: the checkpoints of a store, as a table or as JSON. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct list_args {
	bool json;
	const char *remote;
	const char **tags; /* --tag, pointing into argv */
	size_t ntags;
};

static int list_tag(const char *cmd, int code, const char *arg, void *target)
{
	(void)code;
	struct list_args *a = target;
	return ck_tag_option(cmd, "--tag", arg, &a->tags, &a->ntags);
}

static const struct cli_opt list_opts[] = {
	{CLI_OPT(CLI_CALL, "tag", 't', 0, "TAG",
	 "only the checkpoints tagged TAG (repeated: those with any of them)"),
	 .call = list_tag, .complete_fn = ck_complete_tags},
	{CLI_OPT(CLI_STRING, "remote", 'r', CLI_AT(struct list_args, remote), "URL",
	 "also the checkpoints on the remote URL (file:///DIR, /DIR,\n"
	 "s3://BUCKET/PREFIX; or $CKPT_REMOTE), with an UPLOAD column: local\n"
	 "(not on the remote), remote (on both) or remote-only")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct list_args, json), NULL,
	 "print a JSON array of objects with step, time (unix seconds), tensors,\n"
	 "logical_bytes, bytes_new, stored_bytes (REFERENCED), chunks, chunks_new\n"
	 "and tags (an array of strings); with a remote, upload (as the\n"
	 "UPLOAD column) and store_id; lightning_file and lightning_step for a\n"
	 "Lightning checkpoint (new_bytes and new_chunks: older names,\n"
	 "printed too until the next version)")},
	CLI_OPT_END,
};

static int cmd_list(int argc, char **argv);

const struct cli_cmd ck_cmd_list = {
	.name = "list", .fn = cmd_list, .help = "list the checkpoints of a store",
	.args = "[STORE]", .opts = list_opts,
	.desc = "List the checkpoints of STORE in ascending step order: step, commit time (UTC), number of\n"
		"tensors, logical size (sum of tensor sizes), the bytes each checkpoint added to the store\n"
		"when it was saved (NEW) and the on-disk bytes of every chunk it references (REFERENCED:\n"
		"shared chunks count in every checkpoint that uses them, so checkpoints that share most\n"
		"of their data show about the same figure). A last line gives the number of checkpoints\n"
		"and what the store's packs take on disk, all checkpoints together ('ckptctl du' says what\n"
		"each one alone holds). Sizes are in IEC units (KiB, MiB, GiB). A damaged manifest is\n"
		"reported on standard error and not listed. The store is opened read-only: listing works\n"
		"while a save runs. When the store holds a multi-rank checkpoint, a RANKS column gives\n"
		"each one's world size; when a checkpoint has tags, a TAGS column lists them; when one\n"
		"was saved by Lightning's LibckptCheckpointIO, a LIGHTNING column gives its file name\n"
		"and global step (the .ckpt pointer it backs).\n"
		"With --remote (or $CKPT_REMOTE set), the checkpoints of this store on the remote are\n"
		"listed too, and an UPLOAD column says where each one is: local, remote (both), or\n"
		"remote-only (lost locally: 'ckptctl pull' brings it back).\n"
		"With a remote and no STORE (or a STORE that holds no store: a replacement node), the\n"
		"stores on the remote are listed instead: store id, host and path of the store that\n"
		"pushed last, newest step, number of checkpoints and bytes; with --json an array of\n"
		"objects with store_id, host, path, newest_step, checkpoints and bytes.\n",
	.tail = "\n"
		"Exit status: 0 listed (even with damaged manifests); 1 failed; 2 usage error; 4 no such\n"
		"store.\n"
		"\n"
		"Examples:\n"
		"  ckptctl list /mnt/nvme/ckpt\n"
		"  ckptctl list /mnt/nvme/ckpt --tag release --tag best\n"
		"  ckptctl list --remote s3://bucket/ckpt\n",
};

/* The Lightning checkpoint a store checkpoint is (libckpt.lightning records its file name and
 * global step), so that a user pruning the store sees which .ckpt pointer each one backs. */
struct lt {
	char *file, *step;
};

static char *meta_dup(ckpt_reader *rd, const char *key)
{
	const char *v = ckpt_reader_get_meta(rd, key);
	return v ? strdup(v) : NULL;
}

/* Every row's Lightning file and step, or NULL when no row has them. */
static struct lt *lightning_of(ckpt_store *store, const ckpt_info *list, int n)
{
	struct lt *v = calloc((size_t)n + 1, sizeof *v);
	bool any = false;
	for (int k = 0; v && k < n; k++) {
		ckpt_reader *rd;
		if (list[k].error || ckpt_reader_open(store, list[k].step, CKPT_READ_AS_SAVED, &rd))
			continue;
		v[k].file = meta_dup(rd, "lightning.file");
		v[k].step = meta_dup(rd, "lightning.global_step");
		any |= v[k].file != NULL;
		ckpt_reader_close(rd);
	}
	if (v && !any) {
		free(v);
		v = NULL;
	}
	return v;
}

static void lightning_free(struct lt *v, int n)
{
	for (int k = 0; v && k < n; k++)
		free(v[k].file), free(v[k].step);
	free(v);
}

/* Where each listed checkpoint is, with a remote (the UPLOAD column). */
enum where { W_LOCAL, W_REMOTE, W_REMOTE_ONLY };
static const char *const where_names[] = {"local", "remote", "remote-only"};

static void list_json(ckpt_store *store, const ckpt_info *list, int n, const bool *shown,
		      const unsigned *worlds, const enum where *where, const struct lt *lt)
{
	char id[33];
	ckpt_store_id(store, id);
	struct jw w;
	jw_init(&w, stdout, true);
	jw_arr_begin(&w);
	for (int k = 0; k < n; k++) {
		const ckpt_info *i = &list[k];
		if (!shown[k])
			continue;
		jw_obj_begin(&w);
		ck_info_json(&w, i);
		ck_dist_list_json(&w, worlds, k);
		if (lt && lt[k].file) {
			jw_key(&w, "lightning_file"); jw_str(&w, lt[k].file);
			jw_key(&w, "lightning_step");
			if (lt[k].step)
				jw_u64(&w, strtoull(lt[k].step, NULL, 10));
			else
				jw_null(&w);
		}
		if (where) {
			jw_key(&w, "upload"); jw_str(&w, where_names[where[k]]);
			jw_key(&w, "store_id"); jw_str(&w, id);
		}
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	jw_finish(&w);
}

/* The table, then the line of the whole store: how many checkpoints (shown of all, with --tag)
 * and the size of its packs. */
static void list_text(ckpt_store *store, const ckpt_info *list, int n, const bool *shown,
		      const unsigned *worlds, const enum where *where, const struct lt *lt,
		      bool filtered)
{
	bool tags = false;
	size_t nshown = 0, nvalid = 0;
	for (int k = 0; k < n; k++) {
		tags |= shown[k] && *list[k].tags;
		nshown += shown[k];
		nvalid += !list[k].error;
	}
	printf("%12s  %-19s  %8s  %12s  %12s  %12s", "STEP", "TIME (UTC)", "TENSORS", "LOGICAL",
	       "NEW", "REFERENCED");
	if (where)
		printf("  %-11s", "UPLOAD");
	ck_dist_list_col(worlds, -1);
	printf("%s%s\n", tags ? "  TAGS" : "", lt ? "  LIGHTNING" : "");
	for (int k = 0; k < n; k++) {
		const ckpt_info *i = &list[k];
		char t[32], a[32], b[32], d[32];
		if (!shown[k])
			continue;
		printf("%12llu  %-19s  %8llu  %12s  %12s  %12s", (unsigned long long)i->step,
		       cli_fmt_time(i->time, t, sizeof t), (unsigned long long)i->tensors,
		       cli_fmt_iec(i->logical_bytes, a, sizeof a), cli_fmt_iec(i->new_bytes, b, sizeof b),
		       cli_fmt_iec(i->stored_bytes, d, sizeof d));
		if (where)
			printf("  %-11s", where_names[where[k]]);
		ck_dist_list_col(worlds, k);
		if (tags)
			printf("  %s", *i->tags ? i->tags : "-");
		if (lt && lt[k].file)
			printf("  %s (step %s)", lt[k].file, lt[k].step ? lt[k].step : "?");
		else if (lt)
			printf("  -");
		putchar('\n');
	}
	if (filtered)
		printf("%zu of %zu checkpoint%s", nshown, nvalid, nvalid == 1 ? "" : "s");
	else
		printf("%zu checkpoint%s", nvalid, nvalid == 1 ? "" : "s");
	ckpt_du *du = NULL;
	char p[32];
	if (!ckpt_store_du(store, &du))
		printf(", %s in packs on disk for all of them", cli_fmt_iec(du->pack_bytes, p, sizeof p));
	putchar('\n');
	ckpt_du_free(du);
}

/* The damaged manifests of the remote's list (v, n entries) are reported as local ones are, and
 * left out (compacting v). Returns the count left. */
static int drop_damaged(ckpt_store *store, ckpt_remote **rm, ckpt_info *v, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		char why[1024];
		if (!v[i].error)
			v[k++] = v[i];
		else
			cli_err("warning: step %llu: %s", (unsigned long long)v[i].step,
				ck_remote_invalid_reason(store, rm, &v[i], why, sizeof why));
	}
	return k;
}

/* With a remote: the local list (*list, n) and the remote's, merged by step into *out (entries
 * copied; their strings stay in the two lists), *where saying where each is. Returns the count,
 * or the exit status as a negative number (reported). */
static int merge_remote(const char *cmd, ckpt_store *store, const char *url, const ckpt_info *list,
			int n, ckpt_info **rlist, ckpt_info **out, enum where **where)
{
	ckpt_remote *rm;
	int rc = ck_set_remote(cmd, store, url, 0, &rm);
	if (rc)
		return -rc;
	int m = (int)ckpt_remote_list(rm, 1, rlist);
	if (m < 0)
		return -ck_fail(cmd, m, "cannot list the remote");
	m = drop_damaged(store, &rm, *rlist, m);
	*out = calloc((size_t)(n + m) + 1, sizeof **out);
	*where = calloc((size_t)(n + m) + 1, sizeof **where);
	if (!*out || !*where) {
		cli_err("%s: out of memory", cmd);
		return -EXIT_FAIL;
	}
	int k = 0, i = 0, j = 0;
	while (i < n || j < m) {
		const ckpt_info *r = j < m ? &(*rlist)[j] : NULL;
		if (i < n && (!r || list[i].step <= r->step)) {
			bool both = r && r->step == list[i].step && !list[i].error;
			(*where)[k] = both ? W_REMOTE : W_LOCAL;
			(*out)[k++] = list[i++];
			j += both;
		} else {
			(*where)[k] = W_REMOTE_ONLY;
			(*out)[k++] = (*rlist)[j++];
		}
	}
	return k;
}

static int cmd_list(int argc, char **argv)
{
	const char *cmd = "list";
	struct list_args opt = {0};
	ckpt_store *store;
	static const struct ck_pos pos = {0, 1, false, {"expected STORE"}};
	int rc = ck_parse(&ck_cmd_list, &opt, &argc, &argv, &pos);
	if (rc < 0) /* CKPT_STORE when STORE is left out; no store at all: the remote's stores */
		argc = ck_default_store(argc, &argv, 1, 1, false), rc = ck_list_stores_instead(cmd, argc > 1 ? argv[1] : NULL, opt.remote, opt.json);
	if (rc < 0 && !(rc = ck_open_store(cmd, argv[1], true, NULL, &store)))
		rc = -1;
	if (rc >= 0) {
		free(opt.tags);
		return rc;
	}
	rc = 0;
	ckpt_info *list = NULL, *rlist = NULL, *merged = NULL, *rows;
	enum where *where = NULL;
	unsigned *worlds = NULL;
	struct lt *lt = NULL;
	int n = (int)ckpt_store_list(store, 1, &list);
	bool *shown = NULL;
	if (n < 0) {
		rc = ck_fail(cmd, n, "cannot list the store");
		goto out;
	}
	rows = list;
	if (opt.remote || getenv("CKPT_REMOTE")) {
		int k = merge_remote(cmd, store, opt.remote, list, n, &rlist, &merged, &where);
		if (k < 0) {
			rc = -k;
			goto out;
		}
		rows = merged;
		n = k;
	}
	if (!(shown = calloc((size_t)n + 1, sizeof *shown))) {
		cli_err("%s: out of memory", cmd);
		rc = EXIT_FAIL;
		goto out;
	}
	for (int k = 0; k < n; k++) {
		shown[k] = !rows[k].error &&
			   (!opt.ntags || ck_tags_any(rows[k].tags, opt.tags, opt.ntags));
		if (!rows[k].error)
			continue;
		char why[1024];
		cli_err("warning: step %llu: %s", (unsigned long long)rows[k].step,
			ck_invalid_reason(store, &rows[k], why, sizeof why));
	}
	worlds = ck_dist_list_worlds(store, rows, n);
	lt = lightning_of(store, rows, n);
	if (opt.json)
		list_json(store, rows, n, shown, worlds, where, lt);
	else
		list_text(store, rows, n, shown, worlds, where, lt, opt.ntags > 0);
	rc = ck_stdout_done(cmd);
out:
	lightning_free(lt, n);
	free(worlds);
	free(shown);
	free(opt.tags);
	free(merged);
	free(where);
	ckpt_info_free(rlist);
	ckpt_info_free(list);
	ckpt_store_close(store);
	return rc;
}
