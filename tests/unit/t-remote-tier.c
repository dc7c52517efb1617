/* The remote tier, one process: a push sends only the packs the remote lacks (the bytes
 * sent by a 5%-changed checkpoint equal its new bytes on disk; a second push sends nothing); the
 * node-loss drill (the local store deleted, a new one adopted from the remote, the latest and an
 * older checkpoint pulled and restored bit-identical); a damaged remote pack is refused naming the
 * object and leaves nothing local; a remote manifest whose pack is missing is refused as damage
 * (CKPT_E_CORRUPT) naming the pack. The remote is $CKPT_TEST_REMOTE (t-remote.h) or a temporary
 * directory. */
#include <inttypes.h>

#include "remote/remote.h"
#include "t-remote.h"
#include "tier/tier.h"

enum { NT = 20, TBYTES = 1 << 20, CHUNK = 256 << 10 };

static uint8_t *data[NT];
static char names[NT][32];

static void save(ckpt_store *s, uint64_t step, ckpt_stats *st)
{
	uint64_t shape[1] = {TBYTES};
	save1 *sv;
	REQUIRE(save1_begin(s, step, &sv) == 0);
	for (int i = 0; i < NT; i++)
		CHECK_OK(save1_add_tensor(sv, names[i], CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST,
					      data[i]));
	REQUIRE(save1_commit(sv, st) == 0);
}

/* Restores every tensor of step and compares with want (NULL: the current data). */
static void check_restore(ckpt_store *s, uint64_t step, uint8_t **want)
{
	reader1 *r;
	CHECK_OK(reader1_open(s, step, &r));
	if (!r)
		return;
	uint8_t *buf = malloc(TBYTES);
	for (size_t i = 0; i < NT; i++) {
		memset(buf, 0xa5, TBYTES);
		CHECK_OK(reader1_restore(r, i, CKPT_MEM_HOST, buf, TBYTES));
		CHECK(!memcmp(buf, want ? want[i] : data[i], TBYTES));
	}
	CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
	free(buf);
	reader1_close(r);
}

/* Replaces remote object key by its bytes with one flipped at off (any backend: get, put). */
static void damage(const char *url, const char *key, uint64_t off)
{
	struct rmt *r;
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	uint64_t size;
	REQUIRE(r->ops->stat(r, key, &size, NULL) == 0);
	uint8_t *b = malloc(size);
	REQUIRE(r->ops->get(r, key, 0, size, b) == 0);
	b[off] ^= 0x40;
	struct rmt_src src = {.buf = b, .len = size};
	REQUIRE(r->ops->put(r, key, &src, 0, NULL, NULL) == 0);
	free(b);
	rmt_close(r);
}

/* How many checkpoints s holds locally (damaged ones too). */
static int local_count(ckpt_store *s)
{
	ckpt_info *list;
	int n = ckpt_store_list(s, 1, &list);
	ckpt_info_free(list);
	return n;
}

/* Without a pull: a reader of a checkpoint that is not local reads its manifest from the
 * remote and, from each pack, only the records it references (range reads), checked; nothing
 * lands in the store. */
static void remote_reads(ckpt_store *s, const char *path, uint8_t **old)
{
	reader1 *r;
	CHECK_OK(reader1_open(s, CKPT_STEP_LATEST, &r));
	if (!r)
		return;
	ckpt_info info;
	reader1_info(r, &info);
	CHECK(info.step == 2);
	reader1_close(r);
	uint64_t before = tier_bytes_fetched((struct ckpt_store *)s);
	check_restore(s, 2, NULL);
	uint64_t got = tier_bytes_fetched((struct ckpt_store *)s) - before;
	printf("remote read of step 2: %" PRIu64 " bytes fetched for %" PRIu64 " referenced\n", got,
	       info.stored_bytes);
	/* Each record the checkpoint references once (the reader's restore and verify share the
	 * fetched files), none of the records only step 1 references (tensor 3's old chunks). */
	CHECK(got == info.stored_bytes);
	check_restore(s, 1, old);
	char pk[4400];
	snprintf(pk, sizeof pk, "%s/packs", path);
	CHECK(t_dir_bytes(pk) == 0);
	CHECK(local_count(s) == 0);
}

/* A fresh local store adopted from the remote, with the remote set. */
static ckpt_store *adopt(const char *url, const char *id, const char *path)
{
	t_rmrf(path);
	CHECK_OK(ckpt_remote_adopt(url, id, path));
	ckpt_store *s;
	REQUIRE(ckpt_store_open(path, NULL, &s) == 0);
	REQUIRE(rstore_set(s, url, 0) == 0);
	return s;
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-tier", &cleanup);
	char *dir = t_tmpdir("remote-tier-local");
	char path[4200], path2[4200];
	snprintf(path, sizeof path, "%s/a", dir);
	snprintf(path2, sizeof path2, "%s/b", dir);
	for (int i = 0; i < NT; i++) {
		data[i] = malloc(TBYTES);
		t_fill(data[i], TBYTES, 11 + (uint64_t)i);
		snprintf(names[i], sizeof names[i], "layer.%02d", i);
	}
	ckpt_store *s = t_open_store(path, CHUNK, CKPT_COMPRESS_ZSTD);
	CHECK_RC(rstore_push(s, CKPT_STEP_LATEST, NULL, NULL, NULL), -CKPT_E_STATE);
	REQUIRE(rstore_set(s, url, 0) == 0);
	char id[33];
	ckpt_store_id(s, id);
	ckpt_stats st1, st2;
	save(s, 1, &st1);
	CHECK(rstore_upload_state(s, 1) == CKPT_UPLOAD_LOCAL);
	ckpt_remote_stats rs;
	CHECK_OK(rstore_push(s, 1, &rs, NULL, NULL));
	CHECK(rs.bytes_sent == st1.bytes_written && rs.packs_present == 0);
	CHECK(rstore_upload_state(s, 1) == CKPT_UPLOAD_REMOTE);
	/* 5% of the data changes (one tensor of twenty): the push sends its new packs only. */
	uint8_t *old[NT];
	for (int i = 0; i < NT; i++) {
		old[i] = malloc(TBYTES);
		memcpy(old[i], data[i], TBYTES);
	}
	t_fill(data[3], TBYTES, 999);
	save(s, 2, &st2);
	CHECK_OK(rstore_push(s, CKPT_STEP_LATEST, &rs, NULL, NULL));
	printf("step 2: %" PRIu64 " new bytes locally, %" PRIu64 " bytes uploaded (%.3fx), %" PRIu64
	       " packs skipped\n", st2.bytes_written, rs.bytes_sent,
	       (double)rs.bytes_sent / (double)st2.bytes_written, rs.packs_present);
	CHECK(rs.bytes_sent == st2.bytes_written && rs.packs_present >= 1);
	CHECK_OK(rstore_push(s, 2, &rs, NULL, NULL));
	CHECK(rs.bytes_sent == 0 && rs.packs_sent == 0);
	uint64_t *steps;
	CHECK(rstore_steps(s, &steps) == 2 && steps[0] == 1 && steps[1] == 2);
	free(steps);
	ckpt_store_close(s);

	/* Node loss: the local store is gone; a new one binds to the remote and restores. */
	t_rmrf(path);
	s = adopt(url, NULL, path2);
	remote_reads(s, path2, old);
	char id2[33];
	ckpt_store_id(s, id2);
	CHECK(!strcmp(id, id2));
	uint64_t got = 0;
	CHECK_OK(rstore_pull(s, CKPT_STEP_LATEST, &got, &rs, NULL, NULL));
	CHECK(got == 2 && rs.packs_sent >= 1);
	check_restore(s, 2, NULL);
	CHECK_OK(rstore_pull(s, 1, &got, &rs, NULL, NULL));
	CHECK(got == 1 && rs.packs_present >= 1); /* the packs step 2 shares are local already */
	check_restore(s, 1, old);
	ckpt_store_close(s);

	/* A damaged remote pack: named, and nothing of the checkpoint kept locally. */
	struct tier_ref ref = {0};
	snprintf(ref.id, sizeof ref.id, "%s", id);
	char key[256];
	tier_key_pack(&ref, 1, key, sizeof key);
	damage(url, key, 4096 + 64 + 10);
	s = adopt(url, id, path2);
	CHECK_RC(rstore_pull(s, 1, NULL, NULL, NULL, NULL), -CKPT_E_CHECKSUM);
	CHECK(strstr(ckpt_errmsg(), key) != NULL);
	printf("damaged: %s\n", ckpt_errmsg());
	CHECK(local_count(s) == 0);
	reader1 *rd;
	CHECK_OK(reader1_open(s, 1, &rd));
	if (rd) { /* a remote read of it fails too, naming the object */
		uint8_t *buf = malloc(TBYTES);
		CHECK_RC(reader1_restore(rd, 0, CKPT_MEM_HOST, buf, TBYTES), -CKPT_E_CHECKSUM);
		CHECK(strstr(ckpt_errmsg(), key) != NULL);
		printf("remote read, damaged: %s\n", ckpt_errmsg());
		free(buf);
		reader1_close(rd);
	}
	char pk[4400];
	snprintf(pk, sizeof pk, "%s/packs", path2);
	CHECK(t_dir_bytes(pk) == 0 || t_first_file(pk, "00000001.pack") == NULL);
	damage(url, key, 4096 + 64 + 10); /* repaired */
	/* A remote manifest whose pack is missing there. */
	struct rmt *r;
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	tier_key_pack(&ref, 1, key, sizeof key);
	CHECK_OK(r->ops->del(r, key));
	rmt_close(r);
	/* Damage of the remote checkpoint, not a checkpoint the remote lacks (ckptctl's exit 4). */
	CHECK_RC(rstore_pull(s, 1, NULL, NULL, NULL, NULL), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "lacks") != NULL && strstr(ckpt_errmsg(), key) != NULL);
	CHECK(local_count(s) == 0);
	printf("missing: %s\n", ckpt_errmsg());
	ckpt_store_close(s);

	/* Bad input: another store at the path, an unknown id, a bad url. */
	CHECK_RC(ckpt_remote_adopt(url, "0123456789abcdef0123456789abcdef", path2), -CKPT_E_NOTFOUND);
	CHECK_RC(ckpt_remote_adopt(url, "xyz", path2), -CKPT_E_INVAL);
	CHECK_RC(ckpt_remote_adopt("gopher://x", NULL, path2), -CKPT_E_INVAL);
	ckpt_store *other = t_open_store(path, CHUNK, CKPT_COMPRESS_ZSTD);
	ckpt_store_close(other);
	CHECK_RC(ckpt_remote_adopt(url, id, path), -CKPT_E_EXISTS);
	char junk[4300];
	snprintf(junk, sizeof junk, "%s/junk", dir);
	REQUIRE(mkdir(junk, 0755) == 0);
	snprintf(junk, sizeof junk, "%s/junk/file", dir);
	FILE *jf = fopen(junk, "w");
	REQUIRE(jf && fclose(jf) == 0);
	snprintf(junk, sizeof junk, "%s/junk", dir);
	CHECK_RC(ckpt_remote_adopt(url, id, junk), -CKPT_E_EXISTS); /* not empty, not a store */
	CHECK(strstr(ckpt_errmsg(), "not empty") != NULL);

	for (int i = 0; i < NT; i++) {
		free(data[i]);
		free(old[i]);
	}
	return t_remote_done(dir, cleanup, url);
}
