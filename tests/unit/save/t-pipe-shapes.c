/* Shapes of state through the pipeline: 10,000 tiny tensors (a few bytes each, many per slab); one
 * tensor spanning many slabs of a small pool; no tensors at all; zero-byte tensors and scalars;
 * zstd compression in the pipeline (with dedup across compression settings). */
#include "t-pipe-util.h"

#define CS (64u << 10)
#define MIN_(a, b) ((a) < (b) ? (a) : (b))

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 1
#else
#define SLOW 0
#endif

static struct tp_set *tiny_set(size_t n, uint64_t seed)
{
	struct tp_set *s = calloc(1, sizeof *s);
	REQUIRE(s);
	s->nt = n;
	s->t = calloc(n, sizeof *s->t);
	REQUIRE(s->t);
	static const ckpt_dtype dts[] = {CKPT_DTYPE_U8, CKPT_DTYPE_F16, CKPT_DTYPE_F32, CKPT_DTYPE_F64,
					 CKPT_DTYPE_BOOL, CKPT_DTYPE_I64};
	for (size_t i = 0; i < n; i++) {
		struct tp_tensor *t = &s->t[i];
		snprintf(t->name, sizeof t->name, "opt.state.%zu", i);
		t->dt = dts[i % 6];
		t->ndim = (i % 7 == 0) ? 0 : 1;
		t->shape[0] = 1 + i % 4;
		t->n = ckpt_dtype_size(t->dt) * (t->ndim ? t->shape[0] : 1);
		t->data = malloc(t->n);
		REQUIRE(t->data);
		t_fill(t->data, t->n, seed * 7919 + i);
	}
	return s;
}

static void test_tiny(void)
{
	char *dir = t_tmpdir("sh-tiny");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 4));
	struct tp_set *a = tiny_set(10000, 1);
	ckpt_stats st;
	save1 *sv = tp_begin(s, 1, a);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait_snapshot(sv));
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.tensors == 10000);
	CHECK(st.chunks == 10000);
	CHECK(st.pool_peak <= st.pool_bytes);
	printf("10000 tiny tensors: %.3fs, %llu new chunks, %llu bytes written\n", st.seconds,
	       (unsigned long long)st.chunks_new, (unsigned long long)st.bytes_written);
	tp_check(s, 1, a);
	/* Unchanged: nothing new, nothing written. */
	CHECK_OK(tp_save(s, 2, a, &st));
	CHECK(st.chunks_new == 0 && st.chunks_reused == 10000);
	CHECK(st.bytes_written == 0);
	/* One changed. */
	a->t[5000].data[0] ^= 1;
	CHECK_OK(tp_save(s, 3, a, &st));
	CHECK(st.chunks_new == 1);
	tp_check(s, 3, a);
	ckpt_store_close(s);
	tp_set_free(a);
	t_rmrf(dir);
	free(dir);
}

static void test_huge(int compress)
{
	char *dir = t_tmpdir("sh-huge");
	/* 3 slabs of 272 KiB; one tensor of 40 MiB (16 under sanitizers): ~150 slabs. */
	ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 3,
					      .compress = compress));
	struct tp_set *a = tp_set_new(1, SLOW ? 16u << 20 : 40u << 20, 2);
	if (compress) /* runs of zeros: compressible */
		for (uint64_t off = 0; off < a->t[0].n; off += 2 * CS)
			memset(a->t[0].data + off, 0, MIN_(CS, a->t[0].n - off));
	ckpt_stats st;
	save1 *sv = tp_begin(s, 1, a);
	CHECK_OK(save1_submit(sv));
	CHECK(save1_poll(sv) == 0);
	CHECK_OK(save1_wait_snapshot(sv));
	struct tp_set *want = tp_set_dup(a);
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.chunks == (a->t[0].n + CS - 1) / CS);
	CHECK(st.wait_seconds > 0);
	CHECK(st.pool_peak <= st.pool_bytes);
	/* Chunks of zeros are all the same chunk. */
	if (compress) {
		CHECK(st.chunks_reused > 0);
		CHECK(st.bytes_stored < st.logical_bytes);
	}
	printf("one tensor of %llu MiB%s: %.3fs, waited %.3fs, %llu chunks (%llu new), stored %llu\n",
	       (unsigned long long)(a->t[0].n >> 20), compress ? " (zstd)" : "", st.seconds,
	       st.wait_seconds, (unsigned long long)st.chunks, (unsigned long long)st.chunks_new,
	       (unsigned long long)st.bytes_stored);
	tp_check(s, 1, want);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(want);
	t_rmrf(dir);
	free(dir);
}

static void test_empty_shapes(void)
{
	char *dir = t_tmpdir("sh-empty");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.threads = 2));
	struct tp_set *none = tp_set_new(0, 0, 0);
	ckpt_stats st;
	CHECK_OK(tp_save(s, 1, none, &st));
	CHECK(st.tensors == 0 && st.chunks == 0 && st.bytes_written == 0);
	tp_check(s, 1, none);
	/* Zero-byte tensors and a scalar only. */
	struct tp_set *z = tp_set_new(3, 0, 0);
	for (size_t i = 0; i < 3; i++) {
		free(z->t[i].data);
		z->t[i].ndim = i == 2 ? 0 : 2;
		z->t[i].shape[0] = i == 0 ? 0 : 3;
		z->t[i].shape[1] = 0;
		z->t[i].dt = CKPT_DTYPE_F32;
		z->t[i].n = i == 2 ? 4 : 0;
		z->t[i].data = calloc(1, 8);
	}
	z->t[2].data[0] = 42;
	save1 *sv = tp_begin(s, 2, z);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait_snapshot(sv));
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.tensors == 3 && st.chunks == 1);
	tp_check(s, 2, z);
	ckpt_store_close(s);
	tp_set_free(none);
	tp_set_free(z);
	t_rmrf(dir);
	free(dir);
}

/* zstd: compressible data stores smaller; the same data saved with compression off dedups
 * against the compressed chunks, and the other way round. */
static void test_zstd(void)
{
	char *dir = t_tmpdir("sh-zstd");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.compress = CKPT_COMPRESS_ZSTD, .pool = 1u << 20,
					      .io_size = 256u << 10, .threads = 4));
	struct tp_set *a = tp_set_new(8, 500000, 3);
	for (size_t i = 0; i < a->nt; i++) /* bf16-like: every other byte small */
		for (uint64_t k = 0; k < a->t[i].n; k += 2)
			a->t[i].data[k] &= 0x0f;
	ckpt_stats st;
	CHECK_OK(tp_save(s, 1, a, &st));
	CHECK(st.bytes_stored < st.logical_bytes);
	tp_check(s, 1, a);
	struct tp_set *b = tp_set_dup(a);
	tp_set_touch(b, CS, 3, 4);
	save1 *sv = tp_begin(s, 2, b);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait_snapshot(sv));
	tp_set_touch(b, CS, 1, 99); /* after the snapshot: must not reach the checkpoint */
	CHECK_OK(save1_wait(sv, &st));
	tp_set_touch(b, CS, 1, 99); /* undo (xor) */
	CHECK(st.chunks_reused > 0 && st.chunks_new > 0);
	tp_check(s, 2, b);
	ckpt_store_close(s);
	/* Compression off on the same store: unchanged data is all reused. */
	s = tp_open(dir, &TP_OPTS(.no_create = 1, .compress = CKPT_COMPRESS_NONE, .threads = 2));
	CHECK_OK(tp_save(s, 3, b, &st));
	CHECK(st.chunks_new == 0);
	tp_check(s, 3, b);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	test_empty_shapes();
	test_tiny();
	test_huge(0);
	test_huge(1);
	test_zstd();
	return t_done();
}
