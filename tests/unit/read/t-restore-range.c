/* reader1_restore_range: every byte range of a tensor, raw and compressed, across chunk and
 * read-group boundaries, equals the same bytes of a whole restore; ranges outside the tensor are
 * -CKPT_E_INVAL; damage in a chunk outside the range is never read. */
#include "helpers.h"

#define CS (64u << 10)
#define NB (5 * CS + 1234) /* six chunks, the last one short */

static void ranges(int compress)
{
	char *dir = t_tmpdir("range");
	ckpt_store *s = t_open_store(dir, CS, compress);
	REQUIRE(s);
	uint8_t *src = malloc(NB), *out = malloc(NB);
	REQUIRE(src && out);
	t_fill(src, NB, 7);
	memset(src + CS, 0, CS); /* one chunk that compresses */
	uint64_t shape[1] = {NB};
	save1 *sv;
	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "t", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, src));
	CHECK_OK(save1_commit(sv, NULL));
	reader1 *r;
	REQUIRE(reader1_open(s, 1, &r) == 0);
	const uint64_t at[] = {0, 1, CS - 1, CS, CS + 1, 3 * CS - 7, 5 * CS, NB - 1, NB};
	for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
		for (size_t j = i; j < sizeof at / sizeof at[0]; j++) {
			uint64_t off = at[i], len = at[j] - at[i];
			memset(out, 0xee, NB);
			CHECK_OK(reader1_restore_range(r, 0, off, out, len));
			CHECK(memcmp(out, src + off, len) == 0);
			CHECK(len == NB || out[len] == 0xee); /* nothing written past the range */
		}
	CHECK_RC(reader1_restore_range(r, 0, NB - 1, out, 2), -CKPT_E_INVAL);
	CHECK_RC(reader1_restore_range(r, 0, NB + 1, out, 0), -CKPT_E_INVAL);
	CHECK_RC(reader1_restore_range(r, 1, 0, out, 1), -CKPT_E_INVAL);
	CHECK_RC(reader1_restore_range(r, 0, 0, NULL, 1), -CKPT_E_INVAL);
	CHECK(strstr(ckpt_errmsg(), "NULL destination") != NULL);

	/* Damage chunk 0: ranges in chunks 1.. still restore, a range touching chunk 0 fails. */
	ckpt_chunk_info ci;
	CHECK_OK(reader1_chunk(r, 0, 0, &ci));
	reader1_close(r);
	char pack[4096];
	snprintf(pack, sizeof pack, "%s/packs/%08u.pack", dir, ci.pack_id);
	t_flip_byte(pack, ci.offset + ci.disk_bytes / 2); /* inside the payload */
	REQUIRE(reader1_open(s, 1, &r) == 0);
	CHECK_OK(reader1_restore_range(r, 0, CS, out, NB - CS));
	CHECK(memcmp(out, src + CS, NB - CS) == 0);
	int rc = reader1_restore_range(r, 0, CS - 1, out, 2);
	CHECK(rc == -CKPT_E_CHECKSUM || rc == -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "chunk 0") != NULL);
	reader1_close(r);
	ckpt_store_close(s);
	free(src);
	free(out);
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	ranges(CKPT_COMPRESS_NONE);
	ranges(CKPT_COMPRESS_ZSTD);
	return t_done();
}
