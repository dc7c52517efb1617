/* What a pull and an adopt refuse or repair. Two local stores adopted from one remote store id
 * that both save allocate the same next pack id: a pull of one's checkpoint into the other
 * finds a local pack of that id that is not the remote's, and fails naming both instead of
 * committing a damaged checkpoint. A remote pack cut inside its last record's padding, with a
 * padding byte flipped, or with bytes appended is refused naming its key (the local verifier
 * would report it damaged), and the local store is left as it was. An adopt killed before it
 * linked the header is completed by the next one; a directory with anything else is still
 * refused. A remote store header under another store's id is refused as damage. The remote is
 * $CKPT_TEST_REMOTE (t-remote.h) or a temporary directory. */
#include <dirent.h>
#include <inttypes.h>

#include "remote/remote.h"
#include "t-remote.h"
#include "tier/tier.h"

enum { NT = 4, TBYTES = 1 << 20, CHUNK = 256 << 10 };

static uint8_t *data[NT];

/* Fills data with the tensors of seed. */
static void fill(uint64_t seed)
{
	for (int i = 0; i < NT; i++)
		t_fill(data[i], TBYTES, seed * 100 + (uint64_t)i);
}

/* Object key of url: its bytes (malloc'd) and size. */
static uint8_t *obj_get(const char *url, const char *key, uint64_t *size)
{
	struct rmt *r;
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	REQUIRE(r->ops->stat(r, key, size, NULL) == 0);
	uint8_t *b = malloc(*size + 4096);
	REQUIRE(b && r->ops->get(r, key, 0, *size, b) == 0);
	rmt_close(r);
	return b;
}

/* Puts len bytes at b as object key of url (replacing one there). */
static void obj_put(const char *url, const char *key, const uint8_t *b, uint64_t len)
{
	struct rmt *r;
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	struct rmt_src src = {.buf = b, .len = len};
	REQUIRE(r->ops->put(r, key, &src, 0, NULL, NULL) == 0);
	rmt_close(r);
}

static int local_count(ckpt_store *s)
{
	ckpt_info *list;
	int n = ckpt_store_list(s, 1, &list);
	ckpt_info_free(list);
	return n;
}

/* A fresh local store adopted from the remote store id, with the remote set. */
static ckpt_store *adopt(const char *url, const char *id, const char *path)
{
	t_rmrf(path);
	CHECK_OK(ckpt_remote_adopt(url, id, path));
	ckpt_store *s;
	REQUIRE(ckpt_store_open(path, NULL, &s) == 0);
	REQUIRE(rstore_set(s, url, 0) == 0);
	return s;
}

/* The highest pack id the remote holds for store ref. */
static uint32_t top_pack(struct rmt *r, struct tier_ref *ref)
{
	ref->r = r;
	uint32_t *ids, top = 0;
	long n = tier_remote_packs(ref, &ids);
	REQUIRE(n > 0);
	for (long i = 0; i < n; i++)
		top = ids[i] > top ? ids[i] : top;
	free(ids);
	return top;
}

/* Two writers of one store id: B pulls A's checkpoint while B holds another pack of that id. */
static void two_writers(const char *url, const char *id, const char *dir)
{
	char pa[4200], pb[4200];
	snprintf(pa, sizeof pa, "%s/wa", dir);
	snprintf(pb, sizeof pb, "%s/wb", dir);
	ckpt_store *a = adopt(url, id, pa), *b = adopt(url, id, pb);
	fill(2);
	t_remote_save(a, 2, data, NT, TBYTES);
	fill(3);
	t_remote_save(b, 3, data, NT, TBYTES);
	CHECK_OK(rstore_push(a, 2, NULL, NULL, NULL));
	struct rmt *r;
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	struct tier_ref ref = {0};
	snprintf(ref.id, sizeof ref.id, "%s", id);
	char key[256], local[4400];
	tier_key_pack(&ref, top_pack(r, &ref), key, sizeof key);
	rmt_close(r);
	snprintf(local, sizeof local, "%s/packs/%s", pb, strrchr(key, '/') + 1);
	REQUIRE(access(local, F_OK) == 0); /* B has a pack of the id A pushed: the setting */
	CHECK_RC(rstore_pull(b, 2, NULL, NULL, NULL, NULL), -CKPT_E_CORRUPT);
	const char *msg = ckpt_errmsg();
	printf("two writers: %s\n", msg);
	CHECK(strstr(msg, "is not the remote's pack") && strstr(msg, "two writers of store") &&
	      strstr(msg, id) && strstr(msg, key) && strstr(msg, local));
	CHECK(local_count(b) == 1); /* step 3 only: nothing committed */
	ckpt_store_close(a);
	ckpt_store_close(b);
}

/* How many temporary files (".NAME.tmp.PID.RAND") directory path holds. */
static int temporaries(const char *path)
{
	DIR *d = opendir(path);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] == '.' && strstr(e->d_name, ".tmp.") != NULL;
	if (d)
		closedir(d);
	return n;
}

/* One way of damaging remote pack key (orig: its bytes, size): the pull of step 1 into a
 * fresh adopted store fails naming the key, and leaves the store as it was. */
static void bad_pack(const char *url, const char *id, const char *path, const char *key,
		     const uint8_t *bytes, uint64_t len, const char *how)
{
	obj_put(url, key, bytes, len);
	ckpt_store *s = adopt(url, id, path);
	char pk[4300];
	snprintf(pk, sizeof pk, "%s/packs", path);
	int rc = rstore_pull(s, 1, NULL, NULL, NULL, NULL);
	CHECK(rc == -CKPT_E_CORRUPT || rc == -CKPT_E_CHECKSUM);
	CHECK(strstr(ckpt_errmsg(), key) != NULL);
	printf("%s: rc %d: %s\n", how, rc, ckpt_errmsg());
	CHECK(local_count(s) == 0);
	CHECK(t_dir_bytes(pk) == 0);
	CHECK(temporaries(path) == 0);
	ckpt_store_close(s);
}

/* A remote pack cut in its last record's padding, a padding byte flipped, bytes appended. */
static void damaged_packs(const char *url, const char *id, const char *dir)
{
	char path[4200], key[256];
	snprintf(path, sizeof path, "%s/d", dir);
	struct rmt *r;
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	struct tier_ref ref = {0};
	snprintf(ref.id, sizeof ref.id, "%s", id);
	tier_key_pack(&ref, 1, key, sizeof key); /* step 1's (the first save's) */
	rmt_close(r);
	uint64_t size;
	uint8_t *orig = obj_get(url, key, &size);
	REQUIRE(size % 4096 == 0 && orig[size - 1] == 0); /* the last record is padded */
	bad_pack(url, id, path, key, orig, size - 1, "cut by 1 byte");
	orig[size - 1] ^= 0x5a;
	bad_pack(url, id, path, key, orig, size, "padding byte flipped");
	orig[size - 1] ^= 0x5a;
	memset(orig + size, 0, 4096);
	bad_pack(url, id, path, key, orig, size + 4096, "4096 bytes appended");
	obj_put(url, key, orig, size); /* repaired: the pull succeeds and verifies */
	ckpt_store *s = adopt(url, id, path);
	CHECK_OK(rstore_pull(s, 1, NULL, NULL, NULL, NULL));
	reader1 *rd;
	CHECK_OK(reader1_open(s, 1, &rd));
	if (rd) {
		CHECK(reader1_verify(rd, NULL, NULL, NULL) == 0);
		reader1_close(rd);
	}
	ckpt_store_close(s);
	free(orig);
}

static void put_file(const char *dir, const char *name, const char *text)
{
	char p[4400];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* What an adopt killed before it linked the header leaves: packs/, manifests/, packids, the
 * temporary files of packids and of the header. */
static void leftovers(const char *path)
{
	char sub[4300];
	t_rmrf(path);
	REQUIRE(mkdir(path, 0755) == 0);
	snprintf(sub, sizeof sub, "%s/packs", path);
	REQUIRE(mkdir(sub, 0755) == 0);
	snprintf(sub, sizeof sub, "%s/manifests", path);
	REQUIRE(mkdir(sub, 0755) == 0);
	put_file(path, "packids", "0 1\n");
	put_file(path, ".packids.tmp.4242.0123456789abcdef", "0 1\n");
	put_file(path, ".store.tmp.4242.0123456789abcdef", "");
}

static void interrupted_adopt(const char *url, const char *id, const char *dir)
{
	char path[4200], sub[4400];
	snprintf(path, sizeof path, "%s/killed", dir);
	leftovers(path);
	CHECK_OK(ckpt_remote_adopt(url, id, path));
	ckpt_store *s;
	CHECK_OK(ckpt_store_open(path, NULL, &s));
	if (s) {
		char got[33];
		ckpt_store_id(s, got);
		CHECK(!strcmp(got, id));
		ckpt_store_close(s);
	}
	CHECK_OK(ckpt_remote_adopt(url, id, path)); /* again: the store it is, accepted */
	/* Anything an adopt does not leave is someone's: still refused. */
	const char *foreign[] = {"notes.txt", "packs/00000001.pack", "manifests/x"};
	for (size_t i = 0; i < 3; i++) {
		leftovers(path);
		put_file(path, foreign[i], "x");
		CHECK_RC(ckpt_remote_adopt(url, id, path), -CKPT_E_EXISTS);
		CHECK(strstr(ckpt_errmsg(), "not empty") != NULL);
		snprintf(sub, sizeof sub, "%s/store", path);
		CHECK(access(sub, F_OK) != 0);
	}
}

/* A header object under an id that is not its store's. */
static void forged_header(const char *url, const char *id, const char *dir)
{
	char sub[4200], path[4200], key[256], fkey[256];
	const char *fake = "0123456789abcdef0123456789abcdef";
	struct tier_ref ref = {0}, fref = {0};
	snprintf(ref.id, sizeof ref.id, "%s", id);
	snprintf(fref.id, sizeof fref.id, "%s", fake);
	tier_key_hdr(&ref, key, sizeof key);
	tier_key_hdr(&fref, fkey, sizeof fkey);
	uint64_t size;
	uint8_t *hdr = obj_get(url, key, &size);
	t_remote_sub(url, "forged", sub, sizeof sub);
	obj_put(sub, fkey, hdr, size);
	snprintf(path, sizeof path, "%s/forged", dir);
	CHECK_RC(ckpt_remote_adopt(sub, fake, path), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), fkey) != NULL);
	printf("forged header: %s\n", ckpt_errmsg());
	CHECK_RC(ckpt_remote_adopt(sub, NULL, path), -CKPT_E_CORRUPT); /* the only store */
	CHECK(access(path, F_OK) != 0);
	free(hdr);
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-pull", &cleanup);
	char *dir = t_tmpdir("remote-pull-local");
	char path[4200];
	snprintf(path, sizeof path, "%s/a", dir);
	for (int i = 0; i < NT; i++)
		REQUIRE((data[i] = malloc(TBYTES)));
	ckpt_store *s = t_open_store(path, CHUNK, CKPT_COMPRESS_NONE);
	REQUIRE(rstore_set(s, url, 0) == 0);
	char id[33];
	ckpt_store_id(s, id);
	fill(1);
	t_remote_save(s, 1, data, NT, TBYTES);
	CHECK_OK(rstore_push(s, 1, NULL, NULL, NULL));
	ckpt_store_close(s);

	damaged_packs(url, id, dir);
	interrupted_adopt(url, id, dir);
	forged_header(url, id, dir);
	two_writers(url, id, dir);

	for (int i = 0; i < NT; i++)
		free(data[i]);
	return t_remote_done(dir, cleanup, url);
}
