/* Generates the seed corpus of the fuzz targets (see README.md): real manifests, store, pack and
 * record headers and compressed chunk payloads taken from stores written through the public API,
 * plus a few interesting invalid inputs. Output: tests/fuzz/corpus/{manifest,records,codec}/.
 *
 *   make lib && cc -std=gnu11 -D_GNU_SOURCE -Iinclude -Ilib tests/fuzz/gen-corpus.c \
 *       build/lib/libckpt.a -lzstd -lxxhash -luring -lpthread -o build/gen-corpus
 *   build/gen-corpus
 *
 * The output differs from run to run (store uuids and times), so regenerate only to add seeds. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "common/ckpt_int.h"
#include "format/codec.h"
#include "common/common.h"
#include "format/format.h"
#include "common/hash.h"

static const char *root = "tests/fuzz/corpus";

static void die(const char *what)
{
	fprintf(stderr, "gen-corpus: %s: %s\n", what, ckpt_errmsg());
	exit(1);
}

static void put(const char *sub, const char *name, const void *b, size_t n)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", root, sub);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/%s/%s", root, sub, name);
	FILE *f = fopen(p, "wb");
	if (!f || fwrite(b, 1, n, f) != n || fclose(f))
		die(p);
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		die(path);
	fseek(f, 0, SEEK_END);
	long l = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)l + 1);
	if (fread(b, 1, (size_t)l, f) != (size_t)l)
		die(path);
	fclose(f);
	*n = (size_t)l;
	return b;
}

static uint64_t rng = 12345;
static uint64_t rnd(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint8_t *data(size_t n, int smooth)
{
	uint8_t *b = malloc(n ? n : 1);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)rnd();
	if (smooth)
		for (size_t i = 1; i < n; i += 2)
			b[i] = (uint8_t)(0x3f + (b[i] & 1));
	return b;
}

static ckpt_store *open_store(const char *dir, int compress)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 64 << 10);
	ckpt_options_set(o, CKPT_OPT_COMPRESS, compress);
	ckpt_store *s;
	if (ckpt_store_open(dir, o, &s))
		die(dir);
	ckpt_options_free(o);
	return s;
}

static void add(save1 *sv, const char *name, ckpt_dtype dt, unsigned nd, const uint64_t *sh,
		const void *d)
{
	if (save1_add_tensor(sv, name, dt, nd, sh, CKPT_MEM_HOST, d))
		die(name);
}

static void fix_manifest(uint8_t *b, size_t len)
{
	put_le64(b + 16, len);
	ckpt_digest d;
	ckpt_digest_of(b, len - 16, &d);
	memcpy(b + len - 16, d.b, 16);
}

/* Copies the records of a pack: headers to records/, payloads to codec/. */
static void take_pack(const char *path, const char *tag)
{
	size_t n;
	uint8_t *b = slurp(path, &n);
	char name[256];
	if (n >= PACK_HDR_LEN) {
		snprintf(name, sizeof name, "pack-%s", tag);
		put("records", name, b, PACK_HDR_LEN);
	}
	uint64_t off = PACK_HDR_LEN;
	for (int k = 0; k < 8 && off + REC_HDR_LEN <= n; k++) {
		struct rec_hdr h;
		if (rec_hdr_decode(b + off, REC_HDR_LEN, &h, path))
			break;
		snprintf(name, sizeof name, "rec-%s-%d", tag, k);
		put("records", name, b + off, REC_HDR_LEN);
		if (h.codec != CKPT_CODEC_RAW || k == 0) {
			size_t pl = h.codec == CKPT_CODEC_RAW ? MIN(h.stored_len, 300u) : h.stored_len;
			uint8_t *c = malloc(5 + pl);
			c[0] = h.codec;
			put_le32(c + 1, h.codec == CKPT_CODEC_RAW ? (uint32_t)pl : h.raw_len);
			memcpy(c + 5, b + off + REC_HDR_LEN, pl);
			snprintf(name, sizeof name, "chunk-%s-%d-codec%d", tag, k, h.codec);
			put("codec", name, c, 5 + pl);
			free(c);
		}
		off += rec_span(h.stored_len);
	}
	free(b);
}

static void take_store(const char *dir, const char *tag)
{
	char p[4096], name[64];
	size_t n;
	snprintf(p, sizeof p, "%s/store", dir);
	uint8_t *b = slurp(p, &n);
	snprintf(name, sizeof name, "store-%s", tag);
	put("records", name, b, n);
	free(b);
	snprintf(p, sizeof p, "%s/manifests", dir);
	DIR *d = opendir(p);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char f[8192];
		snprintf(f, sizeof f, "%s/%s", p, e->d_name);
		b = slurp(f, &n);
		snprintf(name, sizeof name, "valid-%s-step%llu", tag, strtoull(e->d_name, NULL, 10));
		put("manifest", name, b, n);
		free(b);
	}
	closedir(d);
	snprintf(p, sizeof p, "%s/packs", dir);
	d = opendir(p);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char f[8192];
		snprintf(f, sizeof f, "%s/%s", p, e->d_name);
		snprintf(name, sizeof name, "%s-%lu", tag, strtoul(e->d_name, NULL, 10));
		take_pack(f, name);
	}
	closedir(d);
}

static void store_a(const char *dir)
{
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE);
	save1 *sv;
	/* 1: nothing */
	if (save1_begin(s, 1, &sv) || save1_commit(sv, NULL))
		die("step 1");
	/* 2: a scalar and an empty metadata value */
	double x = 3.25;
	if (save1_begin(s, 2, &sv))
		die("step 2");
	add(sv, "s", CKPT_DTYPE_F64, 0, NULL, &x);
	save1_set_meta(sv, "k", "");
	if (save1_commit(sv, NULL))
		die("step 2");
	/* 3: 0-byte tensors */
	uint64_t z1[1] = {0}, z3[3] = {2, 0, 3};
	uint16_t bf = 0x3f80;
	if (save1_begin(s, 3, &sv))
		die("step 3");
	add(sv, "empty", CKPT_DTYPE_F32, 1, z1, NULL);
	add(sv, "empty3", CKPT_DTYPE_BOOL, 3, z3, NULL);
	add(sv, "scalar.bf16", CKPT_DTYPE_BF16, 0, NULL, &bf);
	if (save1_commit(sv, NULL))
		die("step 3");
	/* 4: metadata only */
	if (save1_begin(s, 4, &sv))
		die("step 4");
	save1_set_meta(sv, "lr", "0.001");
	save1_set_meta(sv, "note", "unicode \xe2\x9c\x93 \"q\" \\ \n");
	save1_set_meta(sv, "\xf0\x9f\x98\x80", "emoji key");
	if (save1_commit(sv, NULL))
		die("step 4");
	/* 5: multi-chunk tensors with tails, a duplicate (dedup), every size class */
	uint64_t sh[2] = {3, 30000}, one[1] = {1}, ex[1] = {128 << 10};
	uint8_t *w = data(3 * 30000 * 2, 1), *u = data(128 << 10, 0);
	if (save1_begin(s, 5, &sv))
		die("step 5");
	add(sv, "layer.0.weight", CKPT_DTYPE_BF16, 2, sh, w);
	add(sv, "layer.0.weight.copy", CKPT_DTYPE_BF16, 2, sh, w);
	add(sv, "one", CKPT_DTYPE_U8, 1, one, u);
	add(sv, "exact", CKPT_DTYPE_U8, 1, ex, u);
	save1_set_meta(sv, "epoch", "3");
	if (save1_commit(sv, NULL))
		die("step 5");
	/* 6: unusual names; reuses chunks of step 5 */
	const char *names[] = {"x", " ", "a/b/../c", "\xc3\xa9\xe2\x82\xac", "tab\there", "new\nline",
			       "quote\"back\\slash", "\x7f\x01\x1f"};
	uint64_t s5[1] = {5};
	if (save1_begin(s, 6, &sv))
		die("step 6");
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		add(sv, names[i], CKPT_DTYPE_I16, 1, s5, u + i);
	add(sv, "exact-again", CKPT_DTYPE_U8, 1, ex, u);
	if (save1_commit(sv, NULL))
		die("step 6");
	/* 7: the most dimensions; 8: many small tensors */
	uint64_t r32[CKPT_MAX_DIMS];
	for (int i = 0; i < CKPT_MAX_DIMS; i++)
		r32[i] = i % 5 == 0 ? 2 : 1;
	if (save1_begin(s, 7, &sv))
		die("step 7");
	add(sv, "rank32", CKPT_DTYPE_F32, CKPT_MAX_DIMS, r32, u);
	if (save1_commit(sv, NULL))
		die("step 7");
	if (save1_begin(s, 8, &sv))
		die("step 8");
	char nm[64];
	for (int i = 0; i < 60; i++) {
		uint64_t sh1[1] = {(uint64_t)(i % 37)};
		snprintf(nm, sizeof nm, "small.%03d", i);
		add(sv, nm, CKPT_DTYPE_I32, 1, sh1, u + 64 * i);
	}
	if (save1_commit(sv, NULL))
		die("step 8");
	ckpt_store_close(s);
	free(w);
	free(u);
}

static void store_b(const char *dir)
{
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_ZSTD);
	uint64_t sh[1] = {100000}, sh4[1] = {50000};
	uint8_t *w = data(200000, 1), *f = data(200000, 1), *z = calloc(1, 70000), *r = data(70000, 0);
	save1 *sv;
	if (save1_begin(s, 10, &sv))
		die("zstd step");
	add(sv, "bf16", CKPT_DTYPE_BF16, 1, sh, w);
	add(sv, "f32", CKPT_DTYPE_F32, 1, sh4, f);
	add(sv, "u8.zeros", CKPT_DTYPE_U8, 1, (uint64_t[]){70000}, z);
	add(sv, "u8.random", CKPT_DTYPE_U8, 1, (uint64_t[]){70000}, r);
	if (save1_commit(sv, NULL))
		die("zstd step");
	w[5] ^= 1;
	if (save1_begin(s, 11, &sv))
		die("zstd step 2");
	add(sv, "bf16", CKPT_DTYPE_BF16, 1, sh, w);
	add(sv, "f32", CKPT_DTYPE_F32, 1, sh4, f);
	if (save1_commit(sv, NULL))
		die("zstd step 2");
	ckpt_store_close(s);
	free(w);
	free(f);
	free(z);
	free(r);
}

static void invalid_seeds(const char *dir_a)
{
	char p[4096];
	size_t n;
	snprintf(p, sizeof p, "%s/manifests/%020llu.ckpt", dir_a, 5ull);
	uint8_t *m = slurp(p, &n), *c = malloc(n + 64);
	put("manifest", "bad-empty", "", 0);
	put("manifest", "bad-magic-only", "CKPTMANI", 8);
	put("manifest", "bad-truncated-half", m, n / 2);
	put("manifest", "bad-truncated-trailer", m, n - 1);
	memcpy(c, m, n);
	c[n - 1] ^= 1;
	put("manifest", "bad-trailer-flip", c, n);
	memcpy(c, m, n);
	put_le32(c + 8, 2);
	fix_manifest(c, n);
	put("manifest", "bad-future-version", c, n);
	memcpy(c, m, n);
	put_le64(c + 72, (1ull << 62) + get_le64(m + 72));
	fix_manifest(c, n);
	put("manifest", "bad-nrefs-wraps", c, n);
	memcpy(c, m, n);
	put_le32(c + 64, 0xffffffffu);
	fix_manifest(c, n);
	put("manifest", "bad-ntensors-huge", c, n);
	memcpy(c, m, n);
	put_le32(c + 56, 1000);
	fix_manifest(c, n);
	put("manifest", "bad-chunk-size", c, n);
	memcpy(c, m, n - 16);
	memset(c + n - 16, 0, 8);
	fix_manifest(c, n + 8);
	put("manifest", "bad-trailing-bytes", c, n + 8);
	free(m);
	free(c);

	snprintf(p, sizeof p, "%s/store", dir_a);
	uint8_t *s = slurp(p, &n);
	put_le32(s + 8, 2);
	put_le64(s + 56, ckpt_checksum64(s, 56));
	put("records", "bad-store-version", s, 64);
	put_le32(s + 8, 1);
	put_le32(s + 32, 3 << 16);
	put_le64(s + 56, ckpt_checksum64(s, 56));
	put("records", "bad-store-chunk-size", s, 64);
	put("records", "bad-store-truncated", s, 63);
	free(s);
	uint8_t ph[PACK_HDR_LEN];
	struct pack_hdr h = {.version = 1, .pack_id = 1};
	pack_hdr_encode(&h, ph);
	ph[2000] = 1;
	put("records", "bad-pack-padding", ph, sizeof ph);
	put("records", "bad-pack-short", ph, 64);
	uint8_t rh[REC_HDR_LEN];
	struct rec_hdr r = {.codec = CKPT_CODEC_RAW, .raw_len = 100, .stored_len = 100};
	rec_hdr_encode(&r, rh);
	put_le32(rh + 28, 99);
	put_le64(rh + 56, ckpt_checksum64(rh, 56));
	put("records", "bad-rec-raw-len", rh, sizeof rh);
	rh[4] = 9;
	put_le64(rh + 56, ckpt_checksum64(rh, 56));
	put("records", "bad-rec-codec", rh, sizeof rh);

	/* codec: synthetic payloads, valid and damaged */
	ckpt_codec_ctx *cc = ckpt_codec_ctx_create(64 << 10);
	for (size_t elem = 1; elem <= 4; elem *= 2) {
		size_t len = (32 << 10) + 3;
		uint8_t *d = data(len, 1), *o = malloc(ckpt_codec_bound(len) + 5);
		size_t sl;
		int k = ckpt_codec_encode(cc, d, len, elem, 3, o + 5, ckpt_codec_bound(len), &sl);
		o[0] = (uint8_t)k;
		put_le32(o + 1, (uint32_t)len);
		if (k == CKPT_CODEC_RAW)
			memcpy(o + 5, d, sl = len);
		char name[64];
		snprintf(name, sizeof name, "synthetic-elem%zu-codec%d", elem, k);
		put("codec", name, o, 5 + sl);
		snprintf(name, sizeof name, "bad-truncated-elem%zu", elem);
		put("codec", name, o, 5 + sl / 2);
		put_le32(o + 1, (uint32_t)len - 1);
		snprintf(name, sizeof name, "bad-rawlen-elem%zu", elem);
		put("codec", name, o, 5 + sl);
		put_le32(o + 1, (uint32_t)len);
		o[5 + sl / 3] ^= 0x55;
		snprintf(name, sizeof name, "bad-flip-elem%zu", elem);
		put("codec", name, o, 5 + sl);
		free(d);
		free(o);
	}
	ckpt_codec_ctx_free(cc);
	uint8_t u[16] = {9, 4, 0, 0, 0, 1, 2, 3, 4};
	put("codec", "bad-unknown-codec", u, 9);
	u[0] = CKPT_CODEC_ZSTD;
	put("codec", "bad-zstd-garbage", u, 16);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		root = argv[1];
	mkdir(root, 0755);
	char a[] = "/tmp/ckpt-corpus-a-XXXXXX", b[] = "/tmp/ckpt-corpus-b-XXXXXX";
	if (!mkdtemp(a) || !mkdtemp(b))
		die("mkdtemp");
	store_a(a);
	store_b(b);
	take_store(a, "raw");
	take_store(b, "zstd");
	invalid_seeds(a);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", a, b);
	if (system(cmd))
		return 1;
	printf("corpus written to %s\n", root);
	return 0;
}
