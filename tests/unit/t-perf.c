/* Issue 13: what the performance work must not break or hide. The restore statistics name the
 * threads that read. */
#include "helpers.h"

enum { NT = 4, TB = 3 << 20 };

static uint8_t *src[NT];

static void save_state(ckpt_store *s, uint64_t step)
{
	ckpt_save *sv;
	REQUIRE(ckpt_save_begin(s, step, &sv) == 0);
	for (int i = 0; i < NT; i++) {
		char nm[32];
		uint64_t sh[1] = {TB};
		snprintf(nm, sizeof nm, "t%d", i);
		CHECK_OK(ckpt_save_add_tensor(sv, nm, CKPT_DTYPE_U8, 1, sh, CKPT_MEM_HOST, src[i]));
	}
	CHECK_OK(ckpt_save_commit(sv, NULL));
}

static void *dst_for(size_t i, const ckpt_tensor_info *info, int *mem, void *arg)
{
	(void)info, (void)mem;
	return ((uint8_t **)arg)[i];
}

/* ckpt_reader_stats().threads read 0 after a restore (issue 13). */
static void reader_threads(void)
{
	char *dir = t_tmpdir("perf-rt");
	ckpt_store *s = t_open_store(dir, 0, 0);
	save_state(s, 1);
	uint8_t *dst[NT];
	for (int i = 0; i < NT; i++)
		dst[i] = malloc(TB);
	ckpt_reader *r;
	ckpt_stats st;
	CHECK_OK(ckpt_reader_open(s, 1, &r));
	CHECK_OK(ckpt_reader_restore(r, 0, CKPT_MEM_HOST, dst[0], TB));
	ckpt_reader_stats(r, &st);
	CHECK(st.threads == 1); /* the caller's thread */
	ckpt_reader_close(r);
	CHECK_OK(ckpt_reader_open(s, 1, &r));
	CHECK_OK(ckpt_reader_restore_all(r, dst_for, dst));
	ckpt_reader_stats(r, &st);
	CHECK(st.threads >= 1 && st.threads <= 256);
	for (int i = 0; i < NT; i++)
		CHECK(memcmp(dst[i], src[i], TB) == 0);
	ckpt_reader_close(r);
	CHECK_OK(ckpt_reader_open(s, 1, &r));
	CHECK_OK(ckpt_reader_restore_range(r, 1, 5, dst[1], 100));
	ckpt_reader_stats(r, &st);
	CHECK(st.threads == 1);
	ckpt_reader_close(r);
	for (int i = 0; i < NT; i++)
		free(dst[i]);
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
	for (int i = 0; i < NT; i++)
		free(src[i]);
	return t_done();
}
