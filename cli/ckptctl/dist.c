/* Multi-rank checkpoints (docs/format.md, "Format version 2") in list, show, verify, export and
 * du: the world size, the shard layout of every global tensor, the damaged parts and layouts
 * and the rank that wrote a damaged chunk, all through the global reader and ckpt_reader_verify
 * (the library knows the format's reserved metadata and pack ids; ckptctl does not). Each
 * command calls in here with one line; a single-process checkpoint prints nothing more, so its
 * output is what it always was. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ck_dist_multi(const ckpt_reader *g)
{
	if (ckpt_reader_world_size(g) > 1)
		return true;
	/* A world of one rank: its pieces name the rank; a single-process checkpoint's none. */
	size_t n = ckpt_reader_tensor_count(g);
	for (size_t i = 0; i < n; i++) {
		ckpt_tensor_info ti = {.struct_size = sizeof ti};
		if (ckpt_reader_tensor(g, i, &ti))
			continue;
		for (uint32_t j = 0; j < ti.shards; j++) {
			ckpt_shard sh = {.struct_size = sizeof sh};
			if (!ckpt_reader_shard(g, i, j, &sh) && sh.rank >= 0)
				return true;
		}
	}
	return false;
}

/* Opens the global tensors of step into *g when it is a multi-rank checkpoint (*g NULL
 * otherwise: a single-process checkpoint, or a manifest that does not read) and sets *world to
 * its world size. Returns 0, or the library's CKPT_E_* code when the checkpoint reads as saved
 * but not as global tensors: a multi-rank checkpoint whose layout (world size, part records,
 * shard tables) cannot be read; *world is then the world size its manifest gives when that is
 * valid and more than one rank, else 0. */
static int try_open_dist(ckpt_store *store, uint64_t step, ckpt_reader **g, unsigned *world)
{
	*g = NULL;
	*world = 0;
	ckpt_reader *rd;
	int rc = ckpt_reader_open(store, step, 0, &rd);
	if (!rc && !ck_dist_multi(rd)) {
		ckpt_reader_close(rd);
		return 0;
	}
	if (!rc) {
		*g = rd;
		*world = ckpt_reader_world_size(rd);
		return 0;
	}
	/* ckpt_errmsg() keeps rc's message: a successful open changes nothing of it. */
	if (ckpt_reader_open(store, step, CKPT_READ_AS_SAVED, &rd))
		return 0; /* the manifest itself does not read */
	unsigned w = ckpt_reader_world_size(rd);
	*world = w > 1 ? w : 0;
	ckpt_reader_close(rd);
	return rc;
}

unsigned *ck_dist_list_worlds(ckpt_store *store, const ckpt_info *list, int n)
{
	unsigned *v = calloc((size_t)n + 1, sizeof *v);
	bool any = false;
	for (int k = 0; v && k < n; k++) {
		ckpt_reader *g;
		if (list[k].error)
			continue;
		(void)try_open_dist(store, list[k].step, &g, &v[k]);
		any |= v[k] != 0;
		ckpt_reader_close(g);
	}
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

static void warn_layout(uint64_t step)
{
	cli_err("warning: step %llu: cannot read its shard layout: %s", (unsigned long long)step,
		ckpt_errmsg());
}

/* The global tensors of step when it is a multi-rank checkpoint; NULL otherwise. */
static ckpt_reader *open_dist(ckpt_store *store, uint64_t step)
{
	ckpt_reader *g;
	unsigned world;
	if (try_open_dist(store, step, &g, &world))
		warn_layout(step);
	return g;
}

static void show_shard_text(const ckpt_reader *g, size_t i, size_t j, uint64_t step)
{
	ckpt_shard sh = {.struct_size = sizeof sh};
	char o[700], l[700], p[64];
	if (ckpt_reader_shard(g, i, j, &sh))
		return;
	printf("          rank %-4d  offsets %-14s  lengths %-14s  %s\n", sh.rank,
	       ck_fmt_shape(sh.ndim, sh.offsets, o, sizeof o),
	       ck_fmt_shape(sh.ndim, sh.lengths, l, sizeof l), part_name(step, sh.rank, p, sizeof p));
}

void ck_dist_show_text(ckpt_store *store, uint64_t step)
{
	ckpt_reader *g = open_dist(store, step);
	if (!g)
		return;
	char p[64];
	snprintf(p, sizeof p, "parts/%020llu/", (unsigned long long)step);
	printf("\nworld size: %u ranks (parts in %s)\n", ckpt_reader_world_size(g), p);
	printf("\nGLOBAL TENSORS\n%-8s  %-16s  %10s  %-12s  %s\n", "DTYPE", "SHAPE", "SIZE", "LAYOUT",
	       "NAME");
	size_t ng = ckpt_reader_tensor_count(g);
	for (size_t i = 0; i < ng; i++) {
		ckpt_tensor_info t = {.struct_size = sizeof t};
		char sh[700], sz[32], q[1100], lay[32];
		if (ckpt_reader_tensor(g, i, &t))
			continue;
		bool rep = t.replicated == 1;
		if (rep)
			snprintf(lay, sizeof lay, "replicated");
		else
			snprintf(lay, sizeof lay, "%u shard%s", t.shards, t.shards == 1 ? "" : "s");
		const char *dt = ckpt_dtype_name(t.dtype);
		printf("%-8s  %-16s  %10s  %-12s  %s\n", dt ? dt : "?",
		       ck_fmt_shape(t.ndim, t.shape, sh, sizeof sh),
		       cli_fmt_iec(t.nbytes, sz, sizeof sz), lay, ck_name(t.name, q, sizeof q));
		for (uint32_t j = 0; !rep && j < t.shards; j++)
			show_shard_text(g, i, j, step);
	}
	ckpt_reader_close(g);
}

static void show_global_json(struct jw *w, const ckpt_reader *g, size_t i, uint64_t step)
{
	ckpt_tensor_info t = {.struct_size = sizeof t};
	if (ckpt_reader_tensor(g, i, &t))
		return;
	const char *dt = ckpt_dtype_name(t.dtype);
	bool rep = t.replicated == 1;
	jw_obj_begin(w);
	jw_key(w, "name"); jw_str(w, t.name);
	jw_key(w, "dtype"); jw_str(w, dt ? dt : "?");
	jw_key(w, "shape"); dims(w, t.ndim, t.shape);
	jw_key(w, "nbytes"); jw_u64(w, t.nbytes);
	jw_key(w, "replicated"); jw_bool(w, rep);
	jw_key(w, "shards");
	jw_arr_begin(w);
	for (uint32_t j = 0; !rep && j < t.shards; j++) {
		ckpt_shard sh = {.struct_size = sizeof sh};
		char p[64];
		if (ckpt_reader_shard(g, i, j, &sh))
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
	ckpt_reader *g = open_dist(store, step);
	if (!g)
		return;
	jw_key(w, "world_size"); jw_u64(w, ckpt_reader_world_size(g));
	jw_key(w, "global_tensors");
	jw_arr_begin(w);
	size_t ng = ckpt_reader_tensor_count(g);
	for (size_t i = 0; i < ng; i++)
		show_global_json(w, g, i, step);
	jw_arr_end(w);
	ckpt_reader_close(g);
}

/* The rank of the pack file whose name is file (NNNNNNNN.pack, maybe after a directory or a
 * remote url): that of a chunk of rd stored in it; -1 when none is. */
static int pack_rank(const ckpt_reader *rd, const char *file)
{
	const char *b = file ? strrchr(file, '/') : NULL;
	b = b ? b + 1 : file;
	if (!b)
		return -1;
	char *end;
	unsigned long long id = strtoull(b, &end, 10);
	if (end == b || strcmp(end, ".pack"))
		return -1;
	size_t n = ckpt_reader_tensor_count(rd);
	for (size_t i = 0; i < n; i++) {
		ckpt_tensor_info ti = {.struct_size = sizeof ti};
		if (ckpt_reader_tensor(rd, i, &ti))
			continue;
		for (uint64_t j = 0; j < ti.chunks; j++) {
			ckpt_chunk_info c = {.struct_size = sizeof c};
			if (!ckpt_reader_chunk(rd, i, j, &c) && c.pack_id == id)
				return c.rank;
		}
	}
	return -1;
}

int ck_dist_damage_rank(const ckpt_reader *rd, const ckpt_damage *d)
{
	if (!d->tensor)
		return pack_rank(rd, d->file);
	long i = ckpt_reader_find(rd, d->tensor);
	ckpt_chunk_info c = {.struct_size = sizeof c};
	if (i < 0 || ckpt_reader_chunk(rd, (size_t)i, d->chunk, &c))
		return -1;
	return c.rank;
}

/* A part's rank, from its file name R.part. */
static int part_rank(const char *file)
{
	const char *b = file ? strrchr(file, '/') : NULL;
	return b ? atoi(b + 1) : -1;
}

bool ck_dist_part_damage(const ckpt_damage *d)
{
	size_t n = d->file ? strlen(d->file) : 0;
	return !d->tensor && n > 5 && !strcmp(d->file + n - 5, ".part");
}

void ck_dist_part_print(const ckpt_damage *dm, struct jw *w)
{
	if (w) {
		jw_obj_begin(w);
		jw_key(w, "part"); jw_str(w, dm->file ? dm->file : "");
		jw_key(w, "rank"); jw_i64(w, part_rank(dm->file));
		jw_key(w, "file"); jw_str(w, dm->file ? dm->file : "");
		jw_key(w, "error"); jw_str(w, ckpt_strerror(dm->error));
		jw_key(w, "message"); jw_str(w, dm->message ? dm->message : "");
		jw_obj_end(w);
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
 * refuses as corrupt: one damage entry for the whole checkpoint, in ck_dist_part_print's form. */
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

long ck_dist_verify_layout(ckpt_store *store, uint64_t step, struct jw *w)
{
	ckpt_reader *g;
	unsigned world;
	int rc = try_open_dist(store, step, &g, &world);
	ckpt_reader_close(g);
	if (rc == -CKPT_E_CORRUPT || rc == -CKPT_E_VERSION) {
		on_layout(step, rc, w);
		return 1;
	}
	if (rc)
		warn_layout(step);
	return 0;
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
