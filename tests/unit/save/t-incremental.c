/* Incremental saves write only the chunks that changed: asserted on the statistics, on each
 * tensor's chunks_new in the manifest, and on the bytes the pack directory grew by. */
#include "helpers.h"

enum { NT = 100, CHUNK = 64 << 10, TBYTES = 4 * CHUNK + 1000 };

int main(void)
{
	char *dir = t_tmpdir("incr");
	ckpt_store *s = t_open_store(dir, CHUNK, CKPT_COMPRESS_NONE);
	char packs[4200];
	snprintf(packs, sizeof packs, "%s/packs", dir);
	uint8_t *data[NT];
	char names[NT][32];
	for (int i = 0; i < NT; i++) {
		data[i] = malloc(TBYTES);
		t_fill(data[i], TBYTES, 77 + (uint64_t)i);
		snprintf(names[i], sizeof names[i], "layer.%02d.weight", i);
	}
	uint64_t shape[1] = {TBYTES};
	ckpt_stats st[4];
	uint64_t disk[5];
	disk[0] = t_dir_bytes(packs);
	for (int step = 0; step < 4; step++) {
		if (step == 1) /* change 1 tensor of 100, one byte in its second chunk */
			data[42][CHUNK + 5] ^= 0xff;
		if (step == 2) /* change the 1000-byte tail chunk of another */
			data[7][TBYTES - 1] ^= 0x01;
		/* step 3: nothing changed */
		save1 *sv;
		CHECK_OK(save1_begin(s, (uint64_t)step * 10, &sv));
		for (int i = 0; i < NT; i++)
			CHECK_OK(save1_add_tensor(sv, names[i], CKPT_DTYPE_U8, 1, shape,
						      CKPT_MEM_HOST, data[i]));
		CHECK_OK(save1_commit(sv, &st[step]));
		disk[step + 1] = t_dir_bytes(packs);
	}
	const uint64_t per_tensor_chunks = 5;
	CHECK(st[0].chunks == NT * per_tensor_chunks);
	CHECK(st[0].chunks_new == NT * per_tensor_chunks);
	CHECK(st[0].logical_bytes == (uint64_t)NT * TBYTES);
	/* Step 10: exactly one chunk new, everything else reused. */
	CHECK(st[1].chunks_new == 1);
	CHECK(st[1].chunks_reused == NT * per_tensor_chunks - 1);
	CHECK(st[1].bytes_stored == CHUNK);
	/* One record (64 B header + 64 KiB, padded to 68 KiB) plus one pack header. */
	CHECK(st[1].bytes_written == 4096 + 69632);
	CHECK(disk[2] - disk[1] == st[1].bytes_written);
	CHECK(st[2].chunks_new == 1);
	CHECK(st[2].bytes_stored == 1000);
	CHECK(disk[3] - disk[2] == 4096 + 4096);
	CHECK(st[3].chunks_new == 0 && st[3].bytes_written == 0);
	CHECK(disk[4] == disk[3]);
	CHECK(disk[1] - disk[0] == st[0].bytes_written);

	/* The manifest says which tensor got new chunks, and the list says what each step added. */
	reader1 *r;
	CHECK_OK(reader1_open(s, 10, &r));
	for (int i = 0; i < NT; i++) {
		ckpt_tensor_info ti;
		reader1_tensor(r, (size_t)i, &ti);
		CHECK(ti.chunks == per_tensor_chunks);
		CHECK(ti.chunks_new == (i == 42 ? 1u : 0u));
	}
	/* Restore the changed tensor and an unchanged one: current data. */
	uint8_t *buf = malloc(TBYTES);
	CHECK_OK(reader1_restore(r, 42, CKPT_MEM_HOST, buf, TBYTES));
	CHECK(buf[CHUNK + 5] == data[42][CHUNK + 5]);
	reader1_close(r);
	/* Step 0 still restores the old bytes of tensor 42. */
	CHECK_OK(reader1_open(s, 0, &r));
	CHECK_OK(reader1_restore(r, 42, CKPT_MEM_HOST, buf, TBYTES));
	uint8_t old = (uint8_t)(data[42][CHUNK + 5] ^ 0xffu);
	CHECK(buf[CHUNK + 5] == old);
	reader1_close(r);
	free(buf);

	ckpt_info *list;
	int n = ckpt_store_list(s, 0, &list);
	CHECK(n == 4);
	if (n == 4) {
		CHECK(list[0].step == 0 && list[1].step == 10 && list[3].step == 30);
		CHECK(list[1].new_bytes == st[1].bytes_written);
		CHECK(list[3].new_bytes == 0);
		CHECK(list[1].new_chunks == 1);
		CHECK(list[1].logical_bytes == (uint64_t)NT * TBYTES);
	}
	ckpt_info_free(list);

	/* A second handle (another process's view) dedups against what the first wrote. */
	ckpt_store_close(s);
	s = t_open_store(dir, CHUNK, CKPT_COMPRESS_NONE);
	save1 *sv;
	CHECK_OK(save1_begin(s, 40, &sv));
	for (int i = 0; i < NT; i++)
		CHECK_OK(save1_add_tensor(sv, names[i], CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST,
					      data[i]));
	ckpt_stats s4;
	CHECK_OK(save1_commit(sv, &s4));
	CHECK(s4.chunks_new == 0);

	/* Compression does not change dedup: digests are over raw bytes. */
	ckpt_store_close(s);
	s = t_open_store(dir, CHUNK, CKPT_COMPRESS_ZSTD);
	CHECK_OK(save1_begin(s, 50, &sv));
	for (int i = 0; i < NT; i++)
		CHECK_OK(save1_add_tensor(sv, names[i], CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST,
					      data[i]));
	CHECK_OK(save1_commit(sv, &s4));
	CHECK(s4.chunks_new == 0);
	ckpt_store_close(s);
	for (int i = 0; i < NT; i++)
		free(data[i]);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
