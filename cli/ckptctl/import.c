/* ckptctl import: make a checkpoint from a safetensors file. The file is mapped read-only and its
 * tensors are handed to the library in place: nothing is copied into heap memory. */
#include "ckptctl.h"
#include "safetensors.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

/* The file is mapped: when another process shrinks it, the first read of a page past its new end
 * raises SIGBUS in whichever thread touches it (a library worker). No manifest names the data at
 * that point (the commit comes after every byte was read), so the handler says what happened and
 * exits like a killed save: earlier checkpoints are intact and gc collects the partial packs. */
static const uint8_t *bus_lo, *bus_hi;
static char bus_msg[1024];
static size_t bus_len;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	const uint8_t *a = si->si_addr;
	if (a >= bus_lo && a < bus_hi) {
		if (write(STDERR_FILENO, bus_msg, bus_len) < 0) {
			/* nothing more can be said */
		}
		_exit(EXIT_FAIL);
	}
	signal(sig, SIG_DFL); /* not ours: the default action (core dump) */
	raise(sig);
}

static void watch_mapping(const char *cmd, const char *file, const struct st_file *sf)
{
	bus_lo = sf->map;
	bus_hi = sf->map ? sf->map + sf->size : NULL;
	int n = snprintf(bus_msg, sizeof bus_msg, "ckptctl: %s: %s shrank while it was being "
			 "imported; nothing was committed (the store keeps its earlier checkpoints)\n",
			 cmd, file);
	bus_len = n < 0 ? 0 : (size_t)n < sizeof bus_msg ? (size_t)n : sizeof bus_msg - 1;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
#ifdef CKPT_TEST_HOOKS
	/* Test builds only ($B/tests/hooks/ckptctl): shrink or grow the file now, as another process
	 * could (deterministic). */
	const char *t = getenv("CKPTCTL_TEST_TRUNCATE_INPUT");
	if (t && truncate(file, (off_t)strtoull(t, NULL, 10))) {
		/* the test then sees an unchanged file and fails */
	}
#endif
}

/* Whether the file changed since it was opened (size, modification or change time): a file
 * rewritten in place mixes old and new bytes in the mapping without any signal. */
static bool input_changed(const struct st_file *sf, const struct stat *before)
{
	struct stat now;
	return fstat(sf->fd, &now) || now.st_size != before->st_size ||
	       now.st_mtim.tv_sec != before->st_mtim.tv_sec ||
	       now.st_mtim.tv_nsec != before->st_mtim.tv_nsec ||
	       now.st_ctim.tv_sec != before->st_ctim.tv_sec ||
	       now.st_ctim.tv_nsec != before->st_ctim.tv_nsec;
}

/* Staging pool of an import (the library's default is sized for a training job). */
#define IMPORT_POOL_SIZE (32 << 20)

struct import_args {
	uint64_t step, chunk, level;
	int compress;
	bool overwrite, quiet, json, no_progress;
	const char **tags; /* --tag, pointing into argv */
	size_t ntags;
};

static int import_tag(const char *cmd, int code, const char *arg, void *target)
{
	(void)code;
	struct import_args *a = target;
	return ck_tag_option(cmd, "--tag", arg, &a->tags, &a->ntags);
}

static const char *const compress_words[] = {"none", "zstd", NULL};
static const char *const chunk_words[] = {"64K", "128K", "256K", "512K", "1M", "2M", "4M", "8M",
					  "16M", "32M", "64M", NULL};

static const struct cli_opt import_opts[] = {
	{CLI_OPT(CLI_U64, "step", 's', CLI_AT(struct import_args, step), "N",
	 "step of the new checkpoint (required)"), .max = CKPT_STEP_LATEST - 1,
	 .bad = "invalid step '%s': expected a number", .flags = CLI_REQUIRED},
	{CLI_OPT(CLI_SIZE, "chunk-size", 0, CLI_AT(struct import_args, chunk), "SIZE",
	 "chunk size of new chunks: a power of two from 64K to 64M\n"
	 "(default: the store's; 1M for a new store)"),
	 .values = chunk_words, .min = 64u << 10, .max = 64u << 20, .flags = CLI_POW2,
	 .bad = "invalid chunk size '%s': expected a power of two from 64K to 64M"},
	{CLI_OPT(CLI_ENUM, "compress", 0, CLI_AT(struct import_args, compress), "ALGO",
	 "compression of new chunks: none or zstd (default: the store's)"),
	 .values = compress_words, .bad = "invalid compression '%s': expected none or zstd"},
	{CLI_OPT(CLI_U64, "level", 0, CLI_AT(struct import_args, level), "N",
	 "zstd level, 1 to 19 (default 1)"), .min = 1, .max = 19,
	 .bad = "invalid zstd level '%s': expected 1 to 19"},
	{CLI_OPT(CLI_CALL, "tag", 't', 0, "TAG",
	 "tag the checkpoint TAG (may be repeated): 1 to 64 printable\n"
	 "ASCII characters other than space and ','"),
	 .call = import_tag, .complete_fn = ck_complete_tags},
	{CLI_OPT(CLI_FLAG, "overwrite", 0, CLI_AT(struct import_args, overwrite), NULL,
	 "replace an existing checkpoint of step N")},
	{CLI_OPT(CLI_FLAG, "quiet", 'q', CLI_AT(struct import_args, quiet), NULL,
	 "print nothing on success")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct import_args, json), NULL,
	 "print the statistics of the save as JSON (the keys: see the man\n"
	 "page; new_bytes, new_chunks, reused_chunks: older names of\n"
	 "bytes_new, chunks_new, chunks_reused, printed too until the next\n"
	 "version)")},
	{CLI_OPT(CLI_FLAG, "no-progress", 0, CLI_AT(struct import_args, no_progress), NULL,
	 "no progress line (it is shown only when standard error is a\n"
	 "terminal, and not with --quiet or --json)")},
	CLI_OPT_END,
};

static int cmd_import(int argc, char **argv);

const struct cli_cmd ck_cmd_import = {
	.name = "import", .fn = cmd_import, .help = "make a checkpoint from a safetensors file",
	.args = "STORE FILE.safetensors", .opts = import_opts,
	.desc = "Make the checkpoint of step N in STORE from a safetensors file; STORE is created if it\n"
		"does not exist. The tensors keep the order of their data in the file; \"__metadata__\"\n"
		"becomes the checkpoint's metadata, and its \"ckpt.tags\" entry (what export writes for a\n"
		"tagged checkpoint) the checkpoint's tags, to which --tag adds. The file is validated\n"
		"completely before anything is written.\n",
	.tail = "\n"
		"Exit status: 0 imported; 1 failed (bad file, existing step, I/O error); 2 usage error;\n"
		"3 the store is busy (another writer holds its lock).\n"
		"\n"
		"Example:\n"
		"  ckptctl import /mnt/nvme/ckpt --step 1000 model.safetensors\n"
		"  ckptctl import /mnt/nvme/ckpt --step 2000 --tag release model.safetensors\n",
};

static const struct ck_pos import_pos = {2, 2, false, {"expected STORE and FILE",
						      "expected STORE and FILE"}};

/* ckpt_save_commit() with a progress line (bytes hashed of the tensors' total) while the save
 * runs in the background; the plain commit when no line is shown. */
static int commit_progress(ckpt_save *save, uint64_t total, uint64_t step, bool enable,
			   ckpt_stats *st)
{
	struct progress bar;
	char label[64];
	snprintf(label, sizeof label, "import step %llu", (unsigned long long)step);
	progress_start(&bar, label, total, enable);
	if (!bar.on)
		return ckpt_save_commit(save, st);
	int r = ckpt_save_submit(save);
	if (r) {
		ckpt_save_abort(save);
		return r;
	}
	while (!ckpt_save_poll(save)) {
		uint64_t done;
		if (!ckpt_save_progress(save, &done))
			progress_update(&bar, done);
		/* A display refresh, not synchronization: wait() below decides. */
		nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
	}
	r = ckpt_save_wait(save, st);
	progress_end(&bar);
	return r;
}

static void print_stats_json(const ckpt_stats *s, const char *file)
{
	struct jw w;
	jw_init(&w, stdout, true);
	jw_obj_begin(&w);
	jw_key(&w, "step"); jw_u64(&w, s->step);
	jw_key(&w, "file"); jw_str(&w, file);
	jw_key(&w, "tensors"); jw_u64(&w, s->tensors);
	jw_key(&w, "logical_bytes"); jw_u64(&w, s->logical_bytes);
	jw_key(&w, "bytes_new"); jw_u64(&w, s->bytes_written);
	jw_key(&w, "stored_bytes"); jw_u64(&w, s->bytes_stored);
	jw_key(&w, "bytes_hashed"); jw_u64(&w, s->bytes_hashed);
	jw_key(&w, "chunks"); jw_u64(&w, s->chunks);
	jw_key(&w, "chunks_new"); jw_u64(&w, s->chunks_new);
	jw_key(&w, "chunks_reused"); jw_u64(&w, s->chunks_reused);
	ck_json_aliases(&w, s->bytes_written, s->chunks_new, (int64_t)s->chunks_reused);
	jw_key(&w, "seconds"); jw_dbl(&w, s->seconds);
	jw_key(&w, "snapshot_seconds"); jw_dbl(&w, s->snapshot_seconds);
	jw_key(&w, "persist_seconds"); jw_dbl(&w, s->persist_seconds);
	jw_key(&w, "wait_seconds"); jw_dbl(&w, s->wait_seconds);
	jw_key(&w, "pool_bytes"); jw_u64(&w, s->pool_bytes);
	jw_key(&w, "pool_peak"); jw_u64(&w, s->pool_peak);
	jw_key(&w, "threads"); jw_u64(&w, s->threads);
	jw_key(&w, "data_dirs"); jw_u64(&w, s->data_dirs);
	jw_key(&w, "direct_io"); jw_bool(&w, s->direct_io);
	jw_key(&w, "engine"); jw_str(&w, s->engine);
	jw_obj_end(&w);
	jw_finish(&w);
}

/* Opens FILE and validates it completely, before the store is created or locked, and notes its
 * state to tell later whether it changed. Returns 0, or the exit status (reported). */
static int open_input(const char *cmd, const char *file, struct st_file *sf, struct stat *before)
{
	char err[6144];
	if (st_open(file, sf, err, sizeof err)) {
		cli_err("%s: %s", cmd, err);
		return EXIT_FAIL;
	}
	for (size_t k = 0; k < sf->h.ntensors; k++) {
		size_t l = strlen(sf->h.tensors[k].name);
		if (l == 0 || l > 65535) {
			char q[160];
			cli_err("%s: %s: tensor name %s: libckpt takes names of 1 to 65535 bytes",
				cmd, file, st_quote(sf->h.tensors[k].name, q, sizeof q, 100));
			st_close(sf);
			return EXIT_FAIL;
		}
	}
	if (fstat(sf->fd, before)) {
		cli_err("%s: %s: %s", cmd, file, strerror(errno));
		st_close(sf);
		return EXIT_FAIL;
	}
	watch_mapping(cmd, file, sf);
	return 0;
}

/* The store options of the import: *out (freed by the caller, even on error) creates the store
 * when it is missing and takes the options given. Returns 0, or the exit status (reported). */
static int import_options(const char *cmd, const struct import_args *opt, ckpt_options **out)
{
	int compress = opt->compress < 0 ? -1 : opt->compress ? CKPT_COMPRESS_ZSTD
							      : CKPT_COMPRESS_NONE;
	ckpt_options *opts = *out = ckpt_options_create();
	if (!opts) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	ckpt_options_set(opts, CKPT_OPT_CREATE, 1);
	/* The tensors are already in (mapped) memory that stays unchanged: a small staging pool that
	 * the save streams through keeps the import from copying the file into anonymous memory. */
	ckpt_options_set(opts, CKPT_OPT_POOL_SIZE, IMPORT_POOL_SIZE);
	if ((opt->chunk && ckpt_options_set(opts, CKPT_OPT_CHUNK_SIZE, (int64_t)opt->chunk) < 0) ||
	    (compress >= 0 && ckpt_options_set(opts, CKPT_OPT_COMPRESS, compress) < 0) ||
	    (opt->level && ckpt_options_set(opts, CKPT_OPT_ZSTD_LEVEL, (int64_t)opt->level) < 0) ||
	    (opt->overwrite && ckpt_options_set(opts, CKPT_OPT_OVERWRITE, 1) < 0))
		return cli_usage_err(cmd, "option rejected by libckpt: %s", ckpt_errmsg());
	return 0;
}

/* ckpt_save_begin(), with the messages of an existing step and of a busy store. Returns 0, or
 * the exit status (reported). */
static int begin_save(const char *cmd, ckpt_store *store, uint64_t step, const char *store_path,
		      ckpt_save **save)
{
	int r = ckpt_save_begin(store, step, NULL, save);
	if (r >= 0)
		return 0;
	if (r == -CKPT_E_EXISTS && ckpt_errmsg()[0])
		cli_err("%s: %s; use --overwrite to replace it", cmd, ckpt_errmsg());
	else if (r == -CKPT_E_EXISTS)
		cli_err("%s: step %llu already exists in %s; use --overwrite to replace it", cmd,
			(unsigned long long)step, store_path);
	else if (r == -CKPT_E_BUSY && !ckpt_errmsg()[0])
		cli_err("%s: store %s is busy: another process is writing to it", cmd, store_path);
	else
		ck_fail(cmd, r, "cannot begin the checkpoint");
	return ck_exit_status(r);
}

/* Adds the tags of a "ckpt.tags" metadata value (joined by ','). Returns 0 or the error. */
static int add_tag_list(ckpt_save *save, const char *list)
{
	int r = 0;
	for (const char *p = list; !r && *p;) {
		size_t n = strcspn(p, ",");
		char t[CKPT_TAG_MAX + 2];
		snprintf(t, sizeof t, "%.*s", (int)(n < sizeof t - 1 ? n : sizeof t - 1), p);
		r = ckpt_save_add_tag(save, t);
		p += n + (p[n] == ',');
	}
	return r;
}

/* Hands the file's tensors (in place, in the mapping), metadata and tags (its own, then tags[0..n)
 * of --tag) to the save. Returns 0, or the exit status (reported). */
static int add_contents(const char *cmd, ckpt_save *save, const struct st_file *sf,
			const char *const *tags, size_t ntags)
{
	static const char empty[1];
	int r;
	for (size_t k = 0; k < sf->h.ntensors; k++) {
		const struct st_tensor *t = &sf->h.tensors[k];
		/* An empty tensor may sit at the very end of the mapping: give it a valid pointer. */
		const void *data = t->end > t->begin ? (const void *)(sf->data + t->begin) : empty;
		ckpt_tensor ct = {.struct_size = sizeof ct, .name = t->name, .dtype = t->dtype,
				  .ndim = t->ndim, .shape = t->shape, .mem = CKPT_MEM_HOST, .data = data};
		r = ckpt_save_add(save, &ct);
		if (r < 0)
			return ck_fail(cmd, r, "cannot add a tensor");
	}
	for (size_t k = 0; k < sf->h.nmeta; k++) {
		const char *key = sf->h.meta[k].key, *val = sf->h.meta[k].value;
		bool tag = !strcmp(key, "ckpt.tags");
		r = tag ? add_tag_list(save, val) : ckpt_save_set_meta(save, key, val);
		if (r < 0)
			return ck_fail(cmd, r, tag ? "the file's metadata \"ckpt.tags\"" :
						     "cannot set metadata");
	}
	for (size_t k = 0; k < ntags; k++)
		if ((r = ckpt_save_add_tag(save, tags[k])) < 0)
			return ck_fail(cmd, r, "cannot tag the checkpoint");
	return 0;
}

/* The bytes of all the tensors: the total of the progress line. */
static uint64_t tensor_bytes(const struct st_file *sf)
{
	uint64_t total = 0;
	for (size_t k = 0; k < sf->h.ntensors; k++)
		total += sf->h.tensors[k].end - sf->h.tensors[k].begin;
	return total;
}

static void print_result(const ckpt_stats *st, const char *file, const struct import_args *opt)
{
	if (opt->json) {
		print_stats_json(st, file);
	} else if (!opt->quiet) {
		char a[32], b[32];
		printf("imported step %llu: %llu tensors, %s logical, %s new, %.3f s\n",
		       (unsigned long long)st->step, (unsigned long long)st->tensors,
		       cli_fmt_iec(st->logical_bytes, a, sizeof a),
		       cli_fmt_iec(st->bytes_written, b, sizeof b), st->seconds);
	}
}

static int cmd_import(int argc, char **argv)
{
	const char *cmd = "import";
	/* Unset: step CKPT_STEP_LATEST (the table refuses it), chunk and level 0, compress -1. */
	struct import_args opt = {.step = CKPT_STEP_LATEST, .compress = -1};
	int rc = ck_parse(&ck_cmd_import, &opt, &argc, &argv, &import_pos);
	if (rc < 0 && opt.step == CKPT_STEP_LATEST)
		rc = cli_usage_err(cmd, "--step N is required");
	if (rc >= 0) {
		free(opt.tags);
		return rc;
	}
	const char *store_path = argv[1], *file = argv[2];
	struct st_file sf;
	struct stat before;
	if ((rc = open_input(cmd, file, &sf, &before))) {
		free(opt.tags);
		return rc;
	}

	ckpt_store *store = NULL;
	ckpt_save *save = NULL;
	ckpt_options *opts = NULL;
	ckpt_stats st = {.struct_size = sizeof st};
	if ((rc = import_options(cmd, &opt, &opts)) ||
	    (rc = ck_open_store(cmd, store_path, false, opts, &store)) ||
	    (rc = begin_save(cmd, store, opt.step, store_path, &save)) ||
	    (rc = add_contents(cmd, save, &sf, opt.tags, opt.ntags)))
		goto out;
	int r = commit_progress(save, tensor_bytes(&sf), opt.step,
				!opt.quiet && !opt.json && !opt.no_progress, &st);
	save = NULL; /* freed by commit in every case */
	if (r < 0) {
		rc = ck_fail(cmd, r, "cannot commit the checkpoint");
	} else if (input_changed(&sf, &before)) {
		cli_err("%s: %s changed while it was being imported: step %llu in %s may hold a mix "
			"of old and new bytes; import it again with --overwrite", cmd, file,
			(unsigned long long)opt.step, store_path);
		rc = EXIT_FAIL;
	} else {
		print_result(&st, file, &opt);
		rc = EXIT_OK;
	}
out:
	ckpt_save_abort(save);
	ckpt_store_close(store);
	ckpt_options_free(opts);
	st_close(&sf);
	free(opt.tags);
	return rc;
}
