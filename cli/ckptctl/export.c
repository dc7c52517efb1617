/* ckptctl export: write a checkpoint as a safetensors file, atomically (temporary file, fsync,
 * rename, directory fsync), or to standard output. The bytes are streamed in blocks by several
 * threads (xfer.c); a multi-rank checkpoint is written consolidated: its global tensors whole. */
#include "ckptctl.h"
#include "safetensors.h"
#include "xfer.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct export_args {
	const char *out, *select;
	bool quiet, json, no_progress;
};

static const struct cli_opt export_opts[] = {
	{CLI_OPT(CLI_STRING, "output", 'o', CLI_AT(struct export_args, out), "FILE",
	 "the file to write (required); '-' writes to standard output"),
	 .flags = CLI_REQUIRED, .complete = "@file:safetensors"},
	{CLI_OPT(CLI_STRING, "select", 0, CLI_AT(struct export_args, select), "SUBTREE",
	 "only the tensors under SUBTREE, a dotted prefix of whole\n"
	 "components of their names (such as 'model' or 'model.layers.0'),\n"
	 "named relative to it ('conv1.weight'), without the Python\n"
	 "binding's metadata: what load_state_dict() and Hugging Face\n"
	 "tools take"),
	 .complete_fn = ck_complete_select},
	{CLI_OPT(CLI_FLAG, "quiet", 'q', CLI_AT(struct export_args, quiet), NULL,
	 "print nothing on success")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct export_args, json), NULL,
	 "print step, file, tensors and bytes as a JSON object (needs a\n"
	 "FILE, not '-')")},
	{CLI_OPT(CLI_FLAG, "no-progress", 0, CLI_AT(struct export_args, no_progress), NULL,
	 "no progress line (it is shown, tensor by tensor, only when\n"
	 "standard error is a terminal, and not with --quiet or --json)")},
	CLI_OPT_END,
};

static int cmd_export(int argc, char **argv);

const struct cli_cmd ck_cmd_export = {
	.name = "export", .fn = cmd_export, .help = "write a checkpoint as a safetensors file",
	.args = "STORE [STEP]", .opts = export_opts,
	.desc = "Write the checkpoint of STEP (a number or 'latest'; default latest) as a safetensors file:\n"
		"the tensors in the checkpoint's order with contiguous data, the checkpoint's metadata in\n"
		"\"__metadata__\". Every chunk is verified as it is read. FILE is written under a temporary\n"
		"name, synced and renamed: it is never left half-written.\n"
		"A multi-rank checkpoint is exported consolidated: each global tensor whole, in its global\n"
		"shape, assembled from the shards (as PyTorch DCP's dcp_to_torch_save does).\n",
	.tail = "\n"
		"Exit status: 0 written; 1 failed (damaged data, I/O error); 2 usage error; 4 no such\n"
		"store or step.\n"
		"\n"
		"Example:\n"
		"  ckptctl export /mnt/nvme/ckpt latest -o model.safetensors --select model\n",
};

static const struct ck_pos export_pos = {1, 2, true, {"expected STORE"}};

/* The temporary file to remove if a signal ends the export. */
static char *tmp_path;

static void on_signal(int sig)
{
	if (tmp_path)
		unlink(tmp_path);
	signal(sig, SIG_DFL);
	raise(sig);
}

static int fsync_dir_of(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return -1;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd < 0)
		return -1;
	int r = fsync(fd);
	close(fd);
	return r;
}

/* Metadata keys of the multi-rank layout (docs/format.md, version 2): they describe the shards,
 * which a consolidated file no longer has. */
#define DIST_META_PREFIX "ckpt.dist."

/* One export. A multi-rank checkpoint is consolidated: its global tensors are
 * written whole, each assembled from the shards that hold it (as DCP's dcp_to_torch_save). */
struct export {
	const char *cmd;
	ckpt_store *store;
	ckpt_reader *rd;           /* the tensors as saved */
	ckpt_reader *dr;           /* consolidated export only: the global tensors */
	ckpt_info info;
	size_t nt, nm, nsel;
	struct st_out_tensor *ts;
	size_t *ridx;              /* per output tensor: its index in rd, or in dr when consolidated */
	long *direct;              /* per output tensor: its index in rd, or -1: from pieces */
	char **sel_names;
	const char **keys, **vals;
};

/* A reading context of one export thread: its own store handle (NULL for thread 0, which uses
 * the caller's) and readers, since a store and its readers serve one thread at a time. The
 * others are opened by their thread at its first read (ctx_read), in parallel, so that thread 0
 * reads its first block while they open: each open reads the manifest (a few ms here), and 15
 * of them in sequence delay the first read by as long as a fast array takes to move a GiB. */
struct xctx {
	ckpt_store *store;
	ckpt_reader *rd;
	ckpt_reader *dr;
	const struct export *e;
	const char *path;          /* the store, for a context that opens at its first read */
	int open_rc;               /* the failed open's code: its later reads fail the same way */
};

/* Reads the box off, len (size bytes) of global tensor g into dst. */
static int read_box(ckpt_reader *dr, size_t g, const uint64_t *off, const uint64_t *len,
		    uint8_t *dst, uint64_t size)
{
	ckpt_region b = {.struct_size = sizeof b, .offsets = off, .lengths = len};
	return ckpt_reader_read(dr, g, &b, CKPT_MEM_HOST, dst, size);
}

/* Restores elements [lo, hi) (row-major indices in the sub-array of dimensions d..nd-1, whose
 * dimensions before d are fixed in off) of global tensor g into dst, as a few boxes: at most a
 * partial row, a block of whole rows and a partial row per dimension. */
static int read_elems(ckpt_reader *dr, size_t g, const struct st_out_tensor *t,
		      uint64_t *off, uint64_t *len, unsigned d, uint64_t lo, uint64_t hi,
		      uint8_t *dst)
{
	uint64_t es = ckpt_dtype_size(t->dtype), inner = 1;
	unsigned nd = t->ndim;
	if (lo >= hi)
		return 0;
	if (nd == 0)
		return read_box(dr, g, off, len, dst, es);
	for (unsigned i = d + 1; i < nd; i++)
		inner *= t->shape[i];
	if (d == nd - 1) {
		off[d] = lo, len[d] = hi - lo;
		return read_box(dr, g, off, len, dst, (hi - lo) * es);
	}
	uint64_t ia = lo / inner, ib = hi / inner;
	off[d] = ia, len[d] = 1;
	if (ia == ib)
		return read_elems(dr, g, t, off, len, d + 1, lo - ia * inner, hi - ia * inner, dst);
	int r = 0;
	if (lo % inner) {
		r = read_elems(dr, g, t, off, len, d + 1, lo % inner, inner, dst);
		dst += (inner - lo % inner) * es;
		ia++;
	}
	if (!r && ib > ia) {
		off[d] = ia, len[d] = ib - ia;
		for (unsigned i = d + 1; i < nd; i++)
			off[i] = 0, len[i] = t->shape[i];
		r = read_box(dr, g, off, len, dst, (ib - ia) * inner * es);
		dst += (ib - ia) * inner * es;
	}
	if (!r && hi % inner) {
		off[d] = ib, len[d] = 1;
		r = read_elems(dr, g, t, off, len, d + 1, 0, hi % inner, dst);
	}
	return r;
}

/* Bytes [a, b) of global tensor g: a block boundary may cut an element, whose bytes then come
 * through a one-element buffer. */
static int read_global(ckpt_reader *dr, size_t g, const struct st_out_tensor *t,
		       uint64_t a, uint8_t *dst, uint64_t n)
{
	uint64_t es = ckpt_dtype_size(t->dtype), b = a + n, off[CKPT_MAX_DIMS], len[CKPT_MAX_DIMS];
	uint8_t one[16];
	int r;
	if (a / es == (b - 1) / es && (a % es || b % es)) {
		if ((r = read_elems(dr, g, t, off, len, 0, a / es, a / es + 1, one)))
			return r;
		memcpy(dst, one + a % es, (size_t)n);
		return 0;
	}
	if (a % es) {
		if ((r = read_elems(dr, g, t, off, len, 0, a / es, a / es + 1, one)))
			return r;
		memcpy(dst, one + a % es, (size_t)(es - a % es));
		dst += es - a % es;
	}
	if ((r = read_elems(dr, g, t, off, len, 0, (a + es - 1) / es, b / es, dst)))
		return r;
	dst += (b / es - (a + es - 1) / es) * es;
	if (b % es) {
		if ((r = read_elems(dr, g, t, off, len, 0, b / es, b / es + 1, one)))
			return r;
		memcpy(dst, one, (size_t)(b % es));
	}
	return 0;
}

/* Opens the store and readers of context c on the checkpoint already open in e (its resolved
 * step: a checkpoint committed meanwhile does not change what is exported). Returns 0 or a
 * negative CKPT_E_* code with ckpt_errmsg() set on the calling thread. */
static int ctx_open_one(struct xctx *c)
{
	ckpt_options *o = ckpt_options_create();
	int r = o ? ckpt_options_set(o, CKPT_OPT_READ_ONLY, 1) : -CKPT_E_NOMEM;
	if (r == 0)
		r = ckpt_store_open(c->path, o, &c->store);
	ckpt_options_free(o);
	if (r == 0)
		r = ckpt_reader_open(c->store, c->e->info.step, CKPT_READ_AS_SAVED, &c->rd);
	if (r == 0 && c->e->dr)
		r = ckpt_reader_open(c->store, c->e->info.step, 0, &c->dr);
	return r;
}

/* Elements [lo, hi) of tensor i as saved into dst (hi > lo: a count of 0 would be all). */
static int read_saved(ckpt_reader *rd, size_t i, uint64_t lo, uint64_t hi, uint64_t es,
		      uint8_t *dst)
{
	ckpt_region g = {.struct_size = sizeof g, .offset = lo, .count = hi - lo};
	return ckpt_reader_read(rd, i, &g, CKPT_MEM_HOST, dst, (hi - lo) * es);
}

/* Bytes [a, a + n) of tensor i as saved: its whole elements straight into dst, an element a
 * block boundary cuts through a one-element buffer. */
static int read_direct(ckpt_reader *rd, size_t i, const struct st_out_tensor *t, uint64_t a,
		       uint8_t *dst, uint64_t n)
{
	uint64_t es = ckpt_dtype_size(t->dtype), b = a + n, lo = (a + es - 1) / es, hi = b / es;
	uint8_t one[16];
	int r;
	if (!n)
		return 0;
	if (a / es == (b - 1) / es && (a % es || b % es)) {
		if ((r = read_saved(rd, i, a / es, a / es + 1, es, one)))
			return r;
		memcpy(dst, one + a % es, (size_t)n);
		return 0;
	}
	if (a % es) {
		if ((r = read_saved(rd, i, a / es, a / es + 1, es, one)))
			return r;
		memcpy(dst, one + a % es, (size_t)(es - a % es));
		dst += es - a % es;
	}
	if (hi > lo && (r = read_saved(rd, i, lo, hi, es, dst)))
		return r;
	dst += (hi - lo) * es;
	if (b % es) {
		if ((r = read_saved(rd, i, b / es, b / es + 1, es, one)))
			return r;
		memcpy(dst, one, (size_t)(b % es));
	}
	return 0;
}

static int ctx_read(void *p, size_t k, uint64_t off, void *dst, uint64_t len)
{
	struct xctx *c = p;
	const struct export *e = c->e;
	if (!c->rd && !c->open_rc)
		c->open_rc = ctx_open_one(c);
	if (c->open_rc)
		return c->open_rc;
	if (e->direct[k] >= 0)
		return read_direct(c->rd, (size_t)e->direct[k], &e->ts[k], off, dst, len);
	return read_global(c->dr, e->ridx[k], &e->ts[k], off, dst, len);
}

static void ctx_close(struct xctx *c, unsigned n)
{
	for (unsigned t = 1; t < n; t++) {
		ckpt_reader_close(c[t].dr);
		ckpt_reader_close(c[t].rd);
		ckpt_store_close(c[t].store);
	}
	free(c);
}

/* n reading contexts: thread 0's on the checkpoint open in e, the others opened by their own
 * thread at its first read. Returns NULL, reported, when out of memory. */
static struct xctx *ctx_open(const struct export *e, const char *path, unsigned n)
{
	struct xctx *c = calloc(n, sizeof *c);
	if (!c) {
		cli_err("%s: out of memory", e->cmd);
		return NULL;
	}
	c[0] = (struct xctx){NULL, e->rd, e->dr, e, path, 0};
	for (unsigned t = 1; t < n; t++)
		c[t] = (struct xctx){.e = e, .path = path};
	return c;
}

/* Fills e->ts (the output tensors, in the checkpoint's order), e->ridx and e->direct from the
 * reader, or from the global tensors when consolidating. Returns 0 or an exit status, reported. */
static int list_tensors(struct export *e)
{
	int r;
	e->nt = ckpt_reader_tensor_count(e->dr ? e->dr : e->rd);
	e->ts = calloc(e->nt ? e->nt : 1, sizeof *e->ts);
	e->ridx = calloc(e->nt ? e->nt : 1, sizeof *e->ridx);
	e->direct = calloc(e->nt ? e->nt : 1, sizeof *e->direct);
	if (!e->ts || !e->ridx || !e->direct) {
		cli_err("%s: out of memory", e->cmd);
		return EXIT_FAIL;
	}
	for (size_t k = 0; k < e->nt; k++) {
		ckpt_tensor_info ti = {.struct_size = sizeof ti};
		r = ckpt_reader_tensor(e->dr ? e->dr : e->rd, k, &ti);
		if (r < 0)
			return ck_fail(e->cmd, r, "reading the tensor list");
		if (!strcmp(ti.name, "__metadata__")) {
			cli_err("%s: step %llu has a tensor named \"__metadata__\", which safetensors "
				"reserves", e->cmd, (unsigned long long)e->info.step);
			return EXIT_FAIL;
		}
		e->ts[k] = (struct st_out_tensor){ti.name, ti.dtype, ti.ndim, ti.shape, ti.nbytes};
		e->ridx[k] = k;
		/* A global tensor of one piece saved whole (replicated) is a tensor as saved:
		 * read straight from it; a sharded one (pieces of ranks) is not. */
		e->direct[k] = (long)k;
		if (e->dr) {
			ckpt_shard sh = {.struct_size = sizeof sh};
			e->direct[k] = ti.shards == 1 && !ckpt_reader_shard(e->dr, k, 0, &sh) &&
				       sh.rank < 0 ? (long)sh.tensor : -1;
		}
	}
	return 0;
}

/* The metadata to write: the checkpoint's, without the binding's entry under --select and
 * without the shard layout when consolidating. Under --select (a model for another tool) it
 * also says "format": "pt" unless the checkpoint has a "format" of its own, as
 * safetensors.torch.save_file and transformers' save_pretrained write it: transformers 4.x
 * refuses a file without it. Returns 0 or an exit status, reported. */
static int list_meta(struct export *e, bool select)
{
	size_t nm = ckpt_reader_meta_count(e->rd), n = 0;
	e->keys = calloc(nm + 1, sizeof *e->keys);
	e->vals = calloc(nm + 1, sizeof *e->vals);
	if (!e->keys || !e->vals) {
		cli_err("%s: out of memory", e->cmd);
		return EXIT_FAIL;
	}
	for (size_t k = 0; k < nm; k++) {
		int r = ckpt_reader_meta(e->rd, k, &e->keys[n], &e->vals[n]);
		if (r < 0)
			return ck_fail(e->cmd, r, "reading the metadata");
		if (!e->dr || strncmp(e->keys[n], DIST_META_PREFIX, strlen(DIST_META_PREFIX)))
			n++;
	}
	e->nm = select ? ck_drop_binding_meta(e->keys, e->vals, n) : n;
	bool has_format = false;
	for (size_t k = 0; k < e->nm; k++)
		has_format |= !strcmp(e->keys[k], "format");
	if (select && !has_format) {
		e->keys[e->nm] = "format";
		e->vals[e->nm++] = "pt";
	}
	return 0;
}

/* Opens the checkpoint of step: consolidated when it is a multi-rank checkpoint. Returns 0 or
 * an exit status, reported. */
static int open_checkpoint(struct export *e, uint64_t step)
{
	int r = ckpt_reader_open(e->store, step, CKPT_READ_AS_SAVED, &e->rd);
	if (r < 0) {
		char what[64];
		if (step == CKPT_STEP_LATEST)
			snprintf(what, sizeof what, "no checkpoint");
		else
			snprintf(what, sizeof what, "step %llu", (unsigned long long)step);
		return ck_fail(e->cmd, r, what);
	}
	e->info.struct_size = sizeof e->info;
	ckpt_reader_info(e->rd, &e->info);
	/* Also for a world of one rank: its sharded tensors are pieces too. */
	r = ckpt_reader_open(e->store, e->info.step, 0, &e->dr);
	if (r < 0)
		return ck_fail(e->cmd, r, "reading the shard table");
	if (!ck_dist_multi(e->dr)) {
		ckpt_reader_close(e->dr);
		e->dr = NULL;
	}
	return 0;
}

/* Makes the temporary file durable under its final name. Returns 0 or -1, reported. */
static int commit_file(const char *cmd, int *fd, const char *tmp, const char *out)
{
	if (fsync(*fd)) {
		cli_err("%s: fsync %s: %s", cmd, tmp, strerror(errno));
		return -1;
	}
	int cr = close(*fd);
	*fd = -1;
	if (cr) {
		cli_err("%s: close %s: %s", cmd, tmp, strerror(errno));
		return -1;
	}
	if (rename(tmp, out)) {
		cli_err("%s: rename %s to %s: %s", cmd, tmp, out, strerror(errno));
		return -1;
	}
	tmp_path = NULL;
	if (fsync_dir_of(out)) {
		cli_err("%s: fsync the directory of %s: %s", cmd, out, strerror(errno));
		return -1;
	}
	return 0;
}

static void print_result(const struct export *e, const char *out, const char *select, bool json,
			 bool quiet, uint64_t total, uint64_t file_bytes)
{
	if (json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_obj_begin(&w);
		jw_key(&w, "step"); jw_u64(&w, e->info.step);
		jw_key(&w, "file"); jw_str(&w, out);
		jw_key(&w, "select");
		if (select)
			jw_str(&w, select);
		else
			jw_null(&w);
		jw_key(&w, "tensors"); jw_u64(&w, e->nt);
		jw_key(&w, "tensor_bytes"); jw_u64(&w, total);
		jw_key(&w, "file_bytes"); jw_u64(&w, file_bytes);
		jw_obj_end(&w);
		jw_finish(&w);
	} else if (!quiet) {
		char a[32];
		printf("exported step %llu: %zu tensors, %s to %s\n",
		       (unsigned long long)e->info.step, e->nt, cli_fmt_iec(total, a, sizeof a), out);
	}
}

static void export_free(struct export *e)
{
	for (size_t k = 0; e->sel_names && k < e->nsel; k++)
		free(e->sel_names[k]);
	free(e->sel_names);
	free(e->ridx);
	free(e->direct);
	free(e->ts);
	free(e->keys);
	free(e->vals);
	ckpt_reader_close(e->dr);
	ckpt_reader_close(e->rd);
	ckpt_store_close(e->store);
}

/* Creates the temporary file beside out (never following a symbolic link, never reusing a
 * file). Returns the descriptor, or -1, reported. */
static int create_tmp(const char *cmd, const char *out, char *tmp, size_t len)
{
	snprintf(tmp, len, "%s.tmp-%ld", out, (long)getpid());
	tmp_path = tmp;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0) {
		tmp_path = NULL;
		cli_err("%s: cannot create %s: %s", cmd, tmp, strerror(errno));
	}
	return fd;
}

/* Test builds only ($B/tests/hooks/ckptctl): CKPTCTL_TEST_READ_STATS=FILE writes there the
 * bytes the export read from pack files (every reading thread's), so that a test sees a chunk
 * read twice. */
#ifdef CKPT_TEST_HOOKS
static void test_read_stats(const struct xctx *c, unsigned n)
{
	const char *path = getenv("CKPTCTL_TEST_READ_STATS");
	FILE *f = path ? fopen(path, "w") : NULL;
	uint64_t sum = 0;
	for (unsigned t = 0; f && t < n; t++) {
		ckpt_stats st = {.struct_size = sizeof st};
		if (c[t].rd) {
			ckpt_reader_stats(c[t].rd, &st);
			sum += st.bytes_read;
		}
	}
	if (f) {
		fprintf(f, "%llu\n", (unsigned long long)sum);
		fclose(f);
	}
}
#else
static inline void test_read_stats(const struct xctx *c, unsigned n) { (void)c, (void)n; }
#endif

/* Streams header and tensors into fd (xfer.c) and reports a failure. Returns 0 or an exit
 * status. */
static int write_tensors(const struct export *e, const char *path, int fd, bool seekable,
			 const uint8_t *hdr, size_t hlen, uint64_t total, const char *dest,
			 struct progress *bar)
{
	uint64_t *nb = malloc((e->nt ? e->nt : 1) * sizeof *nb);
	if (!nb) {
		cli_err("%s: out of memory", e->cmd);
		return EXIT_FAIL;
	}
	uint64_t *grain = calloc(e->nt ? e->nt : 1, sizeof *grain);
	if (!grain) {
		free(nb);
		cli_err("%s: out of memory", e->cmd);
		return EXIT_FAIL;
	}
	for (size_t k = 0; k < e->nt; k++) {
		nb[k] = e->ts[k].nbytes;
		/* Blocks cut a tensor read from the manifest between its chunks (chunk 0 has the
		 * tensor's chunk size, or the whole tensor): a cut chunk would be read twice. */
		ckpt_chunk_info ci = {.struct_size = sizeof ci};
		if (e->direct[k] >= 0 && !ckpt_reader_chunk(e->rd, (size_t)e->direct[k], 0, &ci))
			grain[k] = ci.raw_bytes;
	}
	unsigned n = seekable ? xfer_threads(hlen + total) : 1;
	struct xctx *c = ctx_open(e, path, n);
	int rc = EXIT_FAIL;
	if (c) {
		void *ctx[XFER_MAX_THREADS];
		for (unsigned t = 0; t < n; t++)
			ctx[t] = &c[t];
		struct xfer_src src = {ctx_read, ctx, n, grain};
		char err[4096];
		int r = xfer_export(fd, seekable, hdr, hlen, nb, e->nt, &src, bar, err, sizeof err);
		if (r < 0)
			cli_err("%s: %s", e->cmd, err); /* the library's message names the store file */
		else if (r > 0)
			cli_err("%s: %s: %s", e->cmd, dest, err);
		rc = r < 0 ? ck_exit_status(r) : r ? EXIT_FAIL : EXIT_OK;
		test_read_stats(c, n);
		ctx_close(c, n);
	}
	free(grain);
	free(nb);
	return rc;
}

/* The export proper, after the options were checked. */
static int export_run(struct export *e, const char *path, uint64_t step, const char *out,
		      const char *select, bool quiet, bool json, bool no_progress)
{
	bool to_stdout = !strcmp(out, "-");
	int rc, fd = -1;
	uint8_t *hdr = NULL;
	char tmp[4200], label[64];
	struct progress bar = {0};

	if ((rc = ck_open_store(e->cmd, path, true, NULL, &e->store)))
		return rc;
	if ((rc = open_checkpoint(e, step)) || (rc = list_tensors(e)))
		return rc;
	if (select) {
		e->nsel = e->nt;
		if ((rc = ck_select(e->cmd, select, ck_names_escaped(e->rd), e->ts, e->ridx, &e->nt,
				       &e->sel_names)))
			return rc;
		/* ck_select keeps the order (ridx[k] >= k): direct follows its tensor in place. */
		for (size_t k = 0; k < e->nt; k++)
			e->direct[k] = e->direct[e->ridx[k]];
	}
	if ((rc = list_meta(e, select != NULL)))
		return rc;
	uint64_t total = 0;
	for (size_t k = 0; k < e->nt; k++)
		total += e->ts[k].nbytes;
	size_t hlen;
	hdr = st_build_header(e->ts, e->nt, e->keys, e->vals, e->nm, &hlen);
	if (!hdr) {
		cli_err("%s: cannot build the safetensors header (out of memory or unknown dtype)",
			e->cmd);
		return EXIT_FAIL;
	}
	snprintf(label, sizeof label, "export step %llu", (unsigned long long)e->info.step);
	progress_start(&bar, label, total, !quiet && !json && !no_progress);
	rc = EXIT_FAIL;
	if (to_stdout)
		fd = STDOUT_FILENO;
	else if ((fd = create_tmp(e->cmd, out, tmp, sizeof tmp)) < 0)
		goto out;
	rc = write_tensors(e, path, fd, !to_stdout, hdr, hlen, total,
			   to_stdout ? "standard output" : tmp, &bar);
	progress_end(&bar);
	if (rc == EXIT_OK && !to_stdout) {
		rc = EXIT_FAIL;
		if (commit_file(e->cmd, &fd, tmp, out))
			goto out;
		print_result(e, out, select, json, quiet, total, hlen + total);
		rc = EXIT_OK;
	}
out:
	progress_end(&bar);
	if (fd >= 0 && fd != STDOUT_FILENO)
		close(fd);
	if (tmp_path) {
		unlink(tmp_path);
		tmp_path = NULL;
	}
	free(hdr);
	return rc;
}

static int cmd_export(int argc, char **argv)
{
	const char *cmd = "export";
	struct export_args opt = {0};
	int c = ck_parse(&ck_cmd_export, &opt, &argc, &argv, &export_pos);
	if (c >= 0)
		return c;
	const char *out = opt.out, *select = opt.select;
	bool quiet = opt.quiet, json = opt.json, no_progress = opt.no_progress;
	int npos = argc - 1;
	if (!out || !*out)
		return cli_usage_err(cmd, "-o FILE is required ('-' for standard output)");
	uint64_t step = CKPT_STEP_LATEST;
	if (npos == 2 && ck_parse_step(cmd, argv[2], &step))
		return EXIT_USAGE;
	bool to_stdout = !strcmp(out, "-");
	if (to_stdout && json)
		return cli_usage_err(cmd, "--json needs -o FILE: standard output carries the data");
	if (select && !*select)
		return cli_usage_err(cmd, "--select needs a SUBTREE such as 'model'");
	if (to_stdout && isatty(STDOUT_FILENO))
		return cli_usage_err(cmd, "refusing to write binary data to a terminal");

	struct export e = {.cmd = cmd};
	int rc = export_run(&e, argv[1], step, out, select, quiet, json, no_progress);
	export_free(&e);
	return rc;
}
