/* Save/restore round trips: every dtype, odd sizes (0 bytes, 1 byte, not a multiple of the chunk
 * size), many small tensors, metadata, every chunk size class, with and without compression. */
#include "helpers.h"

#include <sys/stat.h>

static const ckpt_dtype all_dtypes[] = {
	CKPT_DTYPE_BOOL, CKPT_DTYPE_U8, CKPT_DTYPE_I8, CKPT_DTYPE_F8_E5M2, CKPT_DTYPE_F8_E4M3,
	CKPT_DTYPE_I16, CKPT_DTYPE_U16, CKPT_DTYPE_F16, CKPT_DTYPE_BF16, CKPT_DTYPE_I32,
	CKPT_DTYPE_U32, CKPT_DTYPE_F32, CKPT_DTYPE_F64, CKPT_DTYPE_I64, CKPT_DTYPE_U64,
};

struct tens {
	char name[64];
	ckpt_dtype dt;
	unsigned ndim;
	uint64_t shape[4];
	uint8_t *data;
	uint64_t n;
};

static void make(struct tens *t, const char *name, ckpt_dtype dt, unsigned ndim,
		 const uint64_t *shape, uint64_t seed, int smooth)
{
	snprintf(t->name, sizeof t->name, "%s", name);
	t->dt = dt;
	t->ndim = ndim;
	t->n = ckpt_dtype_size(dt);
	for (unsigned i = 0; i < ndim; i++) {
		t->shape[i] = shape[i];
		t->n *= shape[i];
	}
	t->data = malloc(t->n ? t->n : 1);
	t_fill(t->data, t->n, seed);
	if (smooth) /* compressible: small values in every other byte, like bf16 exponents */
		for (uint64_t i = 0; i < t->n; i += 2)
			t->data[i] &= 0x0f;
}

static void run(uint32_t cs, int compress)
{
	char *dir = t_tmpdir("rt");
	ckpt_store *s = t_open_store(dir, cs, compress);
	uint32_t chunk = cs ? cs : (1u << 20);
	enum { NT = 15 + 8 + 200 };
	struct tens *t = calloc(NT, sizeof *t);
	size_t k = 0;
	for (size_t i = 0; i < sizeof all_dtypes / sizeof *all_dtypes; i++) {
		uint64_t sh[2] = {3 + i, chunk / 7 + i}; /* odd sizes around a chunk */
		char nm[32];
		snprintf(nm, sizeof nm, "dtype.%s", ckpt_dtype_name(all_dtypes[i]));
		make(&t[k++], nm, all_dtypes[i], 2, sh, 100 + i, (int)(i & 1));
	}
	uint64_t zero[1] = {0}, one[1] = {1}, big[1] = {3ull * chunk + 5}, exact[1] = {2ull * chunk};
	make(&t[k++], "empty", CKPT_DTYPE_F32, 1, zero, 1, 0);
	make(&t[k++], "scalar", CKPT_DTYPE_F64, 0, NULL, 2, 0);
	make(&t[k++], "one byte", CKPT_DTYPE_U8, 1, one, 3, 0);
	make(&t[k++], "big/not-a-multiple", CKPT_DTYPE_U8, 1, big, 4, 1);
	make(&t[k++], "exact-multiple", CKPT_DTYPE_U8, 1, exact, 5, 0);
	uint64_t e4[4] = {2, 0, 3, 4};
	make(&t[k++], "zero-in-shape", CKPT_DTYPE_BF16, 4, e4, 6, 0);
	make(&t[k++], "dup-of-big", CKPT_DTYPE_U8, 1, big, 4, 1); /* same bytes: dedup in one save */
	uint64_t z1[1] = {chunk};
	make(&t[k], "zeros", CKPT_DTYPE_U8, 1, z1, 7, 0);
	memset(t[k++].data, 0, chunk);
	for (int i = 0; i < 200; i++) {
		char nm[64];
		uint64_t sh[1] = {(uint64_t)(i % 37)};
		snprintf(nm, sizeof nm, "small.%03d \xc3\xa9\"\\", i);
		make(&t[k++], nm, CKPT_DTYPE_I32, 1, sh, 1000 + (uint64_t)i, 0);
	}
	REQUIRE(k == NT);

	save1 *sv;
	CHECK_OK(save1_begin(s, 7, &sv));
	for (size_t i = 0; i < k; i++)
		CHECK_OK(save1_add_tensor(sv, t[i].name, t[i].dt, t[i].ndim, t[i].shape,
					      CKPT_MEM_HOST, t[i].data));
	CHECK_OK(save1_set_meta(sv, "lr", "0.001"));
	CHECK_OK(save1_set_meta(sv, "note", "unicode \xe2\x9c\x93 and \"quotes\""));
	CHECK_OK(save1_set_meta(sv, "lr", "0.002")); /* last value wins */
	ckpt_stats st;
	CHECK_OK(save1_commit(sv, &st));
	CHECK(st.tensors == k);
	CHECK(st.chunks == st.chunks_new + st.chunks_reused);
	CHECK(st.chunks_reused >= 4); /* dup-of-big's chunks */

	reader1 *r;
	CHECK_OK(reader1_open(s, CKPT_STEP_LATEST, &r));
	REQUIRE(r);
	CHECK(reader1_tensor_count(r) == k);
	CHECK(reader1_meta_count(r) == 2);
	CHECK(!strcmp(reader1_get_meta(r, "lr"), "0.002"));
	CHECK(!strcmp(reader1_get_meta(r, "note"), "unicode \xe2\x9c\x93 and \"quotes\""));
	CHECK(reader1_get_meta(r, "missing") == NULL);
	for (size_t i = 0; i < k; i++) {
		ckpt_tensor_info ti;
		CHECK_OK(reader1_tensor(r, i, &ti));
		CHECK(!strcmp(ti.name, t[i].name));
		CHECK(ti.dtype == t[i].dt && ti.ndim == t[i].ndim && ti.nbytes == t[i].n);
		for (unsigned d = 0; d < ti.ndim; d++)
			CHECK(ti.shape[d] == t[i].shape[d]);
		CHECK(reader1_find(r, t[i].name) == (long)i);
		uint8_t *buf = malloc(t[i].n + 1);
		memset(buf, 0xAA, t[i].n + 1);
		CHECK_OK(reader1_restore(r, i, CKPT_MEM_HOST, buf, t[i].n));
		CHECK(memcmp(buf, t[i].data, t[i].n) == 0);
		CHECK(buf[t[i].n] == 0xAA); /* nothing written past the end */
		if (t[i].n)
			CHECK_RC(reader1_restore(r, i, CKPT_MEM_HOST, buf, t[i].n - 1), -CKPT_E_INVAL);
		free(buf);
	}
	CHECK(reader1_find(r, "nope") == -CKPT_E_NOTFOUND);
	CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
	reader1_close(r);

	/* Reopen the store from disk: same content. */
	ckpt_store_close(s);
	s = t_open_store(dir, 0, 0);
	CHECK_OK(reader1_open(s, 7, &r));
	uint8_t *b = malloc(t[18].n);
	CHECK_OK(reader1_restore(r, 18, CKPT_MEM_HOST, b, t[18].n));
	CHECK(memcmp(b, t[18].data, t[18].n) == 0);
	free(b);
	reader1_close(r);

	ckpt_store_close(s);
	for (size_t i = 0; i < k; i++)
		free(t[i].data);
	free(t);
	t_rmrf(dir);
	free(dir);
}

static void bad_args(void)
{
	char *dir = t_tmpdir("args");
	ckpt_store *s = t_open_store(dir, 0, 0);
	save1 *sv;
	uint64_t sh[1] = {4};
	float f[4] = {0};
	CHECK_RC(save1_begin(s, CKPT_STEP_LATEST, &sv), -CKPT_E_INVAL);
	CHECK_OK(save1_begin(s, 1, &sv));
	save1 *sv2;
	/* Several saves may be open on one handle; the same step twice may not. */
	CHECK_RC(save1_begin(s, 1, &sv2), -CKPT_E_EXISTS);
	CHECK_OK(save1_begin(s, 2, &sv2));
	save1_abort(sv2);
	CHECK_RC(save1_add_tensor(sv, "", CKPT_DTYPE_F32, 1, sh, CKPT_MEM_HOST, f), -CKPT_E_INVAL);
	CHECK_RC(save1_add_tensor(sv, "x", 99, 1, sh, CKPT_MEM_HOST, f), -CKPT_E_INVAL);
	CHECK_RC(save1_add_tensor(sv, "x", CKPT_DTYPE_F32, 1, sh, 0, f), -CKPT_E_UNSUPPORTED);
	CHECK_RC(save1_add_tensor(sv, "x", CKPT_DTYPE_F32, 1, sh, CKPT_MEM_HOST, NULL), -CKPT_E_INVAL);
	uint64_t huge[2] = {1ull << 62, 8};
	CHECK_RC(save1_add_tensor(sv, "x", CKPT_DTYPE_F32, 2, huge, CKPT_MEM_HOST, f), -CKPT_E_INVAL);
	CHECK_OK(save1_add_tensor(sv, "x", CKPT_DTYPE_F32, 1, sh, CKPT_MEM_HOST, f));
	CHECK_RC(save1_add_tensor(sv, "x", CKPT_DTYPE_F32, 1, sh, CKPT_MEM_HOST, f), -CKPT_E_INVAL);
	CHECK(strstr(ckpt_errmsg(), "twice") != NULL);
	CHECK_RC(save1_set_meta(sv, "", "v"), -CKPT_E_INVAL);
	CHECK_OK(save1_commit(sv, NULL));
	CHECK_RC(save1_begin(s, 1, &sv), -CKPT_E_EXISTS);
	reader1 *r;
	CHECK_RC(reader1_open(s, 99, &r), -CKPT_E_NOTFOUND);
	ckpt_store_close(s);

	ckpt_options *o = ckpt_options_create();
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 1000), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 32 << 10), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 128ll << 20), -CKPT_E_INVAL);
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 64 << 10));
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_COMPRESS, 5), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_ZSTD_LEVEL, 0), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_set(o, (ckpt_option)999, 0), -CKPT_E_INVAL);
	/* A missing store is not created unless asked. */
	char miss[4200];
	snprintf(miss, sizeof miss, "%s/missing", dir);
	CHECK_RC(ckpt_store_open(miss, o, &s), -CKPT_E_NOTFOUND);
	CHECK(s == NULL);
	CHECK(strstr(ckpt_errmsg(), "missing") != NULL);
	/* A non-empty directory that is not a store is refused, not taken over. */
	snprintf(miss, sizeof miss, "%s/packs", dir);
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	char other[4200];
	snprintf(other, sizeof other, "%s/other", dir);
	mkdir(other, 0755);
	snprintf(miss, sizeof miss, "%s/other/file", dir);
	FILE *f2 = fopen(miss, "w");
	fclose(f2);
	CHECK_RC(ckpt_store_open(other, o, &s), -CKPT_E_INVAL);
	ckpt_options_free(o);
	CHECK(!strcmp(ckpt_strerror(-CKPT_E_BUSY), "store busy"));
	CHECK(!strcmp(ckpt_strerror(12345), "unknown error"));
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	run(0, CKPT_COMPRESS_NONE);
	run(64 << 10, CKPT_COMPRESS_NONE);
	run(64 << 10, CKPT_COMPRESS_ZSTD);
	run(256 << 10, CKPT_COMPRESS_ZSTD);
	bad_args();
	return t_done();
}
