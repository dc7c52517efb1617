/* Chunk-exact resharding restore. Four ranks (threads, t-dist-world.h) save
 * row shards of "m": F32 [1024, 1024] (rows of 4 KiB, 16 to a 64 KiB chunk) and "w": F32
 * [64, 65536] (rows of 256 KiB, 4 chunks each) and "n": F32 [32768, 3] (rows of 12 bytes). Boxes of other layouts are restored with
 * dreader_restore_box(_strided, _mem) and checked element by element:
 * - the 4 column boxes of each (a 4-way column reshard), contiguous; the bytes each reads (the
 *   reader's stats) are at most 1.1 x the chunks its rows touch, counted here from the chunk
 *   size, and each chunk is read once (stats.chunks). The old restore read each shard's byte
 *   span: a column box of "w" read 61 of a shard's 64 chunks for the 16 it needs;
 * - strided destinations: the column boxes into their places in a whole matrix, and a transposed
 *   one (innermost stride not 1); elements the box does not cover are not written;
 * - unaligned boxes across shard and chunk boundaries, a row box cutting shards, the whole tensor;
 * - the same from a zstd store (chunks decoded, not checked in place);
 * - CUDA destinations through the CUDA provider over the test double (tests/cudadouble, whose
 *   device memory faults when the host touches it: only the staging path can fill it), when the
 *   module is built; a bad mem and a host pointer declared as device memory are refused;
 * - a damaged chunk fails the box restores that read it (in pieces and in place) with
 *   -CKPT_E_CHECKSUM naming the tensor and the chunk, and a box beside it still restores. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "helpers.h"
#include "t-dist-world.h"

#define NR 4
#define STEP 1
#define CHUNK (64u << 10)
#define MR 1024u    /* "m": MR x MC */
#define MC 1024u
#define WR 64u      /* "w": WR x WC */
#define WC 65536u
#define NRW 32768u  /* "n": NRW x 3, rows of 12 bytes (some across chunk boundaries) */

struct mat {
	const char *name;
	uint64_t rows, cols;
	long g;     /* its global tensor index */
};
static struct mat M = {"m", MR, MC, -1}, W = {"w", WR, WC, -1}, N = {"n", NRW, 3, -1};
#define NMAT 3
static const struct mat *const mats[NMAT] = {&M, &W, &N};

/* Exact in f32 (below 2^24), and no chunk of one matrix equal to one of the other (which the
 * store would keep once). */
static float val(const struct mat *x, uint64_t i, uint64_t j)
{
	float v = (float)(i * x->cols + j);
	return x == &W ? -1 - v : x == &N ? v + 0.5f : v;
}

static int save_rank(ckpt_comm *c, void *arg)
{
	ckpt_store *s = ((ckpt_store **)arg)[c->rank];
	float *buf[NMAT] = {NULL};
	dsave *d;
	int rc = dsave_begin(s, c, STEP, &d);
	for (int k = 0; k < NMAT && !rc; k++) {
		const struct mat *x = mats[k];
		uint64_t rows = x->rows / NR, r0 = rows * (uint64_t)c->rank;
		if (!(buf[k] = malloc(rows * x->cols * sizeof(float))))
			rc = -CKPT_E_NOMEM;
		for (uint64_t i = 0; i < rows && !rc; i++)
			for (uint64_t j = 0; j < x->cols; j++)
				buf[k][i * x->cols + j] = val(x, r0 + i, j);
		uint64_t g[2] = {x->rows, x->cols}, o[2] = {r0, 0}, l[2] = {rows, x->cols};
		if (!rc)
			rc = dsave_add_shard(d, x->name, CKPT_DTYPE_F32, 2, g, o, l,
						      CKPT_MEM_HOST, buf[k]);
	}
	if (rc && d)
		dsave_abort(d);
	else if (!rc)
		rc = dsave_commit(d, NULL);
	for (int k = 0; k < NMAT; k++)
		free(buf[k]);
	return rc;
}

static void save_world(const char *dir, int compress)
{
	ckpt_store *s[NR];
	int rc[NR];
	for (int k = 0; k < NR; k++)
		REQUIRE((s[k] = t_open_store(dir, CHUNK, compress)));
	REQUIRE(tw_run(NR, save_rank, s, rc) == 0);
	for (int k = 0; k < NR; k++) {
		CHECK_OK(rc[k]);
		ckpt_store_close(s[k]);
	}
}

/* Bytes of the chunks the rows of box (r0, c0, nr, nc) touch in the row shards of x (a shard's
 * last chunk may be short); their number in *n, the bytes their records take in the packs (a
 * 64-byte header, padded to 4 KiB: docs/format.md) in *rec. */
static uint64_t needed(const struct mat *x, uint64_t r0, uint64_t c0, uint64_t nr, uint64_t nc,
		       uint64_t *n, uint64_t *rec)
{
	uint64_t rows = x->rows / NR, sb = rows * x->cols * 4, bytes = 0, last = UINT64_MAX,
		 shard = UINT64_MAX;
	*n = *rec = 0;
	for (uint64_t i = r0; i < r0 + nr; i++) {
		if (i / rows != shard) {
			shard = i / rows;
			last = UINT64_MAX;
		}
		uint64_t a = ((i % rows) * x->cols + c0) * 4, b = a + nc * 4;
		for (uint64_t q = a / CHUNK; q <= (b - 1) / CHUNK; q++)
			if (q != last) {
				++*n;
				uint64_t raw = sb - q * CHUNK < CHUNK ? sb - q * CHUNK : CHUNK;
				bytes += raw;
				*rec += (64 + raw + 4095) / 4096 * 4096;
				last = q;
			}
	}
	return bytes;
}

/* Checks the box (r0, c0, nr, nc) of x in got, whose element (i, j) of the box is at
 * got[i * s0 + j * s1]. */
static int box_ok(const struct mat *x, const float *got, uint64_t r0, uint64_t c0, uint64_t nr,
		  uint64_t nc, uint64_t s0, uint64_t s1)
{
	for (uint64_t i = 0; i < nr; i++)
		for (uint64_t j = 0; j < nc; j++)
			if (got[i * s0 + j * s1] != val(x, r0 + i, c0 + j)) {
				fprintf(stderr, "%s box at (%" PRIu64 ", %" PRIu64 "): element (%" PRIu64
					", %" PRIu64 ") is %g, not %g\n", x->name, r0, c0, i, j,
					(double)got[i * s0 + j * s1], (double)val(x, r0 + i, c0 + j));
				return 0;
			}
	return 1;
}

/* Restores box (r0, c0, nr, nc) of x contiguously, checks it and its reads: bytes at most
 * 1.1 x the chunks it needs (and at least those), each needed chunk read once. */
static void box_exact(dreader *d, const struct mat *x, uint64_t r0, uint64_t c0,
		      uint64_t nr, uint64_t nc)
{
	ckpt_stats a, b;
	reader1_stats(dreader_checkpoint(d), &a);
	float *got = malloc(nr * nc * 4);
	REQUIRE(got);
	uint64_t off[2] = {r0, c0}, len[2] = {nr, nc};
	CHECK_OK(dreader_restore_box(d, (size_t)x->g, off, len, got, nr * nc * 4));
	CHECK(box_ok(x, got, r0, c0, nr, nc, nc, 1));
	reader1_stats(dreader_checkpoint(d), &b);
	uint64_t nchunks, rec, need = needed(x, r0, c0, nr, nc, &nchunks, &rec);
	uint64_t read = b.bytes_read - a.bytes_read;
	printf("%s box (%" PRIu64 ", %" PRIu64 ") x (%" PRIu64 ", %" PRIu64 "): read %" PRIu64
	       " bytes, its chunks are %" PRIu64 " (%.3fx; their records %.3fx), %" PRIu64
	       " chunks\n", x->name, r0, c0, nr, nc, read, need, (double)read / (double)need,
	       (double)read / (double)rec, b.chunks - a.chunks);
	CHECK(read >= rec && read * 10 <= rec * 11);
	/* Whole chunks (no short last one, whose record's padding weighs more): within 1.1 x
	 * their bytes too. */
	CHECK(need != nchunks * CHUNK || read * 10 <= need * 11);
	CHECK(b.chunks - a.chunks == nchunks);
	CHECK(b.logical_bytes - a.logical_bytes == nr * nc * 4);
	free(got);
}

static void test_exact(dreader *d)
{
	for (int k = 0; k < NMAT; k++) {
		const struct mat *x = mats[k];
		/* The 4-way column reshard ("n": a box per column, 5461 of its rows to a chunk,
		 * more than the pieces one read group queues). */
		uint64_t nb = x->cols < 4 ? x->cols : 4;
		for (uint64_t c = 0; c < nb; c++)
			box_exact(d, x, 0, c * x->cols / nb, x->rows, x->cols / nb);
		/* Unaligned: across shards and chunk boundaries. */
		box_exact(d, x, 5, x->cols / 10, x->rows - 13, x->cols / 3);
		/* Rows cutting shards (whole chunks in place, pieces at both ends). */
		box_exact(d, x, x->rows / 8 + 3, 0, x->rows / 2, x->cols);
		box_exact(d, x, 0, 0, x->rows, x->cols);
		box_exact(d, x, x->rows - 1, x->cols - 1, 1, 1);
	}
}

/* The column boxes into their places in one matrix (strides {cols, 1}), and one transposed
 * (strides {1, rows}): every element once, and nothing outside a box written. */
static void test_strided(dreader *d, const struct mat *x)
{
	uint64_t n = x->rows * x->cols, w = x->cols / 4;
	float *all = malloc(n * 4), *tr = malloc(n * 4);
	REQUIRE(all && tr);
	memset(all, 0xff, n * 4);
	for (uint64_t c = 0; c < 4; c++) {
		uint64_t off[2] = {0, c * w}, len[2] = {x->rows, w}, st[2] = {x->cols, 1};
		CHECK_OK(dreader_restore_box_strided(d, (size_t)x->g, off, len, all + c * w,
							      st, (n - c * w) * 4));
	}
	CHECK(box_ok(x, all, 0, 0, x->rows, x->cols, x->cols, 1));
	/* Box (r0, c0, nr, nc) transposed into tr: element (i, j) at tr[j * nr + i]. */
	uint64_t r0 = 7, c0 = 3, nr = x->rows - 9, nc = 300;
	memset(tr, 0xff, n * 4);
	uint64_t off[2] = {r0, c0}, len[2] = {nr, nc}, st[2] = {1, nr};
	CHECK_OK(dreader_restore_box_strided(d, (size_t)x->g, off, len, tr, st,
						      nr * nc * 4));
	CHECK(box_ok(x, tr, r0, c0, nr, nc, 1, nr));
	uint32_t untouched;
	memcpy(&untouched, tr + nr * nc, 4);
	CHECK(untouched == 0xffffffffu);
	free(all);
	free(tr);
}

/* ---- CUDA destinations ------------------------------------------------------------------- */
/* The CUDA runtime the provider loaded (the double under tests/run.sh), for device memory. */
struct cudart {
	int (*malloc_)(void **p, size_t n);
	int (*free_)(void *p);
	int (*memcpy_)(void *dst, const void *src, size_t n, int kind);
};
#define H2D 1
#define D2H 2

static int cudart_open(struct cudart *c)
{
	static const char *const names[] = {"libcudart.so.13", "libcudart.so.12"};
	for (int i = 0; i < 2; i++) {
		void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
		if (!h)
			continue;
		void *m = dlsym(h, "cudaMalloc"), *f = dlsym(h, "cudaFree"),
		     *y = dlsym(h, "cudaMemcpy");
		if (m && f && y) {
			memcpy(&c->malloc_, &m, sizeof m);
			memcpy(&c->free_, &f, sizeof f);
			memcpy(&c->memcpy_, &y, sizeof y);
			return 0;
		}
	}
	return -1;
}

/* Box (r0, c0, nr, nc) of x into device memory of the whole matrix's size at element offset
 * (r0, c0) with strides {cols, 1}: copied back and checked, the rest still the pattern. And the
 * same box contiguous on the device. */
static void device_box(dreader *d, const struct cudart *cu, const struct mat *x,
		       uint64_t r0, uint64_t c0, uint64_t nr, uint64_t nc)
{
	uint64_t n = x->rows * x->cols;
	float *host = malloc(n * 4);
	void *dev = NULL;
	REQUIRE(host && cu->malloc_(&dev, n * 4) == 0);
	memset(host, 0xff, n * 4);
	REQUIRE(cu->memcpy_(dev, host, n * 4, H2D) == 0);
	uint64_t off[2] = {r0, c0}, len[2] = {nr, nc}, st[2] = {x->cols, 1};
	float *at = (float *)dev + r0 * x->cols + c0;
	CHECK_OK(dreader_restore_box_mem(d, (size_t)x->g, off, len, 0, at, st,
						  (n - r0 * x->cols - c0) * 4));
	REQUIRE(cu->memcpy_(host, dev, n * 4, D2H) == 0);
	CHECK(box_ok(x, host + r0 * x->cols + c0, r0, c0, nr, nc, x->cols, 1));
	uint32_t before = 0xffffffffu;
	if (r0 * x->cols + c0) /* the element before the box's first one is outside it */
		memcpy(&before, host + r0 * x->cols + c0 - 1, 4);
	CHECK(before == 0xffffffffu);
	CHECK_OK(dreader_restore_box_mem(d, (size_t)x->g, off, len, 0, dev, NULL,
						  nr * nc * 4));
	REQUIRE(cu->memcpy_(host, dev, nr * nc * 4, D2H) == 0);
	CHECK(box_ok(x, host, r0, c0, nr, nc, nc, 1));
	cu->free_(dev);
	free(host);
}

static void test_device(dreader *d)
{
	uint64_t off[2] = {0, 0}, len[2] = {1, 1};
	float f;
	CHECK_RC(dreader_restore_box_mem(d, (size_t)M.g, off, len, 99, &f, NULL, 4),
		 -CKPT_E_INVAL);
	struct cudart cu;
	if (!ckpt_gpu_cuda() || cudart_open(&cu)) {
		printf("CUDA destinations: skipped (%s)\n",
		       ckpt_gpu_cuda() ? "no CUDA runtime symbols" : ckpt_gpu_cuda_error());
		CHECK_RC(dreader_restore_box_mem(d, (size_t)M.g, off, len, 0, &f, NULL, 4),
			 -CKPT_E_UNSUPPORTED);
		return;
	}
	/* A host pointer declared as device memory. */
	CHECK_RC(dreader_restore_box_mem(d, (size_t)M.g, off, len, 0, &f, NULL, 4),
		 -CKPT_E_INVAL);
	device_box(d, &cu, &M, 0, 256, MR, 256);     /* pieces out of the staging buffer */
	device_box(d, &cu, &M, 100, 0, 500, MC);      /* whole chunks staged, pieces around */
	device_box(d, &cu, &W, 3, 16384, 50, 16384);  /* whole chunks of every row */
	device_box(d, &cu, &W, 1, 999, 60, 20000);
	device_box(d, &cu, &M, 0, 0, MR, MC);
	printf("CUDA destinations: checked through %s\n", ckpt_gpu_cuda()->name);
}

/* ---- damage ------------------------------------------------------------------------------ */
struct hit {
	char tensor[256];
	uint64_t chunk;
	long n;
};

static void on_damage(const ckpt_damage *dm, void *arg)
{
	struct hit *h = arg;
	if (dm->tensor && !h->n++)
		snprintf(h->tensor, sizeof h->tensor, "%s", dm->tensor);
	h->chunk = dm->chunk;
}

/* Flips a payload byte of the first record of a pack; the box restores that read the damaged
 * chunk fail naming it, in pieces (a narrow box of its rows) and in place (the whole tensor); a
 * box of the rows of another shard restores. */
static void test_damage(const char *dir)
{
	char pd[4200];
	snprintf(pd, sizeof pd, "%s/packs", dir);
	char *pack = t_first_file(pd, ".pack");
	REQUIRE(pack);
	t_flip_byte(pack, 4096 + 64 + 1000);
	free(pack);
	ckpt_store *s = t_open_store(dir, CHUNK, 0);
	dreader *d;
	REQUIRE(s && !dreader_open(s, STEP, &d));
	struct hit h = {.n = 0};
	long nd = reader1_verify(dreader_checkpoint(d), on_damage, NULL, &h);
	if (nd != 1)
		fprintf(stderr, "verify: %ld damaged chunks (%s)\n", nd, nd < 0 ? ckpt_errmsg() : "");
	CHECK(nd == 1);
	/* Which global tensor, shard and rows the damaged chunk holds. */
	const struct mat *x = NULL;
	uint64_t r0 = 0, c0 = 0;
	for (int k = 0; k < NMAT && !x; k++)
		for (size_t j = 0; j < NR && !x; j++) {
			ckpt_shard sh;
			ckpt_tensor_info ti;
			REQUIRE(!dreader_shard(d, (size_t)mats[k]->g, j, &sh));
			REQUIRE(!reader1_tensor(dreader_checkpoint(d), sh.tensor, &ti));
			if (!strcmp(ti.name, h.tensor)) {
				x = mats[k];
				r0 = sh.offsets[0] + h.chunk * CHUNK / (x->cols * 4);
				c0 = h.chunk * CHUNK % (x->cols * 4) / 4;
			}
		}
	REQUIRE(x);
	float *got = malloc(x->rows * x->cols * 4);
	REQUIRE(got);
	uint64_t nc = x->cols - c0 < 16 ? x->cols - c0 : 16, off[2] = {r0, c0}, len[2] = {1, nc}, all[2] = {x->rows, x->cols}, zero[2] = {0, 0};
	char chunk[64];
	snprintf(chunk, sizeof chunk, "chunk %" PRIu64, h.chunk);
	CHECK_RC(dreader_restore_box(d, (size_t)x->g, off, len, got, nc * 4),
		 -CKPT_E_CHECKSUM);
	CHECK(strstr(ckpt_errmsg(), h.tensor) && strstr(ckpt_errmsg(), chunk) &&
	      strstr(ckpt_errmsg(), "restore box of"));
	CHECK_RC(dreader_restore_box(d, (size_t)x->g, zero, all, got,
					      x->rows * x->cols * 4), -CKPT_E_CHECKSUM);
	CHECK(strstr(ckpt_errmsg(), h.tensor) && strstr(ckpt_errmsg(), chunk));
	off[0] = (r0 + x->rows / NR) % x->rows;
	CHECK_OK(dreader_restore_box(d, (size_t)x->g, off, len, got, nc * 4));
	CHECK(box_ok(x, got, off[0], c0, 1, nc, nc, 1));
	free(got);
	dreader_close(d);
	ckpt_store_close(s);
}

static dreader *open_world(ckpt_store **s, const char *dir, int compress)
{
	save_world(dir, compress);
	dreader *d;
	REQUIRE((*s = t_open_store(dir, CHUNK, compress)) && !dreader_open(*s, STEP, &d));
	REQUIRE((M.g = dreader_find(d, "m")) >= 0 && (W.g = dreader_find(d, "w")) >= 0 &&
		(N.g = dreader_find(d, "n")) >= 0);
	return d;
}

int main(void)
{
	/* The CUDA module of this build, over whatever runtime LD_LIBRARY_PATH gives (the test
	 * double under tests/run.sh). */
	const char *b = getenv("B");
	char mod[4096];
	snprintf(mod, sizeof mod, "%s/lib/%s", b && *b ? b : "build", CKPT_GPU_MODULE);
	setenv("CKPT_CUDA_MODULE", mod, 0);
	char *dir = t_tmpdir("reshard"), *zdir = t_tmpdir("reshard-zstd");
	ckpt_store *s;
	dreader *d = open_world(&s, dir, 0);
	test_exact(d);
	test_strided(d, &M);
	test_strided(d, &W);
	test_device(d);
	dreader_close(d);
	ckpt_store_close(s);
	test_damage(dir);
	/* Compressed chunks: decoded into the reader's chunk, then copied. */
	d = open_world(&s, zdir, 1);
	for (int k = 0; k < NMAT; k++) {
		const struct mat *x = mats[k];
		uint64_t off[2] = {9, x->cols / 4 + x->cols / 8}, len[2] = {x->rows - 20, x->cols / 4};
		float *got = malloc(len[0] * len[1] * 4);
		REQUIRE(got);
		CHECK_OK(dreader_restore_box(d, (size_t)x->g, off, len, got,
						      len[0] * len[1] * 4));
		CHECK(box_ok(x, got, off[0], off[1], len[0], len[1], len[1], 1));
		free(got);
	}
	test_strided(d, &M);
	dreader_close(d);
	ckpt_store_close(s);
	t_rmrf(dir);
	t_rmrf(zdir);
	free(dir);
	free(zdir);
	return t_done();
}
