/* Shared by the pipeline tests (t-pipeline.c, t-async.c, t-pipe-*.c): tensor sets, stores opened
 * with pipeline options, save helpers, and a full check of a checkpoint (verify, restore of every
 * tensor one by one and through the parallel restore_all). Everything is static and marked unused
 * so that each test includes only what it needs without warnings. */
#ifndef CKPT_T_PIPE_UTIL_H
#define CKPT_T_PIPE_UTIL_H

#include "helpers.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TP_UNUSED __attribute__((unused))

/* ---- tensor sets ----------------------------------------------------------------------------- */
struct tp_tensor {
	char name[48];
	ckpt_dtype dt;
	unsigned ndim;
	uint64_t shape[2];
	uint64_t n;
	uint8_t *data;
};

struct tp_set {
	size_t nt;
	struct tp_tensor *t;
};

/* A set of nt tensors of roughly bytes_each bytes (odd sizes), filled from seed. */
static TP_UNUSED struct tp_set *tp_set_new(size_t nt, uint64_t bytes_each, uint64_t seed)
{
	struct tp_set *s = calloc(1, sizeof *s);
	REQUIRE(s);
	s->nt = nt;
	s->t = calloc(nt ? nt : 1, sizeof *s->t);
	REQUIRE(s->t);
	for (size_t i = 0; i < nt; i++) {
		struct tp_tensor *t = &s->t[i];
		snprintf(t->name, sizeof t->name, "layer.%zu.weight", i);
		t->dt = (i % 3 == 0) ? CKPT_DTYPE_U8 : (i % 3 == 1) ? CKPT_DTYPE_BF16 : CKPT_DTYPE_F32;
		size_t es = ckpt_dtype_size(t->dt);
		uint64_t elems = (bytes_each + 7 * i) / es;
		t->ndim = 2;
		t->shape[0] = 1 + i % 3;
		t->shape[1] = elems / t->shape[0] ? elems / t->shape[0] : 1;
		t->n = es * t->shape[0] * t->shape[1];
		t->data = malloc(t->n ? t->n : 1);
		REQUIRE(t->data);
		t_fill(t->data, t->n, seed * 1000003 + i);
	}
	return s;
}

static TP_UNUSED void tp_set_free(struct tp_set *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nt; i++)
		free(s->t[i].data);
	free(s->t);
	free(s);
}

/* A deep copy (the data as it must come back from a checkpoint). */
static TP_UNUSED struct tp_set *tp_set_dup(const struct tp_set *o)
{
	struct tp_set *s = calloc(1, sizeof *s);
	REQUIRE(s);
	s->nt = o->nt;
	s->t = calloc(o->nt ? o->nt : 1, sizeof *s->t);
	REQUIRE(s->t);
	for (size_t i = 0; i < o->nt; i++) {
		s->t[i] = o->t[i];
		s->t[i].data = malloc(o->t[i].n ? o->t[i].n : 1);
		REQUIRE(s->t[i].data);
		memcpy(s->t[i].data, o->t[i].data, o->t[i].n);
	}
	return s;
}

/* Changes `every`-th chunk-sized block of every tensor (a sparse update). */
static TP_UNUSED void tp_set_touch(struct tp_set *s, uint32_t chunk, unsigned every, uint64_t seed)
{
	for (size_t i = 0; i < s->nt; i++)
		for (uint64_t off = 0, k = 0; off < s->t[i].n; off += chunk, k++)
			if (k % every == 0)
				s->t[i].data[off] ^= (uint8_t)(1 + ((seed + k) & 0x7f));
}

/* ---- stores ---------------------------------------------------------------------------------- */
struct tp_opts {
	uint32_t chunk;      /* 0: 64 KiB */
	int compress;
	uint64_t pool;       /* 0: 32 MiB */
	uint64_t io_size;    /* 0: default */
	unsigned threads;    /* 0: default */
	unsigned qd;         /* 0: default */
	int engine;          /* CKPT_ENGINE_* */
	int direct_io;       /* 0: default, 1: CKPT_OPT_DIRECT_IO 1, 2: CKPT_OPT_DIRECT_IO 0 */
	uint64_t pack_size;  /* 0: default */
	const char *data_dirs[4];
	int no_create;       /* 1: open an existing store only */
};

#define TP_OPTS(...) ((struct tp_opts){__VA_ARGS__})

static TP_UNUSED ckpt_options *tp_options(const struct tp_opts *o)
{
	ckpt_options *op = ckpt_options_create();
	REQUIRE(op);
	if (!o->no_create)
		REQUIRE(ckpt_options_set(op, CKPT_OPT_CREATE, 1) == 0);
	REQUIRE(ckpt_options_set(op, CKPT_OPT_CHUNK_SIZE, o->chunk ? o->chunk : 64u << 10) == 0);
	REQUIRE(ckpt_options_set(op, CKPT_OPT_COMPRESS, o->compress) == 0);
	REQUIRE(ckpt_options_set(op, CKPT_OPT_POOL_SIZE, (int64_t)(o->pool ? o->pool : 32u << 20)) == 0);
	if (o->io_size)
		REQUIRE(ckpt_options_set(op, CKPT_OPT_IO_SIZE, (int64_t)o->io_size) == 0);
	if (o->threads)
		REQUIRE(ckpt_options_set(op, CKPT_OPT_THREADS, o->threads) == 0);
	if (o->qd)
		REQUIRE(ckpt_options_set(op, CKPT_OPT_QUEUE_DEPTH, o->qd) == 0);
	REQUIRE(ckpt_options_set(op, CKPT_OPT_IO_ENGINE, o->engine) == 0);
	if (o->direct_io)
		REQUIRE(ckpt_options_set(op, CKPT_OPT_DIRECT_IO, o->direct_io == 1) == 0);
	if (o->pack_size)
		REQUIRE(ckpt_options_set(op, CKPT_OPT_PACK_SIZE, (int64_t)o->pack_size) == 0);
	for (int i = 0; i < 4 && o->data_dirs[i]; i++)
		REQUIRE(ckpt_options_add_data_dir(op, o->data_dirs[i]) == 0);
	return op;
}

static TP_UNUSED ckpt_store *tp_open(const char *dir, const struct tp_opts *o)
{
	ckpt_options *op = tp_options(o);
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(dir, op, &s);
	ckpt_options_free(op);
	if (rc)
		fprintf(stderr, "open %s: %s: %s\n", dir, ckpt_strerror(rc), ckpt_errmsg());
	REQUIRE(rc == 0 && s);
	return s;
}

/* ---- saving ---------------------------------------------------------------------------------- */
/* Begins a save of step with every tensor of set (and a metadata entry naming the step). */
static TP_UNUSED save1 *tp_begin(ckpt_store *s, uint64_t step, const struct tp_set *set)
{
	save1 *sv = NULL;
	int rc = save1_begin(s, step, &sv);
	if (rc)
		fprintf(stderr, "begin %llu: %s: %s\n", (unsigned long long)step, ckpt_strerror(rc),
			ckpt_errmsg());
	REQUIRE(rc == 0 && sv);
	for (size_t i = 0; set && i < set->nt; i++) {
		const struct tp_tensor *t = &set->t[i];
		rc = save1_add_tensor(sv, t->name, t->dt, t->ndim, t->shape, CKPT_MEM_HOST, t->data);
		if (rc)
			fprintf(stderr, "add %s: %s\n", t->name, ckpt_errmsg());
		REQUIRE(rc == 0);
	}
	char v[32];
	snprintf(v, sizeof v, "%llu", (unsigned long long)step);
	REQUIRE(save1_set_meta(sv, "step", v) == 0);
	return sv;
}

/* Synchronous save. Returns the commit's result; fills *st when not NULL. */
static TP_UNUSED int tp_save(ckpt_store *s, uint64_t step, const struct tp_set *set, ckpt_stats *st)
{
	ckpt_stats tmp;
	save1 *sv = tp_begin(s, step, set);
	int rc = save1_commit(sv, st ? st : &tmp);
	if (rc)
		fprintf(stderr, "commit %llu: %s: %s\n", (unsigned long long)step, ckpt_strerror(rc),
			ckpt_errmsg());
	return rc;
}

/* ---- checking -------------------------------------------------------------------------------- */
static TP_UNUSED bool tp_manifest_exists(ckpt_store *s, uint64_t step)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/manifests/%020llu.ckpt", ckpt_store_path(s), (unsigned long long)step);
	return access(p, F_OK) == 0;
}

struct tp_dst {
	const struct tp_set *want;
	uint8_t **bufs;
	int bad;
};

static void *tp_dst_for(size_t index, const ckpt_tensor_info *info, int *mem, void *arg)
{
	struct tp_dst *d = arg;
	(void)mem;
	if (index >= d->want->nt || info->nbytes != d->want->t[index].n) {
		d->bad++;
		return NULL;
	}
	return d->bufs[index];
}

/* Checks that checkpoint step holds exactly set (names, sizes, bytes), through verify, restore of
 * each tensor and restore_all. Returns the number of problems (also counted in t_failures). */
static TP_UNUSED int tp_check(ckpt_store *s, uint64_t step, const struct tp_set *set)
{
	int before = t_failures;
	reader1 *r = NULL;
	int rc = reader1_open(s, step, &r);
	CHECK_OK(rc);
	if (rc) {
		fprintf(stderr, "  (checkpoint %llu)\n", (unsigned long long)step);
		return t_failures - before;
	}
	CHECK(reader1_tensor_count(r) == set->nt);
	char v[32];
	snprintf(v, sizeof v, "%llu", (unsigned long long)step);
	const char *m = reader1_get_meta(r, "step");
	CHECK(m && !strcmp(m, v));
	/* The parallel restore first, on a fresh reader: its pack table fills as threads need packs. */
	struct tp_dst d = {.want = set};
	d.bufs = calloc(set->nt ? set->nt : 1, sizeof *d.bufs);
	REQUIRE(d.bufs);
	for (size_t i = 0; i < set->nt; i++) {
		d.bufs[i] = malloc(set->t[i].n ? set->t[i].n : 1);
		REQUIRE(d.bufs[i]);
		memset(d.bufs[i], 0x5a, set->t[i].n);
	}
	CHECK_OK(reader1_restore_all(r, tp_dst_for, &d));
	CHECK(d.bad == 0);
	for (size_t i = 0; i < set->nt; i++) {
		if (memcmp(d.bufs[i], set->t[i].data, set->t[i].n)) {
			fprintf(stderr, "checkpoint %llu: restore_all: tensor %s differs\n",
				(unsigned long long)step, set->t[i].name);
			t_failures++;
		}
		free(d.bufs[i]);
	}
	free(d.bufs);
	CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
	for (size_t i = 0; i < set->nt && i < reader1_tensor_count(r); i++) {
		const struct tp_tensor *t = &set->t[i];
		ckpt_tensor_info info;
		CHECK_OK(reader1_tensor(r, i, &info));
		CHECK(!strcmp(info.name, t->name));
		CHECK(info.nbytes == t->n && info.dtype == t->dt);
		uint8_t *b = malloc(t->n ? t->n : 1);
		REQUIRE(b);
		memset(b, 0xa5, t->n);
		rc = reader1_restore(r, i, CKPT_MEM_HOST, b, t->n);
		CHECK_OK(rc);
		if (!rc && memcmp(b, t->data, t->n)) {
			fprintf(stderr, "checkpoint %llu: tensor %s differs\n", (unsigned long long)step,
				t->name);
			t_failures++;
		}
		free(b);
	}
	reader1_close(r);
	if (t_failures != before)
		fprintf(stderr, "  (checkpoint %llu: %d problem(s))\n", (unsigned long long)step,
			t_failures - before);
	return t_failures - before;
}

/* Number of files ending in .pack directly in dir (-1 if dir cannot be opened). */
#include <dirent.h>
static TP_UNUSED int tp_count_packs(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		n += l > 5 && !strcmp(e->d_name + l - 5, ".pack");
	}
	closedir(d);
	return n;
}

static TP_UNUSED double tp_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif
