/* ckptctl export of a multi-rank checkpoint: the file holds each GLOBAL tensor whole,
 * assembled from its shards, replicated tensors once, without the shard layout's metadata.
 *
 * Four ranks are threads of this process, each with its own store handle, talking through a
 * shared-memory communicator; they save tensors sharded by rows, by columns and along the middle
 * dimension of a 3-d tensor (uneven pieces), a tensor larger than an export block whose element
 * boundaries do not fall on block boundaries (a 3-byte tensor precedes it), and replicated
 * tensors (a matrix, a scalar, an empty tensor). `ckptctl export` writes the file (and the same
 * to standard output); importing it back through ckptctl's strict safetensors parser must give
 * every global tensor's name, dtype, shape and bytes. A world of one rank is consolidated too. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"
#include "../../cli/ckptctl/xfer.h" /* XFER_BLOCK: "big" must cross a block boundary */

#define NR 4
#define NT 9

/* The global tensors; split: -1 replicated, else the sharded dimension (pieces uneven). */
static const struct gspec {
	const char *name;
	ckpt_dtype dtype;
	unsigned ndim;
	uint64_t shape[3];
	int split;
} G[NT] = {
	{"odd", CKPT_DTYPE_U8, 2, {1, 13}, 1},
	{"w", CKPT_DTYPE_F32, 2, {300, 70}, 0},
	{"big", CKPT_DTYPE_F32, 3, {3, XFER_BLOCK / (3 * 701 * 4) + 50, 701}, 2},
	{"cols", CKPT_DTYPE_BF16, 2, {64, 40}, 1},
	{"t3", CKPT_DTYPE_I16, 3, {5, 11, 9}, 1},
	{"emb", CKPT_DTYPE_U16, 2, {1000, 33}, -1},
	{"scalar", CKPT_DTYPE_F64, 0, {0}, -1},
	{"m.a", CKPT_DTYPE_U8, 2, {10, 3}, 0}, /* --select m: "a" and "b" */
	{"m.b", CKPT_DTYPE_I32, 1, {7}, -1},
};
/* The replicated empty tensor, apart: it has no bytes to check. */
static const uint64_t empty_shape[2] = {0, 5};

static uint8_t gbyte(size_t t, uint64_t j)
{
	uint64_t x = (j + 1) * 0x9e3779b97f4a7c15ull + t * 0x632be59bd9b4e019ull;
	x ^= x >> 29;
	return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

static uint64_t gnbytes(const struct gspec *g)
{
	uint64_t n = ckpt_dtype_size(g->dtype);
	for (unsigned d = 0; d < g->ndim; d++)
		n *= g->shape[d];
	return n;
}

/* The communicator: every rank writes its piece into a shared slot, then a barrier. */
struct shared {
	pthread_barrier_t bar;
	uint8_t buf[NR][1 << 16];
};
struct rank_ctx {
	struct shared *sh;
	int rank;
	const char *store;
	int rc;
};

static int t_barrier(void *ctx)
{
	pthread_barrier_wait(&((struct rank_ctx *)ctx)->sh->bar);
	return 0;
}

static int t_allgather(void *ctx, const void *in, size_t len, void *out)
{
	struct rank_ctx *c = ctx;
	if (len > sizeof c->sh->buf[0])
		return -CKPT_E_INVAL;
	memcpy(c->sh->buf[c->rank], in, len);
	t_barrier(ctx);
	for (int r = 0; r < NR; r++)
		memcpy((uint8_t *)out + len * (size_t)r, c->sh->buf[r], len);
	t_barrier(ctx);
	return 0;
}

static int t_broadcast(void *ctx, void *buf, size_t len, int root)
{
	struct rank_ctx *c = ctx;
	if (len > sizeof c->sh->buf[0])
		return -CKPT_E_INVAL;
	if (c->rank == root)
		memcpy(c->sh->buf[root], buf, len);
	t_barrier(ctx);
	if (c->rank != root)
		memcpy(buf, c->sh->buf[root], len);
	t_barrier(ctx);
	return 0;
}

/* Rank r's piece of g: along g->split, [lo, hi) with uneven cuts; filled from gbyte(). */
static void *piece(size_t t, int r, uint64_t *off, uint64_t *ext)
{
	const struct gspec *g = &G[t];
	uint64_t es = ckpt_dtype_size(g->dtype), n = g->shape[g->split];
	static const unsigned cut[NR + 1] = {0, 1, 3, 6, 10}; /* tenths */
	for (unsigned d = 0; d < g->ndim; d++)
		off[d] = 0, ext[d] = g->shape[d];
	off[g->split] = n * cut[r] / 10;
	ext[g->split] = n * cut[r + 1] / 10 - off[g->split];
	uint64_t vol = 1, st[3] = {0}, gst[3];
	for (unsigned d = g->ndim; d-- > 0;) {
		st[d] = vol, vol *= ext[d];
		gst[d] = d + 1 < g->ndim ? gst[d + 1] * g->shape[d + 1] : 1;
	}
	uint8_t *p = malloc(vol * es + 1);
	for (uint64_t i = 0; p && i < vol; i++) {
		uint64_t gi = 0, rem = i;
		for (unsigned d = 0; d < g->ndim; d++) {
			gi += (rem / st[d] + off[d]) * gst[d];
			rem %= st[d];
		}
		for (uint64_t b = 0; b < es; b++)
			p[i * es + b] = gbyte(t, gi * es + b);
	}
	return p;
}

static void *rank_main(void *arg)
{
	struct rank_ctx *c = arg;
	ckpt_comm comm = {.rank = c->rank, .size = NR, .ctx = c, .allgather = t_allgather,
			  .broadcast = t_broadcast, .barrier = t_barrier};
	ckpt_store *s = t_open_store(c->store, 64 << 10, 0);
	dsave *d = NULL;
	void *bufs[NT + 1] = {0};
	c->rc = s ? dsave_begin(s, &comm, 1, &d) : -CKPT_E_IO;
	for (size_t t = 0; t < NT && !c->rc; t++) {
		const struct gspec *g = &G[t];
		uint64_t off[3], ext[3];
		if (g->split < 0) {
			uint64_t n = gnbytes(g);
			uint8_t *p = bufs[t] = malloc(n);
			for (uint64_t j = 0; p && j < n; j++)
				p[j] = gbyte(t, j);
			c->rc = dsave_add_replicated(d, g->name, g->dtype, g->ndim, g->shape,
							      (unsigned)c->rank, NR, CKPT_MEM_HOST, p);
		} else {
			bufs[t] = piece(t, c->rank, off, ext);
			c->rc = dsave_add_shard(d, g->name, g->dtype, g->ndim, g->shape, off,
							 ext, CKPT_MEM_HOST, bufs[t]);
		}
	}
	static const char none[1];
	if (!c->rc)
		c->rc = dsave_add_replicated(d, "empty", CKPT_DTYPE_F32, 2, empty_shape,
						      (unsigned)c->rank, NR, CKPT_MEM_HOST, none);
	if (!c->rc)
		c->rc = dsave_set_meta(d, "note", "consolidated");
	if (c->rc)
		fprintf(stderr, "rank %d: %s\n", c->rank, ckpt_errmsg());
	/* Every rank commits (collective), also after a failure: then every commit fails. */
	int rc = d ? dsave_commit(d, NULL) : c->rc;
	if (rc && !c->rc)
		fprintf(stderr, "rank %d: commit: %s\n", c->rank, ckpt_errmsg());
	c->rc = c->rc ? c->rc : rc;
	for (size_t t = 0; t < NT; t++)
		free(bufs[t]);
	ckpt_store_close(s);
	return NULL;
}

static int sh(const char *fmt, const char *a, const char *b, const char *c)
{
	char cmd[4096];
	const char *bdir = getenv("B") ? getenv("B") : "build";
	int n = snprintf(cmd, sizeof cmd, "%s/bin/ckptctl ", bdir);
	snprintf(cmd + n, sizeof cmd - (size_t)n, fmt, a, b, c);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Every global tensor, read back from the store that imported the export. */
static void check_imported(const char *store)
{
	ckpt_store *s = t_open_store(store, 0, 0);
	reader1 *r;
	REQUIRE(s && reader1_open(s, 2, &r) == 0);
	CHECK(reader1_tensor_count(r) == NT + 1);
	for (size_t t = 0; t < NT; t++) {
		const struct gspec *g = &G[t];
		long i = reader1_find(r, g->name);
		ckpt_tensor_info ti;
		CHECK(i >= 0);
		if (i < 0 || reader1_tensor(r, (size_t)i, &ti))
			continue;
		CHECK(ti.dtype == g->dtype && ti.ndim == g->ndim && ti.nbytes == gnbytes(g));
		CHECK(!memcmp(ti.shape, g->shape, g->ndim * sizeof *ti.shape));
		uint8_t *p = malloc(ti.nbytes + 1);
		CHECK_OK(reader1_restore(r, (size_t)i, CKPT_MEM_HOST, p, ti.nbytes));
		uint64_t bad = 0;
		for (uint64_t j = 0; j < ti.nbytes; j++)
			bad += p[j] != gbyte(t, j);
		if (bad)
			fprintf(stderr, "tensor %s: %llu of %llu bytes differ\n", g->name,
				(unsigned long long)bad, (unsigned long long)ti.nbytes);
		CHECK(bad == 0);
		free(p);
	}
	long e = reader1_find(r, "empty");
	ckpt_tensor_info ti;
	CHECK(e >= 0 && reader1_tensor(r, (size_t)e, &ti) == 0 && ti.nbytes == 0 &&
	      ti.ndim == 2 && ti.shape[0] == 0 && ti.shape[1] == 5);
	const char *note = reader1_get_meta(r, "note");
	CHECK(note && !strcmp(note, "consolidated"));
	for (size_t k = 0; k < reader1_meta_count(r); k++) {
		const char *key, *v;
		CHECK(reader1_meta(r, k, &key, &v) == 0 && strncmp(key, "ckpt.dist.", 10));
	}
	reader1_close(r);
	ckpt_store_close(s);
}

/* A world of one rank (one process): its sharded tensor is stored as "w@0" too, and exported
 * as "w". */
static int solo_allgather(void *ctx, const void *in, size_t len, void *out)
{
	(void)ctx;
	memcpy(out, in, len);
	return 0;
}
static int solo_broadcast(void *ctx, void *buf, size_t len, int root)
{
	(void)ctx, (void)buf, (void)len, (void)root;
	return 0;
}
static int solo_barrier(void *ctx)
{
	(void)ctx;
	return 0;
}

static void check_world_of_one(const char *store, const char *dir)
{
	const struct gspec *g = &G[1];
	uint64_t n = gnbytes(g), zero[2] = {0, 0};
	uint8_t *p = malloc(n);
	for (uint64_t j = 0; p && j < n; j++)
		p[j] = gbyte(1, j);
	ckpt_comm comm = {.rank = 0, .size = 1, .allgather = solo_allgather,
			  .broadcast = solo_broadcast, .barrier = solo_barrier};
	ckpt_store *s = t_open_store(store, 0, 0);
	dsave *d;
	REQUIRE(p && s && dsave_begin(s, &comm, 5, &d) == 0);
	CHECK_OK(dsave_add_shard(d, g->name, g->dtype, g->ndim, g->shape, zero, g->shape,
					  CKPT_MEM_HOST, p));
	CHECK_OK(dsave_commit(d, NULL));
	ckpt_store_close(s);
	char out[4096], back[4096];
	snprintf(out, sizeof out, "%s/one.safetensors", dir);
	snprintf(back, sizeof back, "%s/back1", dir);
	CHECK(sh("export -q '%s' 5 -o '%s'%s", store, out, "") == 0);
	CHECK(sh("import -q '%s' --step 1 '%s'%s", back, out, "") == 0);
	reader1 *r;
	REQUIRE((s = t_open_store(back, 0, 0)) && reader1_open(s, 1, &r) == 0);
	long i = reader1_find(r, "w");
	uint8_t *q = malloc(n);
	CHECK(reader1_tensor_count(r) == 1 && i == 0);
	CHECK(q && i == 0 && reader1_restore(r, 0, CKPT_MEM_HOST, q, n) == 0 && !memcmp(p, q, n));
	reader1_close(r);
	ckpt_store_close(s);
	free(p);
	free(q);
}

/* --select m of the consolidated tensors: "m.a" (sharded) and "m.b" (replicated) as "a", "b". */
static void check_select(const char *store, const char *dir)
{
	char out[4096], back[4096];
	snprintf(out, sizeof out, "%s/m.safetensors", dir);
	snprintf(back, sizeof back, "%s/backm", dir);
	CHECK(sh("export -q '%s' 1 -o '%s' --select %s", store, out, "m") == 0);
	CHECK(sh("import -q '%s' --step 1 '%s'%s", back, out, "") == 0);
	ckpt_store *s = t_open_store(back, 0, 0);
	reader1 *r;
	REQUIRE(s && reader1_open(s, 1, &r) == 0);
	CHECK(reader1_tensor_count(r) == 2);
	for (size_t t = NT - 2; t < NT; t++) {
		long i = reader1_find(r, G[t].name + 2);
		uint64_t n = gnbytes(&G[t]);
		uint8_t p[64];
		CHECK(i >= 0 && n <= sizeof p);
		if (i < 0 || n > sizeof p)
			continue;
		CHECK_OK(reader1_restore(r, (size_t)i, CKPT_MEM_HOST, p, n));
		for (uint64_t j = 0; j < n; j++)
			CHECK(p[j] == gbyte(t, j));
	}
	reader1_close(r);
	ckpt_store_close(s);
}

/* The case the test is for: a block boundary (every XFER_BLOCK bytes) cuts an element of "big"
 * (the file holds the global tensors in the order of the multi-rank reader). */
static void check_cut(const char *store, const char *file)
{
	uint8_t len8[8];
	FILE *f = fopen(file, "rb");
	REQUIRE(f && fread(len8, 1, 8, f) == 8);
	fclose(f);
	uint64_t off = 8;
	for (int i = 0; i < 8; i++)
		off += (uint64_t)len8[i] << (8 * i);
	ckpt_store *s = t_open_store(store, 0, 0);
	dreader *d;
	REQUIRE(s && dreader_open(s, 1, &d) == 0);
	for (size_t k = 0; k < dreader_tensor_count(d); k++) {
		ckpt_tensor_info ti;
		REQUIRE(dreader_tensor(d, k, &ti) == 0);
		if (!strcmp(ti.name, "big")) {
			uint64_t cut = XFER_BLOCK - off;
			CHECK(off < XFER_BLOCK && off + ti.nbytes > XFER_BLOCK && cut % 4 != 0);
		}
		off += ti.nbytes;
	}
	dreader_close(d);
	ckpt_store_close(s);
}

int main(void)
{
	char *dir = t_tmpdir("export-dist");
	char store[4096], out[4096], out2[4096], back[4096];
	snprintf(store, sizeof store, "%s/store", dir);
	snprintf(out, sizeof out, "%s/all.safetensors", dir);
	snprintf(out2, sizeof out2, "%s/stdout.safetensors", dir);
	snprintf(back, sizeof back, "%s/back", dir);
	/* Created once before the ranks open it: ranks creating it at once would make several. */
	ckpt_store *s0 = t_open_store(store, 64 << 10, 0);
	REQUIRE(s0);
	ckpt_store_close(s0);
	static struct shared shm;
	pthread_barrier_init(&shm.bar, NULL, NR);
	struct rank_ctx rc[NR];
	pthread_t tid[NR];
	for (int r = 0; r < NR; r++) {
		rc[r] = (struct rank_ctx){&shm, r, store, 0};
		REQUIRE(pthread_create(&tid[r], NULL, rank_main, &rc[r]) == 0);
	}
	for (int r = 0; r < NR; r++) {
		pthread_join(tid[r], NULL);
		CHECK_OK(rc[r].rc);
	}
	REQUIRE(t_failures == 0);

	CHECK(sh("export -q '%s' 1 -o '%s'%s", store, out, "") == 0);
	CHECK(sh("export '%s' 1 -o - > '%s'%s", store, out2, "") == 0);
	CHECK(sh("import -q '%s' --step 2 '%s'%s", back, out, "") == 0);
	check_imported(back);
	/* Standard output takes the one-thread path: the same bytes. */
	struct stat a, b;
	CHECK(stat(out, &a) == 0 && stat(out2, &b) == 0 && a.st_size == b.st_size);
	char cmp[8300];
	snprintf(cmp, sizeof cmp, "cmp -s '%s' '%s'", out, out2);
	CHECK(system(cmp) == 0);
	uint64_t want = 0;
	for (size_t t = 0; t < NT; t++)
		want += gnbytes(&G[t]);
	CHECK((uint64_t)a.st_size > want && (uint64_t)a.st_size < want + 4096);
	check_cut(store, out);
	check_world_of_one(store, dir);
	check_select(store, dir);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
