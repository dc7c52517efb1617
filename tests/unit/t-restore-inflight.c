/* Reads in flight across read groups: reader1_restore of a tensor of many groups
 * submits the next groups' reads before it checks the first (reader_inflight_max), and so does
 * restore_all; every byte is still checked: a failed or short (truncated pack) read of a later
 * group fails the call with the error naming that group's first chunk, the tensor is not counted
 * restored, and the reader restores correctly afterwards (the reads in flight were drained); a
 * short first transfer of a later group is finished by the engine. Both engines, with the
 * destination aligned for direct reads and misaligned (the read buffer path). */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "common/common.h"
#include "format/format.h"
#include "helpers.h"
#include "io/io.h"
#include "read/reader.h"

#define CS (64u << 10)
#define NCH 40                    /* chunks of "big" */
#define NGROUPS (NCH - 1)         /* read groups: one record each, the last two share one */
#define NB ((NCH - 1) * CS + 777) /* the last chunk short (4 KiB on disk) */
#define IO_SIZE (128u << 10)      /* one 64 KiB record (68 KiB on disk) per read group */

static uint8_t src[NB];

static ckpt_store *open_store(const char *dir, int engine, int threads)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CS);
	ckpt_options_set(o, CKPT_OPT_IO_SIZE, IO_SIZE);
	ckpt_options_set(o, CKPT_OPT_THREADS, threads);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 8 << 20);
	ckpt_options_set(o, CKPT_OPT_IO_ENGINE, engine);
	ckpt_options_set(o, CKPT_OPT_DIRECT_IO, 1);
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(dir, o, &s);
	ckpt_options_free(o);
	return rc ? NULL : s;
}

static void *dst_for(size_t i, const ckpt_tensor_info *info, int *mem, void *arg)
{
	(void)i;
	(void)info;
	(void)mem;
	return arg;
}

/* A destination of NB bytes, aligned for direct reads or misaligned by 8, filled with 0xee. */
static uint8_t *dst_at(uint8_t *base, size_t misalign)
{
	uint8_t *d = base + CKPT_RESTORE_DIRECT_OFFSET + misalign;
	memset(d, 0xee, NB);
	return d;
}

/* Reads in flight, for one tensor and for restore_all, on a fresh reader each. */
static void inflight(ckpt_store *s, uint8_t *d)
{
	reader1 *r;
	uint64_t reads, bytes;
	ckpt_stats st;
	REQUIRE(reader1_open(s, 1, &r) == 0);
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB));
	CHECK(memcmp(d, src, NB) == 0);
	reader_inflight_max(r, &reads, &bytes);
	/* Every group's read is submitted before the first is checked (the slots outnumber them). */
	CHECK(reads == NGROUPS);
	CHECK(bytes == (NCH - 1) * (uint64_t)rec_span(CS) + rec_span(777));
	reader1_stats(r, &st);
	CHECK(st.threads == 1 && st.tensors == 1 && st.logical_bytes == NB);
	reader1_close(r);

	REQUIRE(reader1_open(s, 1, &r) == 0);
	memset(d, 0xee, NB);
	CHECK_OK(reader1_restore_all(r, dst_for, d));
	CHECK(memcmp(d, src, NB) == 0);
	reader_inflight_max(r, &reads, &bytes);
	/* Two threads share the groups: one takes at least half and submits them all before it
	 * checks one. */
	CHECK(reads >= NGROUPS / 2);
	reader1_stats(r, &st);
	CHECK(st.threads == 2 && st.tensors == 1);
	if (t_failures)
		fprintf(stderr, "in flight: %llu reads, %llu bytes\n", (unsigned long long)reads,
			(unsigned long long)bytes);
	reader1_close(r);
}

/* Faults on the read of group nth (1-based; the pack is open already, so reads count from the
 * first group): err fails it, 0 makes its first transfer short. */
static void fault_on(reader1 *r, uint8_t *d, unsigned nth, int err, int want, bool all)
{
	ckpt_stats st0, st1;
	reader1_stats(r, &st0);
	memset(d, 0xee, NB);
	ckpt_io_fault_arm(IO_FAULT_READ, nth, err);
	int rc = all ? reader1_restore_all(r, dst_for, d)
		     : reader1_restore(r, 0, CKPT_MEM_HOST, d, NB);
	CHECK(ckpt_io_fault_fired() == 1);
	ckpt_io_fault_disarm();
	CHECK_RC(rc, want);
	reader1_stats(r, &st1);
	if (want) {
		char chunk[32];
		snprintf(chunk, sizeof chunk, "chunk %u ", nth - 1);
		CHECK(strstr(ckpt_errmsg(), "'big'") && strstr(ckpt_errmsg(), ".pack"));
		/* restore_all's threads run groups in any order: the failed one is named. */
		CHECK(all || strstr(ckpt_errmsg(), chunk));
		CHECK(st1.tensors == st0.tensors);
	} else {
		CHECK(memcmp(d, src, NB) == 0);
		CHECK(st1.tensors == st0.tensors + 1);
	}
	/* The reads in flight were drained: the reader restores correctly now. */
	memset(d, 0xee, NB);
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB));
	CHECK(memcmp(d, src, NB) == 0);
}

/* The pack cut after the record of chunk cut: the group reads from there on come back short. */
static void truncated(const char *dir, ckpt_store *s, uint8_t *d, unsigned cut)
{
	reader1 *r;
	ckpt_chunk_info ci;
	REQUIRE(reader1_open(s, 1, &r) == 0);
	CHECK_OK(reader1_chunk(r, 0, cut, &ci));
	char pack[4096];
	snprintf(pack, sizeof pack, "%s/packs/%08u.pack", dir, ci.pack_id);
	REQUIRE(truncate(pack, (off_t)(ci.offset + 4096)) == 0);
	CHECK_RC(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB), -CKPT_E_CORRUPT);
	char chunk[32];
	snprintf(chunk, sizeof chunk, "chunk %u ", cut);
	CHECK(strstr(ckpt_errmsg(), "truncated") && strstr(ckpt_errmsg(), chunk));
	if (t_failures)
		fprintf(stderr, "truncated: %s\n", ckpt_errmsg());
	CHECK_RC(reader1_restore_all(r, dst_for, d), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "truncated") && strstr(ckpt_errmsg(), "'big'"));
	reader1_close(r);
}

static void engine_case(const char *tag, int engine)
{
	char *dir = t_tmpdir(tag);
	/* Saved by one thread: the records lie in chunk order, so the groups and the first chunk
	 * past a cut are known. */
	ckpt_store *s = open_store(dir, engine, 1);
	if (!s) {
		printf("engine %d unavailable here: %s (skipped)\n", engine, ckpt_errmsg());
		t_rmrf(dir);
		free(dir);
		return;
	}
	uint64_t shape[1] = {NB};
	save1 *sv;
	REQUIRE(save1_begin(s, 1, &sv) == 0);
	CHECK_OK(save1_add_tensor(sv, "big", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, src));
	CHECK_OK(save1_commit(sv, NULL));
	ckpt_store_close(s);
	REQUIRE((s = open_store(dir, engine, 2)));
	reader1 *r;
	REQUIRE(reader1_open(s, 1, &r) == 0);
	for (unsigned k = 1; k < NCH; k++) {
		ckpt_chunk_info a, b;
		CHECK_OK(reader1_chunk(r, 0, k - 1, &a));
		CHECK_OK(reader1_chunk(r, 0, k, &b));
		REQUIRE(a.pack_id == b.pack_id && b.offset == a.offset + a.disk_bytes);
	}
	reader1_close(r);
	uint8_t *base = ckpt_aligned_alloc(NB + 8192);
	for (size_t mis = 0; mis <= 8; mis += 8) {
		uint8_t *d = dst_at(base, mis);
		inflight(s, d);
		REQUIRE(reader1_open(s, 1, &r) == 0);
		CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB)); /* opens the pack */
		fault_on(r, d, 5, EIO, -CKPT_E_IO, false);
		fault_on(r, d, NGROUPS, EIO, -CKPT_E_IO, false);
		fault_on(r, d, 7, 0, 0, false);
		fault_on(r, d, 9, EIO, -CKPT_E_IO, true);
		fault_on(r, d, 11, 0, 0, true);
		reader1_close(r);
	}
	truncated(dir, s, dst_at(base, 0), 30);
	free(base);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	t_fill(src, NB, 13);
	engine_case("inflight-psync", CKPT_ENGINE_PSYNC);
	engine_case("inflight-uring", CKPT_ENGINE_IO_URING);
	return t_done();
}
