/* ckptctl push and pull: one checkpoint to or from a store's remote, with progress and
 * --json; and the remote url shared by them and list (--remote URL, else $CKPT_REMOTE). */
#include "ckptctl.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct xfer_args {
	const char *remote, *store_id;
	bool json, no_progress, all;
};

#define REMOTE_OPT(T) \
	{CLI_OPT(CLI_STRING, "remote", 'r', CLI_AT(T, remote), "URL", \
	 "the remote: file:///DIR or /DIR (a shared file system),\n" \
	 "s3://BUCKET/PREFIX; default $CKPT_REMOTE")}

static const struct cli_opt push_opts[] = {
	REMOTE_OPT(struct xfer_args),
	{CLI_OPT(CLI_FLAG, "all", 'a', CLI_AT(struct xfer_args, all), NULL,
	 "every local checkpoint the remote lacks, oldest first (no STEP);\n"
	 "with --json: remote, store_id, steps_pushed, checkpoints_present\n"
	 "and the sums of the counts below")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct xfer_args, json), NULL,
	 "print a JSON object: step, remote, store_id, packs_sent, bytes_sent,\n"
	 "packs_present, bytes_present")},
	{CLI_OPT(CLI_FLAG, "no-progress", 0, CLI_AT(struct xfer_args, no_progress), NULL,
	 "no progress bar (it is shown only when standard error is a\n"
	 "terminal)")},
	CLI_OPT_END,
};

static const struct cli_opt pull_opts[] = {
	REMOTE_OPT(struct xfer_args),
	{CLI_OPT(CLI_STRING, "store-id", 0, CLI_AT(struct xfer_args, store_id), "ID",
	 "when STORE does not exist and the remote holds several stores:\n"
	 "the one to bind it to (32 hex digits, as 'ckptctl list --remote'\n"
	 "prints)")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct xfer_args, json), NULL,
	 "print a JSON object: step, remote, store_id, created, packs_sent,\n"
	 "bytes_sent, packs_present, bytes_present, skipped_damaged (the\n"
	 "damaged newer checkpoints a pull of latest passed over)")},
	{CLI_OPT(CLI_FLAG, "no-progress", 0, CLI_AT(struct xfer_args, no_progress), NULL,
	 "no progress bar (it is shown only when standard error is a\n"
	 "terminal)")},
	CLI_OPT_END,
};

static int cmd_push(int argc, char **argv);
static int cmd_pull(int argc, char **argv);

const struct cli_cmd ck_cmd_push = {
	.name = "push", .fn = cmd_push, .help = "upload a checkpoint to the store's remote",
	.args = "STORE [STEP]", .opts = push_opts,
	.desc = "Upload the checkpoint of STEP (a number or 'latest'; default latest) to the remote:\n"
		"only the packs the remote lacks travel, then a multi-rank checkpoint's part files,\n"
		"then its manifest, last: the remote lists a checkpoint only once all of it is there,\n"
		"so an interrupted push leaves nothing half visible and the next one sends only what is\n"
		"missing. Several stores may share one remote: each keeps its objects under its store\n"
		"id. The store is opened read-only. A directory remote that does not exist yet is\n"
		"created (mkdir -p).\n",
	.tail = "\n"
		"Exit status: 0 uploaded (or already there); 1 failed; 2 usage error; 4 no such store or\n"
		"step.\n"
		"\n"
		"Example:\n"
		"  ckptctl push /mnt/nvme/ckpt --remote /lustre/ckpt-copies\n"
		"  ckptctl push /mnt/nvme/ckpt --all --remote s3://bucket/ckpt\n",
};

const struct cli_cmd ck_cmd_pull = {
	.name = "pull", .fn = cmd_pull, .help = "bring a checkpoint from the remote into the store",
	.args = "STORE [STEP]", .opts = pull_opts,
	.desc = "Bring the checkpoint of STEP (default latest: the remote's newest) from the remote\n"
		"into STORE: the packs missing locally, each record checked against its digest before\n"
		"the pack is put in place, then its manifest. When STORE does not exist it is created\n"
		"bound to the remote's store (the same store id, chunk size and compression): the way\n"
		"back after losing a node. A damaged remote object is named and nothing of it is kept.\n"
		"Latest is the remote's newest checkpoint whose manifest is intact: a warning names each\n"
		"newer one (damaged) and its remote key.\n",
	.tail = "\n"
		"Exit status: 0 pulled (or already local); 1 failed (damage included); 2 usage error;\n"
		"3 the store is busy; 4 no such checkpoint on the remote.\n"
		"\n"
		"Example:\n"
		"  ckptctl pull /mnt/nvme/ckpt --remote /lustre/ckpt-copies\n",
};

static const struct ck_pos xfer_pos = {1, 2, true, {"expected STORE"}};

int ck_set_remote(const char *cmd, ckpt_store *store, const char *url, unsigned flags,
		  ckpt_remote **rm)
{
	*rm = NULL;
	if (!url || !*url)
		url = getenv("CKPT_REMOTE");
	if (!url || !*url)
		return cli_usage_err(cmd, "no remote: give --remote URL or set CKPT_REMOTE");
	int rc = ckpt_remote_open(store, url, flags, rm);
	return rc ? ck_fail(cmd, rc, "cannot open the remote") : 0;
}

const char *ck_remote_invalid_reason(ckpt_store *store, ckpt_remote **rm, const ckpt_info *info,
				     char *buf, size_t len)
{
	/* Read through the remote even when the step is local too (CKPT_REMOTE_READ), then back. */
	char url[4096];
	snprintf(buf, len, "remote manifest invalid: %s", ckpt_strerror(info->error));
	if (!*rm)
		return buf;
	snprintf(url, sizeof url, "%s", ckpt_remote_url(*rm));
	if (!ckpt_remote_open(store, url, CKPT_REMOTE_READ, rm))
		ck_invalid_reason(store, info, buf, len);
	if (ckpt_remote_open(store, url, 0, rm))
		*rm = NULL;
	return buf;
}

/* What a pull of the latest checkpoint passed over: the remote's newest checkpoint that decodes
 * is pulled, so every remote manifest of a newer step is damaged. */
struct skipped {
	int n;
	uint64_t *steps;
	int *errors;
	char (*why)[1024];
};

/* Fills *sk with the damaged remote manifests above step got, each named on stderr. The listing
 * of every remote manifest is fetched only when the remote lists a step above got. */
static void find_skipped(const char *cmd, ckpt_store *store, ckpt_remote **rm, uint64_t got,
			 struct skipped *sk)
{
	*sk = (struct skipped){0};
	ckpt_info *list = NULL;
	long m = ckpt_remote_list(*rm, 1, &list);
	if (m < 0) { /* the pull is done: say only what could not be checked */
		cli_err("%s: warning: cannot list the remote's manifests above step %llu: %s", cmd,
			(unsigned long long)got, ckpt_errmsg());
		m = 0;
	}
	sk->steps = calloc((size_t)m + 1, sizeof *sk->steps);
	sk->errors = calloc((size_t)m + 1, sizeof *sk->errors);
	sk->why = calloc((size_t)m + 1, sizeof *sk->why);
	for (long k = 0; sk->steps && sk->errors && sk->why && k < m; k++) {
		if (!list[k].error || list[k].step <= got)
			continue;
		ck_remote_invalid_reason(store, rm, &list[k], sk->why[sk->n], sizeof sk->why[0]);
		cli_err("%s: warning: step %llu on the remote is damaged, pulled step %llu (the newest "
			"intact): %s", cmd, (unsigned long long)list[k].step, (unsigned long long)got,
			sk->why[sk->n]);
		sk->errors[sk->n] = list[k].error;
		sk->steps[sk->n++] = list[k].step;
	}
	ckpt_info_free(list);
}

static void skipped_json(struct jw *w, const struct skipped *sk)
{
	jw_key(w, "skipped_damaged");
	jw_arr_begin(w);
	for (int k = 0; k < sk->n; k++) {
		jw_obj_begin(w);
		jw_key(w, "step"); jw_u64(w, sk->steps[k]);
		jw_key(w, "error"); jw_str(w, ckpt_strerror(sk->errors[k]));
		jw_key(w, "message"); jw_str(w, sk->why[k]);
		jw_obj_end(w);
	}
	jw_arr_end(w);
}


static void print_result(const char *verb, const struct xfer_args *a, ckpt_store *store,
			 const char *url, uint64_t step, const ckpt_remote_stats *st, int created,
			 const struct skipped *sk)
{
	char id[33], s1[32], s2[32];
	ckpt_store_id(store, id);
	if (a->json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_obj_begin(&w);
		jw_key(&w, "step"); jw_u64(&w, step);
		jw_key(&w, "remote"); jw_str(&w, url);
		jw_key(&w, "store_id"); jw_str(&w, id);
		if (created >= 0) {
			jw_key(&w, "created"); jw_bool(&w, created);
		}
		jw_key(&w, "packs_sent"); jw_u64(&w, st->packs_sent);
		jw_key(&w, "bytes_sent"); jw_u64(&w, st->bytes_sent);
		jw_key(&w, "packs_present"); jw_u64(&w, st->packs_present);
		jw_key(&w, "bytes_present"); jw_u64(&w, st->bytes_present);
		if (sk)
			skipped_json(&w, sk);
		jw_obj_end(&w);
		jw_finish(&w);
		return;
	}
	if (created > 0)
		printf("created store %s as store %s of %s\n", ckpt_store_path(store), id, url);
	printf("%s step %llu: %llu pack%s (%s) sent, %llu already there", verb,
	       (unsigned long long)step, (unsigned long long)st->packs_sent,
	       st->packs_sent == 1 ? "" : "s", cli_fmt_iec(st->bytes_sent, s1, sizeof s1),
	       (unsigned long long)st->packs_present);
	if (st->bytes_present)
		printf(" (%s)", cli_fmt_iec(st->bytes_present, s2, sizeof s2));
	putchar('\n');
}

/* STORE for a pull: opened for writing; created from the remote's store when it does not exist.
 * *created says so. Returns 0 or the exit status (reported). */
static int open_for_pull(const char *cmd, const struct xfer_args *a, const char *path,
			 ckpt_store **store, int *created)
{
	struct stat st;
	char p[4200];
	snprintf(p, sizeof p, "%s/store", path);
	*created = 0;
	if (stat(p, &st) && errno == ENOENT) {
		const char *url = a->remote && *a->remote ? a->remote : getenv("CKPT_REMOTE");
		if (!url || !*url)
			return cli_usage_err(cmd, "no remote: give --remote URL or set CKPT_REMOTE");
		int rc = ckpt_remote_adopt(url, a->store_id, path);
		if (rc && rc == -CKPT_E_INVAL && !a->store_id) { /* several stores: which there are */
			ck_fail(cmd, rc, "cannot create the store from the remote");
			return ck_remote_stores(cmd, url, false, stderr), EXIT_FAIL;
		}
		if (rc)
			return ck_fail(cmd, rc, "cannot create the store from the remote");
		*created = 1;
	}
	return ck_open_store(cmd, path, false, NULL, store);
}

/* push and pull: STORE [STEP], the store opened (read-only for a push; for a pull, created from
 * the remote when missing), the transfer with its progress, the result. */
static int xfer_main(const struct cli_cmd *c, int argc, char **argv, bool pull)
{
	const char *cmd = c->name;
	struct xfer_args a = {0};
	int rc = ck_parse(c, &a, &argc, &argv, &xfer_pos);
	if (rc >= 0)
		return rc;
	uint64_t step = CKPT_STEP_LATEST;
	if (argc > 2 && a.all)
		return cli_usage_err(cmd, "--all pushes every checkpoint the remote lacks: no STEP");
	if (argc > 2 && (rc = ck_parse_step(cmd, argv[2], &step)))
		return rc;
	const uint64_t want = step;
	ckpt_store *store;
	int created = -1;
	if ((rc = pull ? open_for_pull(cmd, &a, argv[1], &store, &created)
		       : ck_open_store(cmd, argv[1], true, NULL, &store)))
		return rc;
	if (!pull && (rc = ck_remote_mkdir(cmd, a.remote))) { /* a first push: not there yet */
		ckpt_store_close(store);
		return rc;
	}
	ckpt_remote *rm;
	if (!(rc = ck_set_remote(cmd, store, a.remote, 0, &rm)) && a.all) {
		rc = ck_push_all(cmd, store, rm, a.json, !a.no_progress && !a.json);
		ckpt_store_close(store);
		return rc ? rc : ck_stdout_done(cmd);
	}
	if (!rc && !pull && (rc = ckpt_store_resolve(store, step, &step)))
		rc = ck_fail(cmd, rc, "no such checkpoint");
	if (!rc) {
		struct ck_xprog x = {.label = cmd, .enable = !a.no_progress && !a.json};
		ckpt_remote_stats st = {.struct_size = sizeof st};
		char url[4096]; /* the remote as opened: find_skipped() reopens it */
		snprintf(url, sizeof url, "%s", ckpt_remote_url(rm));
		int r = pull ? ckpt_remote_pull(rm, step, &step, &st, ck_xfer_progress, &x)
			     : ckpt_remote_push(rm, step, &st, ck_xfer_progress, &x);
		if (x.started)
			progress_end(&x.bar);
		struct skipped sk = {0};
		if (r)
			rc = ck_fail(cmd, r, pull ? "pull failed" : "push failed");
		else if (pull && want == CKPT_STEP_LATEST)
			find_skipped(cmd, store, &rm, step, &sk);
		if (!r)
			print_result(pull ? "pulled" : "pushed", &a, store, url, step, &st, created,
				     pull ? &sk : NULL);
		free(sk.steps);
		free(sk.errors);
		free(sk.why);
	}
	ckpt_store_close(store);
	return rc ? rc : ck_stdout_done(cmd);
}

static int cmd_push(int argc, char **argv) { return xfer_main(&ck_cmd_push, argc, argv, false); }
static int cmd_pull(int argc, char **argv) { return xfer_main(&ck_cmd_pull, argc, argv, true); }

/* The report of a remote prune or gc, as text or JSON. */
static void remote_gc_print(bool json, bool dry, const char *url, const ckpt_report *r,
			    bool prune)
{
	if (json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_obj_begin(&w);
		jw_key(&w, "dry_run"); jw_bool(&w, dry);
		jw_key(&w, "remote"); jw_str(&w, url);
		if (prune) {
			jw_key(&w, "manifests_removed"); jw_u64(&w, r->n_steps_removed);
			jw_key(&w, "steps_removed");
			jw_arr_begin(&w);
			for (size_t i = 0; r->steps_removed && i < r->n_steps_removed; i++)
				jw_u64(&w, r->steps_removed[i]);
			jw_arr_end(&w);
		}
		jw_key(&w, "packs_removed"); jw_u64(&w, r->packs_removed);
		jw_key(&w, "bytes_freed"); jw_u64(&w, r->bytes_freed);
		jw_key(&w, "parts_removed"); jw_u64(&w, r->parts_removed);
		jw_key(&w, "packs_spared"); jw_u64(&w, r->packs_spared);
		jw_key(&w, "uploads_in_flight"); jw_u64(&w, r->uploads_in_flight);
		jw_key(&w, "leftovers_removed"); jw_u64(&w, r->leftovers_removed);
		jw_key(&w, "leftover_bytes"); jw_u64(&w, r->leftover_bytes);
		jw_obj_end(&w);
		jw_finish(&w);
		return;
	}
	const char *verb = dry ? "would remove" : "removed";
	char b[32];
	for (size_t i = 0; prune && r->steps_removed && i < r->n_steps_removed; i++)
		printf("%s step %llu\n", verb, (unsigned long long)r->steps_removed[i]);
	if (prune)
		printf("%s %llu checkpoint%s from %s\n", verb, (unsigned long long)r->n_steps_removed,
		       r->n_steps_removed == 1 ? "" : "s", url);
	if (!prune || !dry)
		printf("%s %llu pack%s (%s) and %llu part file%s from %s\n", verb,
		       (unsigned long long)r->packs_removed, r->packs_removed == 1 ? "" : "s",
		       cli_fmt_iec(r->bytes_freed, b, sizeof b), (unsigned long long)r->parts_removed,
		       r->parts_removed == 1 ? "" : "s", url);
	if (r->leftovers_removed)
		printf("removed %llu leftover%s of killed uploads (%s)\n",
		       (unsigned long long)r->leftovers_removed, r->leftovers_removed == 1 ? "" : "s",
		       cli_fmt_iec(r->leftover_bytes, b, sizeof b));
	if (r->packs_spared)
		printf("spared %llu unreferenced pack%s: %llu upload%s of this store in flight\n",
		       (unsigned long long)r->packs_spared, r->packs_spared == 1 ? "" : "s",
		       (unsigned long long)r->uploads_in_flight, r->uploads_in_flight == 1 ? "" : "s");
}

int ck_remote_gc(const char *cmd, const char *path, const char *url,
		 const ckpt_retention *pol, int flags, bool json, int64_t grace_s)
{
	ckpt_store *store;
	ckpt_options *o = ckpt_options_create();
	if (!o) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	ckpt_options_set(o, CKPT_OPT_READ_ONLY, 1);
	int rc = grace_s >= 0 ? ckpt_options_set(o, CKPT_OPT_GC_GRACE_S, grace_s) : 0;
	rc = rc < 0 ? ck_fail(cmd, rc, "--grace") : ck_open_store(cmd, path, false, o, &store);
	ckpt_options_free(o);
	if (rc)
		return rc;
	ckpt_remote *rm;
	if (!(rc = ck_set_remote(cmd, store, url, 0, &rm))) {
		ckpt_report *r = NULL;
		int e = pol ? ckpt_store_prune(store, pol, NULL, flags | CKPT_GC_REMOTE, &r)
			    : ckpt_store_gc(store, NULL, flags | CKPT_GC_REMOTE, &r);
		if (e)
			rc = ck_fail(cmd, e, pol ? "remote prune failed" : "remote gc failed");
		else
			remote_gc_print(json, flags & CKPT_GC_DRY_RUN, ckpt_remote_url(rm), r,
					pol != NULL);
		ckpt_report_free(r);
	}
	ckpt_store_close(store);
	return rc ? rc : ck_stdout_done(cmd);
}
