/* Multi-rank checkpoints (docs/format.md, "Format version 2") in list, show, verify and du: the
 * world size, the shard layout of every global tensor, the parts' verification and the rank
 * that wrote a damaged chunk. Each command calls in here with one line; a single-process
 * checkpoint prints nothing more, so its output is what it always was. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reserved key a multi-rank checkpoint's global manifest always has (docs/format.md). */
#define WORLD_KEY "ckpt.dist.world"
/* Pack ids of rank R lie in [(R + 1) << 22, (R + 2) << 22); lower ones are single-process. */
#define RANK_SHIFT 22

/* The most ranks a save accepts (DIST_MAX_RANKS, docs/format.md): a larger world is invalid. */
#define MAX_RANKS 1022

/* The world size w says, parsed as strictly as the library does (decimal digits only, 1 to
 * MAX_RANKS), so that list never shows a number the library would refuse; 0 when invalid. */
static unsigned parse_world(const char *w)
{
	unsigned n = 0;
	for (const char *p = w; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		n = n * 10 + (unsigned)(*p - '0');
		if (n > MAX_RANKS)
			return 0;
	}
	return n;
}

/* Whether step's manifest has WORLD_KEY (then it is a multi-rank checkpoint, whatever the
 * value); *world is its valid value or 0. An unreadable manifest has none. */
static bool world_meta(ckpt_store *store, uint64_t step, unsigned *world)
{
	ckpt_reader *rd;
	*world = 0;
	if (ckpt_reader_open(store, step, &rd))
		return false;
	const char *w = ckpt_reader_get_meta(rd, WORLD_KEY);
	if (w)
		*world = parse_world(w);
	ckpt_reader_close(rd);
	return w != NULL;
}

unsigned ck_dist_world(ckpt_store *store, uint64_t step)
{
	unsigned n;
	world_meta(store, step, &n);
	return n;
}

unsigned *ck_dist_list_worlds(ckpt_store *store, const ckpt_info *list, int n)
{
	unsigned *v = calloc((size_t)n + 1, sizeof *v);
	bool any = false;
	for (int k = 0; v && k < n; k++)
		if (!list[k].error)
			any |= (v[k] = ck_dist_world(store, list[k].step)) != 0;
	if (!any) {
		free(v);
		return NULL;
	}
	return v;
}

void ck_dist_list_col(const unsigned *worlds, int k)
{
	if (!worlds)
		return;
	if (k < 0)
		printf("  %5s", "RANKS");
	else if (worlds[k])
		printf("  %5u", worlds[k]);
	else
		printf("  %5s", "-");
}

void ck_dist_list_json(struct jw *w, const unsigned *worlds, int k)
{
	if (!worlds || !worlds[k])
		return;
	jw_key(w, "world_size");
	jw_u64(w, worlds[k]);
}

static void dims(struct jw *w, unsigned n, const uint64_t *v)
{
	jw_arr_begin(w);
	for (unsigned d = 0; d < n; d++)
		jw_u64(w, v[d]);
	jw_arr_end(w);
}

/* The part file of rank, relative to the store. */
static const char *part_name(uint64_t step, int rank, char *buf, size_t len)
{
	snprintf(buf, len, "parts/%020llu/%d.part", (unsigned long long)step, rank);
	return buf;
}

/* Opens the global view of step into *d when it is a multi-rank checkpoint (*d NULL otherwise);
 * returns 0, or the library's CKPT_E_* code when its layout cannot be read. */
static int try_open_dist(ckpt_store *store, uint64_t step, ckpt_dist_reader **d)
{
	unsigned world;
	*d = NULL;
	if (!world_meta(store, step, &world))
		return 0;
	int rc = ckpt_dist_reader_open(store, step, d);
	if (rc)
		*d = NULL;
	return rc;
}

static void warn_layout(uint64_t step)
{
	cli_err("warning: step %llu: cannot read its shard layout: %s", (unsigned long long)step,
		ckpt_errmsg());
}

/* Opens the global view of step when it is a multi-rank checkpoint; NULL otherwise. */
static ckpt_dist_reader *open_dist(ckpt_store *store, uint64_t step)
{
	ckpt_dist_reader *d;
	if (try_open_dist(store, step, &d))
		warn_layout(step);
	return d;
}

static void show_shard_text(const ckpt_dist_reader *d, size_t i, size_t j, uint64_t step)
{
	ckpt_dist_shard sh;
	char o[700], l[700], p[64];
	if (ckpt_dist_reader_shard(d, i, j, &sh))
		return;
	printf("          rank %-4d  offsets %-14s  lengths %-14s  %s\n", sh.rank,
	       ck_fmt_shape(sh.ndim, sh.offsets, o, sizeof o),
	       ck_fmt_shape(sh.ndim, sh.lengths, l, sizeof l), part_name(step, sh.rank, p, sizeof p));
}

void ck_dist_show_text(ckpt_store *store, uint64_t step)
{
	ckpt_dist_reader *d = open_dist(store, step);
	if (!d)
		return;
	char p[64];
	snprintf(p, sizeof p, "parts/%020llu/", (unsigned long long)step);
	printf("\nworld size: %u ranks (parts in %s)\n", ckpt_dist_reader_world_size(d), p);
	printf("\nGLOBAL TENSORS\n%-8s  %-16s  %10s  %-12s  %s\n", "DTYPE", "SHAPE", "SIZE", "LAYOUT",
	       "NAME");
	size_t ng = ckpt_dist_reader_tensor_count(d);
	for (size_t i = 0; i < ng; i++) {
		ckpt_tensor_info g;
		char sh[700], sz[32], q[1100], lay[32];
		if (ckpt_dist_reader_tensor(d, i, &g))
			continue;
		long ns = ckpt_dist_reader_shard_count(d, i);
		bool rep = ckpt_dist_reader_replicated(d, i) == 1;
		if (rep)
			snprintf(lay, sizeof lay, "replicated");
		else
			snprintf(lay, sizeof lay, "%ld shard%s", ns, ns == 1 ? "" : "s");
		const char *dt = ckpt_dtype_name(g.dtype);
		printf("%-8s  %-16s  %10s  %-12s  %s\n", dt ? dt : "?",
		       ck_fmt_shape(g.ndim, g.shape, sh, sizeof sh),
		       cli_fmt_iec(g.nbytes, sz, sizeof sz), lay, ck_name(g.name, q, sizeof q));
		for (long j = 0; !rep && j < ns; j++)
			show_shard_text(d, i, (size_t)j, step);
	}
	ckpt_dist_reader_close(d);
}

static void show_global_json(struct jw *w, const ckpt_dist_reader *d, size_t i, uint64_t step)
{
	ckpt_tensor_info g;
	if (ckpt_dist_reader_tensor(d, i, &g))
		return;
	const char *dt = ckpt_dtype_name(g.dtype);
	bool rep = ckpt_dist_reader_replicated(d, i) == 1;
	jw_obj_begin(w);
	jw_key(w, "name"); jw_str(w, g.name);
	jw_key(w, "dtype"); jw_str(w, dt ? dt : "?");
	jw_key(w, "shape"); dims(w, g.ndim, g.shape);
	jw_key(w, "nbytes"); jw_u64(w, g.nbytes);
	jw_key(w, "replicated"); jw_bool(w, rep);
	jw_key(w, "shards");
	jw_arr_begin(w);
	long ns = ckpt_dist_reader_shard_count(d, i);
	for (long j = 0; !rep && j < ns; j++) {
		ckpt_dist_shard sh;
		char p[64];
		if (ckpt_dist_reader_shard(d, i, (size_t)j, &sh))
			continue;
		jw_obj_begin(w);
		jw_key(w, "rank"); jw_i64(w, sh.rank);
		jw_key(w, "part"); jw_str(w, part_name(step, sh.rank, p, sizeof p));
		jw_key(w, "offsets"); dims(w, sh.ndim, sh.offsets);
		jw_key(w, "lengths"); dims(w, sh.ndim, sh.lengths);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	jw_obj_end(w);
}

void ck_dist_show_json(struct jw *w, ckpt_store *store, uint64_t step)
{
	ckpt_dist_reader *d = open_dist(store, step);
	if (!d)
		return;
	jw_key(w, "world_size"); jw_u64(w, ckpt_dist_reader_world_size(d));
	jw_key(w, "global_tensors");
	jw_arr_begin(w);
	size_t ng = ckpt_dist_reader_tensor_count(d);
	for (size_t i = 0; i < ng; i++)
		show_global_json(w, d, i, step);
	jw_arr_end(w);
	ckpt_dist_reader_close(d);
}

int ck_dist_pack_rank(const char *file)
{
	const char *b = file ? strrchr(file, '/') : NULL;
	b = b ? b + 1 : file;
	if (!b)
		return -1;
	char *end;
	unsigned long long id = strtoull(b, &end, 10);
	if (end == b || strcmp(end, ".pack") || (id >> RANK_SHIFT) == 0)
		return -1;
	return (int)((id >> RANK_SHIFT) - 1);
}

struct part_ctx {
	struct jw *w;
	long n;
};

/* A part's rank, from its file name R.part. */
static int part_rank(const char *file)
{
	const char *b = file ? strrchr(file, '/') : NULL;
	return b ? atoi(b + 1) : -1;
}

static void on_part(const ckpt_damage *dm, void *arg)
{
	struct part_ctx *c = arg;
	c->n++;
	if (c->w) {
		jw_obj_begin(c->w);
		jw_key(c->w, "part"); jw_str(c->w, dm->file ? dm->file : "");
		jw_key(c->w, "rank"); jw_i64(c->w, part_rank(dm->file));
		jw_key(c->w, "file"); jw_str(c->w, dm->file ? dm->file : "");
		jw_key(c->w, "error"); jw_str(c->w, ckpt_strerror(dm->error));
		jw_key(c->w, "message"); jw_str(c->w, dm->message ? dm->message : "");
		jw_obj_end(c->w);
		return;
	}
	/* The library's message starts "rank R: " and names the file. */
	const char *msg = dm->message ? dm->message : ckpt_strerror(dm->error);
	const char *colon = strstr(msg, ": ");
	if (!strncmp(msg, "rank ", 5) && colon)
		msg = colon + 2;
	printf("step %llu: DAMAGED part of rank %d: %s\n", (unsigned long long)dm->step,
	       part_rank(dm->file), msg);
}

/* A multi-rank checkpoint whose layout (world size, part records, shard tables) the library
 * refuses as corrupt: one damage entry for the whole checkpoint, in on_part's form. */
static void on_layout(uint64_t step, int rc, struct jw *w)
{
	const char *msg = ckpt_errmsg();
	if (!msg || !*msg)
		msg = ckpt_strerror(rc);
	if (!w) {
		printf("step %llu: DAMAGED multi-rank layout: %s\n", (unsigned long long)step, msg);
		return;
	}
	jw_obj_begin(w);
	jw_key(w, "part"); jw_str(w, "");
	jw_key(w, "rank"); jw_i64(w, -1);
	jw_key(w, "file"); jw_str(w, "");
	jw_key(w, "error"); jw_str(w, ckpt_strerror(rc));
	jw_key(w, "message"); jw_str(w, msg);
	jw_obj_end(w);
}

long ck_dist_verify_parts(ckpt_store *store, uint64_t step, struct jw *w)
{
	ckpt_dist_reader *d;
	int rc = try_open_dist(store, step, &d);
	if (rc == -CKPT_E_CORRUPT || rc == -CKPT_E_VERSION) {
		on_layout(step, rc, w);
		return 1;
	}
	if (rc)
		warn_layout(step);
	if (!d)
		return 0;
	struct part_ctx c = {.w = w};
	long n = ckpt_dist_reader_verify_parts(d, on_part, &c);
	if (n < 0)
		ck_fail("verify", (int)n, "cannot verify the parts");
	ckpt_dist_reader_close(d);
	return n;
}

void ck_dist_du_json(struct jw *w, const ckpt_du *du)
{
	jw_key(w, "parts"); jw_u64(w, du->parts);
	jw_key(w, "part_bytes"); jw_u64(w, du->part_bytes);
}

void ck_dist_du_text(const ckpt_du *du)
{
	char a[32];
	if (du->parts)
		printf("parts:            %llu files, %s (of multi-rank checkpoints)\n",
		       (unsigned long long)du->parts, cli_fmt_iec(du->part_bytes, a, sizeof a));
}
