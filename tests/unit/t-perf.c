/* What the performance work must not break or hide. The restore statistics name the
 * threads that read; the snapshot hashes each chunk right after its copy (fuse_hash) exactly when
 * nobody waits for the snapshot alone, and such saves round-trip and dedup like the others;
 * ckpt_store_reserve() allocates the pool before the first save; a dense save after sparse ones
 * stops hashing in the caller's memory after a few misses (the snapshot stays a copy). */
#include "helpers.h"

#include "save/save.h"
#include "store/store.h"

enum { NT = 4, TB = 3 << 20 };

static uint8_t *src[NT];

static void save_state(ckpt_store *s, uint64_t step)
{
	save1 *sv;
	REQUIRE(save1_begin(s, step, &sv) == 0);
	for (int i = 0; i < NT; i++) {
		char nm[32];
		uint64_t sh[1] = {TB};
		snprintf(nm, sizeof nm, "t%d", i);
		CHECK_OK(save1_add_tensor(sv, nm, CKPT_DTYPE_U8, 1, sh, CKPT_MEM_HOST, src[i]));
	}
	CHECK_OK(save1_commit(sv, NULL));
}

static void *dst_for(size_t i, const ckpt_tensor_info *info, int *mem, void *arg)
{
	(void)info, (void)mem;
	return ((uint8_t **)arg)[i];
}

/* reader1_stats().threads read 0 after a restore. */
static void reader_threads(void)
{
	char *dir = t_tmpdir("perf-rt");
	ckpt_store *s = t_open_store(dir, 0, 0);
	save_state(s, 1);
	uint8_t *dst[NT];
	for (int i = 0; i < NT; i++)
		dst[i] = malloc(TB);
	reader1 *r;
	ckpt_stats st;
	CHECK_OK(reader1_open(s, 1, &r));
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, dst[0], TB));
	reader1_stats(r, &st);
	CHECK(st.threads == 1); /* the caller's thread */
	reader1_close(r);
	CHECK_OK(reader1_open(s, 1, &r));
	CHECK_OK(reader1_restore_all(r, dst_for, dst));
	reader1_stats(r, &st);
	CHECK(st.threads >= 1 && st.threads <= 256);
	for (int i = 0; i < NT; i++)
		CHECK(memcmp(dst[i], src[i], TB) == 0);
	reader1_close(r);
	CHECK_OK(reader1_open(s, 1, &r));
	CHECK_OK(reader1_restore_range(r, 1, 5, dst[1], 100));
	reader1_stats(r, &st);
	CHECK(st.threads == 1);
	reader1_close(r);
	for (int i = 0; i < NT; i++)
		free(dst[i]);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

static save1 *begin_all(ckpt_store *s, uint64_t step, int n)
{
	save1 *sv;
	REQUIRE(save1_begin(s, step, &sv) == 0);
	for (int i = 0; i < n; i++) {
		char nm[32];
		uint64_t sh[1] = {TB};
		snprintf(nm, sizeof nm, "t%d", i);
		CHECK_OK(save1_add_tensor(sv, nm, CKPT_DTYPE_U8, 1, sh, CKPT_MEM_HOST, src[i]));
	}
	return sv;
}

static void restore_check(ckpt_store *s, uint64_t step)
{
	reader1 *r;
	CHECK_OK(reader1_open(s, step, &r));
	uint8_t *b = malloc(TB);
	for (int i = 0; i < NT; i++) {
		CHECK_OK(reader1_restore(r, (size_t)i, CKPT_MEM_HOST, b, TB));
		CHECK(memcmp(b, src[i], TB) == 0);
	}
	free(b);
	CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
	reader1_close(r);
}

/* The pool here is 4 MiB: a save of NT x 3 MiB streams through it. */
static void fuse_hash(void)
{
	char *dir = t_tmpdir("perf-fuse");
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 4 << 20);
	ckpt_options_set(o, CKPT_OPT_IO_SIZE, 1 << 20);
	ckpt_options_set(o, CKPT_OPT_THREADS, 2);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	ckpt_stats st;
	/* Fits in the pool, asynchronous: copy first, the caller gets its tensors back sooner. */
	save1 *sv = begin_all(s, 1, 1);
	CHECK_OK(save1_submit(sv));
	CHECK(!sv->ps.fuse_hash);
	CHECK_OK(save1_wait(sv, &st));
	/* Larger than the pool: the snapshot waits for writes anyway. */
	sv = begin_all(s, 2, NT);
	CHECK_OK(save1_submit(sv));
	CHECK(sv->ps.fuse_hash);
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.chunks_new == (uint64_t)(NT - 1) * 3 && st.chunks_reused == 3);
	restore_check(s, 2);
	/* What save1_commit() sets: the caller waits for the whole save. */
	sv = begin_all(s, 3, 1);
	sv->sync = true;
	CHECK_OK(save1_submit(sv));
	CHECK(sv->ps.fuse_hash);
	CHECK_OK(save1_wait(sv, &st));
	/* A fused save dedups against the fused one before it. */
	t_fill(src[2] + (1 << 20), 100, 99);
	sv = begin_all(s, 4, NT);
	CHECK_OK(save1_commit(sv, &st));
	CHECK(st.chunks_new == 1 && st.chunks_reused == (uint64_t)NT * 3 - 1);
	restore_check(s, 4);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

static void reserve(void)
{
	char *dir = t_tmpdir("perf-res");
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_IO_SIZE, 1 << 20);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 4 << 20);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	CHECK_RC(ckpt_store_reserve(NULL, 0), -CKPT_E_INVAL);
	CHECK_RC(ckpt_store_reserve(s, 4096), -CKPT_E_INVAL);
	CHECK(save_store_of(s)->pipe == NULL); /* nothing allocated at open */
	CHECK_OK(ckpt_store_reserve(s, 12 << 20));
	CHECK(save_store_of(s)->pipe != NULL);
	/* Smaller than what is there: kept. */
	CHECK_OK(ckpt_store_reserve(s, 0));
	save1 *sv = begin_all(s, 1, 1);
	ckpt_stats st;
	CHECK_OK(save1_submit(sv));
	/* Growing under a save in flight is refused, with the reason. */
	CHECK_RC(ckpt_store_reserve(s, 64 << 20), -CKPT_E_BUSY);
	CHECK(strstr(ckpt_errmsg(), "in flight") != NULL);
	CHECK_OK(save1_wait(sv, &st));
	uint64_t slab = (1 << 20) + 4096; /* one 1 MiB record per slab */
	CHECK(st.pool_bytes == (12 << 20) / slab * slab);
	/* No save live: the pool grows, and the next save uses it. */
	CHECK_OK(ckpt_store_reserve(s, 24 << 20));
	sv = begin_all(s, 2, NT);
	CHECK_OK(save1_commit(sv, &st));
	CHECK(st.pool_bytes == (24 << 20) / slab * slab);
	CHECK(st.chunks_reused == 3);
	restore_check(s, 2);
	ckpt_store_close(s);
	ckpt_options_set(o, CKPT_OPT_CREATE, 0);
	ckpt_options_set(o, CKPT_OPT_READ_ONLY, 1);
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	CHECK_RC(ckpt_store_reserve(s, 0), -CKPT_E_PERM);
	ckpt_store_close(s);
	ckpt_options_free(o);
	t_rmrf(dir);
	free(dir);
}

static void change(double frac, uint64_t seed)
{
	uint64_t x = seed;
	for (int i = 0; i < NT; i++)
		for (uint64_t c = 0; c < TB; c += 64 << 10)
			if ((double)(t_rand(&x) % 1000) < frac * 1000)
				src[i][c + t_rand(&x) % (64 << 10)] ^= 0x5a;
}

static void dense_after_sparse(void)
{
	char *dir = t_tmpdir("perf-das");
	ckpt_store *s = t_open_store(dir, 64 << 10, 0); /* 48 chunks per tensor */
	ckpt_stats st;
	save1 *sv = begin_all(s, 1, NT);
	CHECK_OK(save1_commit(sv, &st)); /* first time: copy only; hint: dense */
	change(0.05, 7);
	sv = begin_all(s, 2, NT);
	CHECK_OK(save1_commit(sv, &st)); /* copy only; hint: sparse */
	change(0.05, 8);
	sv = begin_all(s, 3, NT);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait_snapshot(sv));
	CHECK(sv->ps.hf_hit > 100); /* sparse: hashed first, most chunks not copied */
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.chunks_reused > 100);
	change(1.0, 9); /* every chunk changes */
	sv = begin_all(s, 4, NT);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait_snapshot(sv));
	/* 16 misses for the save, give or take the workers racing past the limit, not 192. */
	CHECK(sv->ps.hf_hit == 0);
	CHECK(sv->ps.hf_miss >= 2 && sv->ps.hf_miss <= 16 + 8);
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.chunks_new == (uint64_t)NT * 48);
	restore_check(s, 4);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	for (int i = 0; i < NT; i++) {
		src[i] = malloc(TB);
		t_fill(src[i], TB, 40 + (uint64_t)i);
	}
	reader_threads();
	fuse_hash();
	reserve();
	dense_after_sparse();
	for (int i = 0; i < NT; i++)
		free(src[i]);
	return t_done();
}
