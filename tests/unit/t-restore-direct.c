/* Direct restore: raw chunks are read straight into a host destination when it is
 * aligned as ckpt.h says (dst - payload offset a multiple of the DIO memory alignment; dst % 4096
 * == CKPT_RESTORE_DIRECT_OFFSET always is), through the psync and io_uring engines, and decoded
 * from the read buffer otherwise. Either way the bytes are exact; damage in any part of a raw
 * chunk (the pieces read into scratch or the middle read in place) fails the restore naming the
 * chunk; short and failed vectored reads (fault injection) are finished or reported, and one
 * refused with EINVAL is read again through the buffer; stores
 * without O_DIRECT (option off, tmpfs) and compressed chunks restore too. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "format/format.h"
#include "helpers.h"
#include "io/io.h"
#include "read/reader.h"

#define CS (64u << 10)
#define NB (5 * CS + 1234) /* six chunks, the last one short */
#define SMALL 100          /* one chunk too small to have a block-aligned middle */

static uint8_t src[NB], small_src[SMALL];

static ckpt_store *open_store(const char *dir, int engine, int direct, int compress)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CS);
	ckpt_options_set(o, CKPT_OPT_COMPRESS, compress);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 32 << 20);
	ckpt_options_set(o, CKPT_OPT_IO_ENGINE, engine);
	ckpt_options_set(o, CKPT_OPT_DIRECT_IO, direct);
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(dir, o, &s);
	ckpt_options_free(o);
	return rc ? NULL : s;
}

static void save(ckpt_store *s)
{
	uint64_t shape[1] = {NB}, sshape[1] = {SMALL};
	save1 *sv;
	REQUIRE(save1_begin(s, 1, &sv) == 0);
	CHECK_OK(save1_add_tensor(sv, "big", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, src));
	CHECK_OK(save1_add_tensor(sv, "small", CKPT_DTYPE_U8, 1, sshape, CKPT_MEM_HOST,
				      small_src));
	CHECK_OK(save1_commit(sv, NULL));
}

/* A destination of NB bytes at misalign bytes past CKPT_RESTORE_DIRECT_OFFSET in a 4 KiB page. */
static uint8_t *dst_at(uint8_t *base, size_t misalign)
{
	uint8_t *d = base + CKPT_RESTORE_DIRECT_OFFSET + misalign;
	memset(d, 0xee, NB);
	return d;
}

/* The DIO memory alignment of the store's first pack, as the reader sees it (1: no O_DIRECT),
 * and in *blk the unit of file offsets and lengths (the larger of the two alignments). */
static unsigned pack_mem_align(const char *dir, unsigned *blk)
{
	char pdir[4096];
	snprintf(pdir, sizeof pdir, "%s/packs", dir);
	char *pack = t_first_file(pdir, ".pack");
	REQUIRE(pack);
	int fd = open(pack, O_RDONLY | O_DIRECT);
	free(pack);
	*blk = 1;
	if (fd < 0)
		return 1;
	struct statx sx;
	unsigned a = 4096;
	*blk = 4096;
	if (!statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) && (sx.stx_mask & STATX_DIOALIGN) &&
	    sx.stx_dio_mem_align && sx.stx_dio_offset_align) {
		a = sx.stx_dio_mem_align;
		*blk = MAX(a, sx.stx_dio_offset_align);
	}
	close(fd);
	return a;
}

static void counts(reader1 *r, uint64_t *d, uint64_t *b)
{
	reader_path_counts(r, d, b);
}

struct alld {
	uint8_t *big, *small;
};

static void *dst_for(size_t i, const ckpt_tensor_info *info, int *mem, void *arg)
{
	struct alld *a = arg;
	(void)mem;
	(void)i;
	return !strcmp(info->name, "big") ? a->big : !strcmp(info->name, "small") ? a->small : NULL;
}

/* Aligned and misaligned destinations, one tensor and restore_all, faults on the vectored read. */
static void paths(const char *dir, ckpt_store *s, int direct_opt)
{
	uint8_t *base = ckpt_aligned_alloc(NB + 8192), small[SMALL];
	unsigned blk, align = pack_mem_align(dir, &blk);
	if (!direct_opt)
		align = blk = 1;
	/* The short last chunk (1234 bytes) has a middle unless blocks are larger than it. */
	const uint64_t nd = 5 + ((REC_HDR_LEN + 1234) / blk * blk > ALIGN_UP(REC_HDR_LEN, blk));
	reader1 *r;
	REQUIRE(reader1_open(s, 1, &r) == 0);
	uint64_t d0, b0, d1, b1;

	/* Aligned: every chunk of "big" read in place (the short last one too, unless blocks are
	 * larger than it). */
	uint8_t *d = dst_at(base, 0);
	counts(r, &d0, &b0);
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB));
	CHECK(memcmp(d, src, NB) == 0);
	counts(r, &d1, &b1);
	CHECK(d1 - d0 == nd && b1 - b0 == 6 - nd);

	/* The small tensor has no block-aligned middle under O_DIRECT: the buffer path. */
	CHECK_OK(reader1_restore(r, 1, CKPT_MEM_HOST, small, SMALL));
	CHECK(memcmp(small, small_src, SMALL) == 0);
	counts(r, &d0, &b0);
	unsigned small_direct = align == 1;
	CHECK(d0 == d1 + small_direct && b0 == b1 + !small_direct);

	/* Misaligned by 8 bytes: the buffer path under O_DIRECT, in place without it. */
	d = dst_at(base, 8);
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB));
	CHECK(memcmp(d, src, NB) == 0);
	counts(r, &d1, &b1);
	if (align > 8)
		CHECK(d1 == d0 && b1 - b0 == 6);
	else
		CHECK(d1 - d0 == nd && b1 - b0 == 6 - nd);
	if (t_failures)
		fprintf(stderr, "%s: align %u, direct %llu, buffered %llu\n", dir, align,
			(unsigned long long)d1, (unsigned long long)b1);

	/* restore_all, on the worker threads. */
	struct alld a = {dst_at(base, 0), small};
	memset(small, 0, SMALL);
	CHECK_OK(reader1_restore_all(r, dst_for, &a));
	CHECK(memcmp(a.big, src, NB) == 0 && memcmp(small, small_src, SMALL) == 0);
	counts(r, &d0, &b0);
	CHECK(d0 - d1 == nd + small_direct && b0 - b1 == 6 - nd + !small_direct);

	/* A short first transfer of the vectored read: the engine finishes it. */
	d = dst_at(base, 0);
	ckpt_io_fault_arm(IO_FAULT_READ, 1, 0);
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB));
	CHECK(ckpt_io_fault_fired() == 1);
	ckpt_io_fault_disarm();
	CHECK(memcmp(d, src, NB) == 0);
	counts(r, &d1, &b1);
	CHECK(d1 - d0 == nd && b1 - b0 == 6 - nd);

	/* A failed vectored read: -CKPT_E_IO naming the pack and the tensor. */
	ckpt_io_fault_arm(IO_FAULT_READ, 1, EIO);
	CHECK_RC(reader1_restore(r, 0, CKPT_MEM_HOST, dst_at(base, 0), NB), -CKPT_E_IO);
	CHECK(ckpt_io_fault_fired() == 1);
	ckpt_io_fault_disarm();
	CHECK(strstr(ckpt_errmsg(), ".pack") && strstr(ckpt_errmsg(), "'big'"));

	/* EINVAL on the vectored read (a device that checks more alignment than statx reports):
	 * the group is read again through the buffer, the restore succeeds, and the pack keeps
	 * the buffer path. Last: it changes this reader's path for the pack. */
	if (nd) {
		d = dst_at(base, 0);
		memset(d, 0, NB);
		counts(r, &d0, &b0);
		ckpt_io_fault_arm(IO_FAULT_READ, 1, EINVAL);
		CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB));
		CHECK(ckpt_io_fault_fired() == 1);
		ckpt_io_fault_disarm();
		CHECK(memcmp(d, src, NB) == 0);
		counts(r, &d1, &b1);
		CHECK(d1 == d0 && b1 - b0 == 6);
		memset(d, 0, NB);
		CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB));
		CHECK(memcmp(d, src, NB) == 0);
		counts(r, &d0, &b0);
		CHECK(d0 == d1 && b0 - b1 == 6);
	}
	reader1_close(r);
	free(base);
}

/* Flips one byte of chunk 2 of "big" at rel bytes into its record; the restore into an aligned
 * destination must fail with want, naming chunk 2. */
static void damaged(const char *dir, ckpt_store *s, uint64_t rel, int want, int want2)
{
	reader1 *r;
	REQUIRE(reader1_open(s, 1, &r) == 0);
	ckpt_chunk_info ci;
	CHECK_OK(reader1_chunk(r, 0, 2, &ci));
	reader1_close(r);
	char pack[4096];
	snprintf(pack, sizeof pack, "%s/packs/%08u.pack", dir, ci.pack_id);
	t_flip_byte(pack, ci.offset + rel);
	uint8_t *base = ckpt_aligned_alloc(NB + 8192);
	REQUIRE(reader1_open(s, 1, &r) == 0);
	int rc = reader1_restore(r, 0, CKPT_MEM_HOST, dst_at(base, 0), NB);
	CHECK(rc == want || rc == want2);
	CHECK(strstr(ckpt_errmsg(), "chunk 2") && strstr(ckpt_errmsg(), "'big'"));
	reader1_close(r);
	t_flip_byte(pack, ci.offset + rel); /* repaired */
	REQUIRE(reader1_open(s, 1, &r) == 0);
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, dst_at(base, 0), NB));
	reader1_close(r);
	free(base);
}

static void engine_case(const char *base, int engine, int direct_opt)
{
	char *dir = t_tmpdir(base);
	ckpt_store *s = open_store(dir, engine, direct_opt, 0);
	if (!s) {
		printf("engine %d unavailable here: %s (skipped)\n", engine, ckpt_errmsg());
		t_rmrf(dir);
		free(dir);
		return;
	}
	save(s);
	paths(dir, s, direct_opt);
	damaged(dir, s, 100, -CKPT_E_CHECKSUM, -CKPT_E_CHECKSUM);                /* in the head piece (scratch) */
	damaged(dir, s, CS / 2, -CKPT_E_CHECKSUM, -CKPT_E_CHECKSUM);             /* in the middle (read in place) */
	damaged(dir, s, REC_HDR_LEN + CS - 1, -CKPT_E_CHECKSUM, -CKPT_E_CHECKSUM); /* the last byte (tail piece) */
	damaged(dir, s, 8, -CKPT_E_CORRUPT, -CKPT_E_CHECKSUM); /* the record header */
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

/* Compressed chunks keep the decode path; the raw ones of the same read group go in place. */
static void compressed_case(void)
{
	char *dir = t_tmpdir("direct-zstd");
	ckpt_store *s = open_store(dir, CKPT_ENGINE_AUTO, 1, CKPT_COMPRESS_ZSTD);
	REQUIRE(s);
	uint8_t keep[CS];
	memcpy(keep, src + CS, CS);
	memset(src + CS, 0, CS); /* chunk 1 compresses */
	save(s);
	uint8_t *base = ckpt_aligned_alloc(NB + 8192);
	reader1 *r;
	REQUIRE(reader1_open(s, 1, &r) == 0);
	uint8_t *d = dst_at(base, 0);
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, d, NB));
	CHECK(memcmp(d, src, NB) == 0);
	uint64_t dc, bc;
	counts(r, &dc, &bc);
	CHECK(dc == 5 && bc == 1);
	reader1_close(r);
	memcpy(src + CS, keep, CS);
	free(base);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

/* tmpfs: O_DIRECT may be refused (older kernels) or accepted without alignment information. */
static void tmpfs_case(void)
{
	char shm[] = "/dev/shm/ckpt-direct-XXXXXX";
	if (!mkdtemp(shm)) {
		printf("no /dev/shm: tmpfs case skipped\n");
		return;
	}
	setenv("CKPT_TEST_DIR", shm, 1);
	engine_case("tmpfs", CKPT_ENGINE_AUTO, 1);
	unsetenv("CKPT_TEST_DIR");
	rmdir(shm);
}

int main(void)
{
	t_fill(src, NB, 11);
	t_fill(small_src, SMALL, 12);
	engine_case("direct-psync", CKPT_ENGINE_PSYNC, 1);
	engine_case("direct-uring", CKPT_ENGINE_IO_URING, 1);
	engine_case("buffered", CKPT_ENGINE_PSYNC, 0);
	engine_case("buffered-uring", CKPT_ENGINE_IO_URING, 0);
	tmpfs_case();
	compressed_case();
	return t_done();
}
