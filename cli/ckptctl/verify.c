/* ckptctl verify: read back and re-hash every chunk of one checkpoint or of all of them, and name
 * every damaged tensor, chunk and file. */
#include "ckptctl.h"
#include "safetensors.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct verify_args {
	bool all, json, quiet, no_progress;
	const char *remote;
};

static const struct cli_opt verify_opts[] = {
	CK_REMOTE_READ_OPT(struct verify_args),
	{CLI_OPT(CLI_FLAG, "all", 'a', CLI_AT(struct verify_args, all), NULL,
	 "verify every checkpoint of the store, then print how many\n"
	 "distinct chunks and bytes were read")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct verify_args, json), NULL,
	 "print the result as JSON (with records_read and bytes_read)")},
	{CLI_OPT(CLI_FLAG, "quiet", 'q', CLI_AT(struct verify_args, quiet), NULL, "print only damage")},
	{CLI_OPT(CLI_FLAG, "no-progress", 0, CLI_AT(struct verify_args, no_progress), NULL,
	 "no progress bar (it is shown only when standard error is a\n"
	 "terminal)")},
	CLI_OPT_END,
};

static int cmd_verify(int argc, char **argv);

const struct cli_cmd ck_cmd_verify = {
	.name = "verify", .fn = cmd_verify,
	.help = "re-read and re-hash every chunk of checkpoints",
	.args = "STORE [STEP]", .opts = verify_opts,
	.desc = "Read every chunk of the checkpoint of STEP (a number or 'latest'; default latest), or of\n"
		"every checkpoint with --all, and check its digest; a chunk several checkpoints share is\n"
		"read once and its result reported for each. Each damaged chunk is reported with its\n"
		"tensor, chunk index, offset and file; a damaged manifest counts as damage (when verifying\n"
		"the latest checkpoint, so does a damaged manifest of a newer step). Exit status 0 when\n"
		"everything verified is intact, 1 when damage was found (or reading failed), 2 for a\n"
		"usage error, 4 when the store or step does not exist.\n"
		"A multi-rank checkpoint's parts are checked too (size, checksum, chunks in the global\n"
		"table); a damaged part or chunk is reported with the rank that wrote it.\n"
		"With --remote, the checkpoints are read from the remote instead (latest and --all:\n"
		"the remote's), every record range-read and checked: the remote's copy is verified\n"
		"(a multi-rank checkpoint's part files are not).\n",
	.tail = "\n"
		"Example:\n"
		"  ckptctl verify /mnt/nvme/ckpt --all\n",
};

static const struct ck_pos verify_pos = {1, 2, true, {"expected STORE"}};

/* The callbacks may come from the library's worker threads: one lock keeps their output whole. */
struct vctx {
	pthread_mutex_t lock;
	bool json, quiet, progress;
	struct jw w;
	struct progress bar;
	ckpt_verify_cache *cache; /* each record shared by several checkpoints read once */
	uint64_t step;
	const ckpt_reader *rd; /* the checkpoint verified: whose packs a chunk's rank comes from */
	bool remote;           /* read from a remote: its parts are not local, nor checked */
	/* The damaged parts of the checkpoint, printed after its chunks (as they always were). */
	ckpt_damage *parts;
	size_t nparts, parts_cap;
	long parts_damaged;    /* of the checkpoint: kept, or printed at once when out of memory */
	long parts_ignored;    /* damaged as local parts, with remote */
	long damaged_chunks; /* over the whole run */
	long unreadable_chunks; /* permission denied: not checked, and not damage */
	int damaged_ckpts, checked, failed;
};

static int on_progress(void *arg, uint64_t done, uint64_t total)
{
	struct vctx *v = arg;
	pthread_mutex_lock(&v->lock);
	v->bar.total = total;
	progress_update(&v->bar, done);
	pthread_mutex_unlock(&v->lock);
	return 0;
}

static void report_damage(struct vctx *v, const ckpt_damage *d)
{
	/* A pack this user may not read says nothing about the data in it. */
	bool unreadable = d->error == CKPT_E_PERM;
	if (unreadable)
		v->unreadable_chunks++;
	else
		v->damaged_chunks++;
	if (v->json) {
		jw_obj_begin(&v->w);
		jw_key(&v->w, "tensor"); jw_str(&v->w, d->tensor);
		jw_key(&v->w, "chunk"); jw_u64(&v->w, d->chunk);
		jw_key(&v->w, "offset"); jw_u64(&v->w, d->offset);
		jw_key(&v->w, "file"); jw_str(&v->w, d->file);
		jw_key(&v->w, "error"); jw_str(&v->w, ckpt_strerror(d->error));
		jw_key(&v->w, "message"); jw_str(&v->w, d->message);
		int rank = ck_dist_damage_rank(v->rd, d);
		if (rank >= 0) {
			jw_key(&v->w, "rank"); jw_i64(&v->w, rank);
		}
		jw_obj_end(&v->w);
		return;
	}
	progress_clear(&v->bar); /* the damage line goes where the bar was */
	size_t flen = d->file ? strlen(d->file) : 0;
	if (!d->tensor && flen > 5 && !strcmp(d->file + flen - 5, ".pack")) {
		/* the library's message names the pack already */
		printf("step %llu: DAMAGED pack: %s\n", (unsigned long long)v->step,
		       d->message ? d->message : ckpt_strerror(d->error));
		return;
	}
	if (!d->tensor) {
		printf("step %llu: DAMAGED manifest %s: %s\n", (unsigned long long)v->step,
		       d->file ? d->file : "", d->message ? d->message : ckpt_strerror(d->error));
		return;
	}
	char q[1100];
	const char *msg = d->message ? d->message : ckpt_strerror(d->error);
	size_t fl = d->file ? strlen(d->file) : 0;
	/* The library's message often begins with the file name, already printed. */
	if (fl && !strncmp(msg, d->file, fl) && !strncmp(msg + fl, ": ", 2))
		msg += fl + 2;
	char rk[32] = "";
	int rank = ck_dist_damage_rank(v->rd, d);
	if (rank >= 0) /* a multi-rank checkpoint: who wrote it */
		snprintf(rk, sizeof rk, " (written by rank %d)", rank);
	printf("step %llu: %s tensor %s chunk %llu (offset %llu) in %s%s: %s\n",
	       (unsigned long long)v->step, unreadable ? "UNREADABLE" : "DAMAGED",
	       st_quote(d->tensor, q, sizeof q, 1000),
	       (unsigned long long)d->chunk, (unsigned long long)d->offset,
	       d->file ? d->file : "?", rk, msg);
}

/* Keeps a damaged part for flush_parts(). Returns false when out of memory. */
static bool keep_part(struct vctx *v, const ckpt_damage *d)
{
	if (v->nparts == v->parts_cap) {
		size_t cap = v->parts_cap ? 2 * v->parts_cap : 8;
		ckpt_damage *p = realloc(v->parts, cap * sizeof *p);
		if (!p)
			return false;
		v->parts = p;
		v->parts_cap = cap;
	}
	ckpt_damage *c = &v->parts[v->nparts];
	*c = *d;
	c->file = d->file ? strdup(d->file) : NULL;
	c->message = d->message ? strdup(d->message) : NULL;
	if ((d->file && !c->file) || (d->message && !c->message)) {
		free((char *)c->file);
		free((char *)c->message);
		return false;
	}
	v->nparts++;
	return true;
}

static void on_damage(const ckpt_damage *d, void *arg)
{
	struct vctx *v = arg;
	pthread_mutex_lock(&v->lock);
	if (!ck_dist_part_damage(d))
		report_damage(v, d);
	else if (v->remote)
		v->parts_ignored++;
	else if (v->parts_damaged++, !keep_part(v, d))
		ck_dist_part_print(d, v->json ? &v->w : NULL); /* out of memory: at once */
	pthread_mutex_unlock(&v->lock);
}

/* Prints the damaged parts kept by on_damage() and forgets them. */
static void flush_parts(struct vctx *v)
{
	for (size_t k = 0; k < v->nparts; k++) {
		ck_dist_part_print(&v->parts[k], v->json ? &v->w : NULL);
		free((char *)v->parts[k].file);
		free((char *)v->parts[k].message);
	}
	v->nparts = 0;
}

/* A manifest that does not verify: reported as damage of step. */
static void bad_manifest(struct vctx *v, uint64_t step, int err, const char *msg)
{
	v->checked++;
	v->damaged_ckpts++;
	if (v->json) {
		jw_obj_begin(&v->w);
		jw_key(&v->w, "step"); jw_u64(&v->w, step);
		jw_key(&v->w, "status"); jw_str(&v->w, "invalid_manifest");
		jw_key(&v->w, "error"); jw_str(&v->w, ckpt_strerror(err));
		jw_key(&v->w, "message"); jw_str(&v->w, msg);
		jw_obj_end(&v->w);
	} else
		printf("step %llu: DAMAGED manifest: %s\n", (unsigned long long)step, msg);
}

/* Verifies the checkpoint of step and reports the result; damage and failures are counted in v. */
static void verify_one(struct vctx *v, ckpt_store *store, uint64_t step)
{
	ckpt_reader *rd;
	char label[64];
	int r = ckpt_reader_open(store, step, CKPT_READ_AS_SAVED, &rd);
	if (r == -CKPT_E_NOTFOUND) { /* removed since it was listed (a concurrent prune) */
		v->failed++;
		ck_fail("verify", r, "no such checkpoint");
		return;
	}
	if (r == -CKPT_E_CORRUPT || r == -CKPT_E_CHECKSUM || r == -CKPT_E_VERSION) {
		bad_manifest(v, step, r, ckpt_errmsg()[0] ? ckpt_errmsg() : ckpt_strerror(r));
		return;
	}
	if (r < 0) {
		v->failed++;
		ck_fail("verify", r, "cannot open the checkpoint");
		return;
	}
	ckpt_info info = {.struct_size = sizeof info};
	ckpt_reader_info(rd, &info);
	v->step = info.step;
	v->checked++;
	long before = v->damaged_chunks, ubefore = v->unreadable_chunks;
	if (v->json) {
		jw_obj_begin(&v->w);
		jw_key(&v->w, "step"); jw_u64(&v->w, info.step);
		jw_key(&v->w, "tensors"); jw_u64(&v->w, info.tensors);
		jw_key(&v->w, "chunks"); jw_u64(&v->w, info.chunks);
		jw_key(&v->w, "logical_bytes"); jw_u64(&v->w, info.logical_bytes);
		jw_key(&v->w, "damage");
		jw_arr_begin(&v->w);
	}
	/* A multi-rank layout the library refuses is the damage: nothing reads the chunks by it.
	 * Read from a remote (--remote), the parts are not local: its chunks are checked. */
	long n = 0, parts = v->remote ? 0
			    : ck_dist_verify_layout(store, info.step, v->json ? &v->w : NULL);
	if (!parts) {
		snprintf(label, sizeof label, "verify step %llu", (unsigned long long)info.step);
		/* what on_progress counts */
		progress_start(&v->bar, label, info.logical_bytes, v->progress);
		v->rd = rd;
		v->parts_damaged = v->parts_ignored = 0;
		n = ckpt_reader_verify(rd, v->cache, on_damage, on_progress, v);
		progress_end(&v->bar);
		/* The library checks the parts first; they were always reported after the chunks. */
		flush_parts(v);
		parts = v->parts_damaged;
		if (n > 0)
			n -= parts + v->parts_ignored;
	}
	const char *status = "ok";
	long unread = v->unreadable_chunks - ubefore;
	if (n > 0)
		n -= unread; /* the damaged ones */
	if (n < 0) {
		v->failed++;
		status = "error";
		ck_fail("verify", (int)n, "verification could not run");
	} else if (n > 0 || v->damaged_chunks > before || parts) {
		v->damaged_ckpts++;
		status = "damaged";
	} else if (unread) {
		v->failed++;
		status = "unreadable";
	}
	if (v->json) {
		jw_arr_end(&v->w);
		jw_key(&v->w, "status"); jw_str(&v->w, status);
		if (n < 0) {
			jw_key(&v->w, "error"); jw_str(&v->w, ckpt_strerror((int)n));
			jw_key(&v->w, "message"); jw_str(&v->w, ckpt_errmsg());
		}
		jw_obj_end(&v->w);
	} else if (n > 0 || unread || parts > 0) {
		if (parts > 0)
			printf("step %llu: %ld damaged part%s\n", (unsigned long long)info.step,
			       parts, parts == 1 ? "" : "s");
		if (n > 0)
			printf("step %llu: %ld damaged chunk%s\n", (unsigned long long)info.step, n,
			       n == 1 ? "" : "s");
		if (unread)
			printf("step %llu: %ld chunk%s not verified: permission denied\n",
			       (unsigned long long)info.step, unread, unread == 1 ? "" : "s");
	} else if (n == 0 && !v->quiet) {
		char a[32];
		printf("step %llu: ok (%llu tensors, %llu chunks, %s)\n",
		       (unsigned long long)info.step, (unsigned long long)info.tensors,
		       (unsigned long long)info.chunks, cli_fmt_iec(info.logical_bytes, a, sizeof a));
	}
	ckpt_reader_close(rd);
}

/* The steps to verify: with --all or for the latest, *list (n entries, freed by the caller) lists
 * the store; *target is the latest valid step (CKPT_STEP_LATEST: none, only damaged manifests),
 * or step itself when it was given, which must then exist. Returns -1 to go on, or the exit
 * status (reported). */
static int choose_steps(const char *cmd, ckpt_store *store, ckpt_remote *rm,
			const char *store_path, uint64_t step, bool all, ckpt_info **list, int *n,
			uint64_t *target)
{
	*target = step;
	if (all || step == CKPT_STEP_LATEST) {
		*n = rm ? (int)ckpt_remote_list(rm, 1, list) : (int)ckpt_store_list(store, 1, list);
		if (*n < 0)
			return ck_fail(cmd, *n, "cannot list the store");
	}
	if (!all && step == CKPT_STEP_LATEST) {
		/* The latest valid checkpoint, and every damaged manifest above it. */
		bool any_valid = false;
		for (int k = 0; k < *n; k++)
			if (!(*list)[k].error) {
				*target = (*list)[k].step;
				any_valid = true;
			}
		bool any = false;
		for (int k = 0; k < *n; k++)
			any |= (*list)[k].error && (!any_valid || (*list)[k].step > *target);
		if (!any_valid && !any) {
			cli_err("%s: no checkpoint in %s", cmd, store_path);
			return EXIT_NOTFOUND;
		}
	}
	if (!all && step != CKPT_STEP_LATEST) {
		/* A step that does not exist is an error, not a result: say so before any output. */
		ckpt_reader *rd = NULL;
		int r = ckpt_reader_open(store, step, CKPT_READ_AS_SAVED, &rd);
		ckpt_reader_close(rd);
		if (r == -CKPT_E_NOTFOUND)
			return ck_fail(cmd, r, "no such checkpoint");
	}
	return -1;
}

/* Verifies what choose_steps() chose: every listed step with --all; the latest valid one and the
 * damaged manifests above it; or the step given. */
static void verify_steps(struct vctx *v, ckpt_store *store, const ckpt_info *list, int n,
			 bool all, uint64_t step, uint64_t target)
{
	char why[1024];
	if (all) {
		for (int k = 0; k < n; k++) {
			if (list[k].error)
				bad_manifest(v, list[k].step, list[k].error,
					     ck_invalid_reason(store, &list[k], why, sizeof why));
			else
				verify_one(v, store, list[k].step);
		}
	} else if (step == CKPT_STEP_LATEST) {
		if (target != CKPT_STEP_LATEST)
			verify_one(v, store, target);
		for (int k = 0; k < n; k++)
			if (list[k].error && (target == CKPT_STEP_LATEST || list[k].step > target))
				bad_manifest(v, list[k].step, list[k].error,
					     ck_invalid_reason(store, &list[k], why, sizeof why));
	} else {
		verify_one(v, store, step);
	}
}

/* The end of the report: the totals of the JSON document, or the line of --all, then the
 * damage and the unreadable chunks on stderr. */
static void print_summary(struct vctx *v, bool all, const char *store_path)
{
	uint64_t bytes, recs;
	ckpt_verify_cache_stats(v->cache, &bytes, &recs);
	if (v->json) {
		jw_arr_end(&v->w);
		jw_key(&v->w, "checked"); jw_u64(&v->w, (uint64_t)v->checked);
		jw_key(&v->w, "damaged"); jw_u64(&v->w, (uint64_t)v->damaged_ckpts);
		jw_key(&v->w, "damaged_chunks"); jw_u64(&v->w, (uint64_t)v->damaged_chunks);
		jw_key(&v->w, "records_read"); jw_u64(&v->w, recs);
		jw_key(&v->w, "bytes_read"); jw_u64(&v->w, bytes);
		jw_key(&v->w, "intact"); jw_bool(&v->w, !v->damaged_ckpts && !v->failed);
		jw_obj_end(&v->w);
		jw_finish(&v->w);
	} else if (all && !v->checked && !v->quiet) {
		printf("no checkpoints in %s\n", store_path);
	} else if (all && !v->quiet) {
		char a[32];
		printf("%d checkpoint%s verified: %llu distinct chunk%s read once each, %s\n",
		       v->checked, v->checked == 1 ? "" : "s", (unsigned long long)recs,
		       recs == 1 ? "" : "s",
		       cli_fmt_iec(bytes, a, sizeof a));
	}
	if (v->damaged_ckpts)
		cli_err("verify: damage found in %d of %d checkpoint%s verified", v->damaged_ckpts,
			v->checked, v->checked == 1 ? "" : "s");
	if (v->unreadable_chunks)
		cli_err("verify: %ld chunk%s could not be read (permission denied): not verified, "
			"not known to be damaged", v->unreadable_chunks,
			v->unreadable_chunks == 1 ? "" : "s");
}

static int cmd_verify(int argc, char **argv)
{
	const char *cmd = "verify";
	struct verify_args opt = {0};
	int rc = ck_parse(&ck_cmd_verify, &opt, &argc, &argv, &verify_pos);
	if (rc >= 0)
		return rc;
	if (opt.all && argc == 3)
		return cli_usage_err(cmd, "give either STEP or --all, not both");
	uint64_t step = CKPT_STEP_LATEST, target;
	if (argc == 3 && ck_parse_step(cmd, argv[2], &step))
		return EXIT_USAGE;
	struct vctx v;
	memset(&v, 0, sizeof v);
	pthread_mutex_init(&v.lock, NULL);
	v.json = opt.json;
	v.quiet = opt.quiet;
	v.progress = !opt.no_progress && !v.json && !v.quiet;
	if (!(v.cache = ckpt_verify_cache_create())) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}

	ckpt_store *store;
	rc = ck_open_store(cmd, argv[1], true, NULL, &store);
	if (rc)
		return rc;
	ckpt_remote *rm = NULL;
	if (opt.remote && (rc = ck_set_remote(cmd, store, opt.remote, CKPT_REMOTE_READ, &rm))) {
		ckpt_store_close(store);
		return rc;
	}
	v.remote = rm != NULL;
	ckpt_info *list = NULL;
	int n = 0;
	rc = choose_steps(cmd, store, rm, argv[1], step, opt.all, &list, &n, &target);
	if (rc >= 0)
		goto out;
	if (v.json) {
		jw_init(&v.w, stdout, true);
		jw_obj_begin(&v.w);
		jw_key(&v.w, "checkpoints");
		jw_arr_begin(&v.w);
	}
	verify_steps(&v, store, list, n, opt.all, step, target);
	print_summary(&v, opt.all, argv[1]);
	rc = v.damaged_ckpts || v.failed ? EXIT_FAIL : EXIT_OK;
out:
	ckpt_info_free(list);
	ckpt_store_close(store);
	ckpt_verify_cache_free(v.cache);
	free(v.parts);
	return rc;
}
