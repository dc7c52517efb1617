/* Bounds of a multi-rank checkpoint's metadata and of a strided box restore. A world
 * of 2 ranks (threads, tests/unit/t-dist-tcomm.h) saves one step; its global manifest is then
 * re-encoded (lib/format, so the checksum follows) with a crafted ckpt.dist.world (-1, 0, "12abc",
 * values that wrap or exceed the most ranks a save accepts, one that disagrees with the part
 * records) and crafted shard tables (junk after a number, a global shape whose byte size
 * overflows): dreader_open must refuse each as -CKPT_E_CORRUPT naming the key, where it
 * used to take the value (world -1 made verify loop over 4 billion ranks). Last, strided restores
 * whose destination extent overflows 64 bits must fail with -CKPT_E_INVAL before writing a byte
 * (they used to wrap into the buffer, or past it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "helpers.h"
#include "t-dist-scen.h"
#include "t-dist-world.h"
#include "t-mf-rewrite.h"

#define NR 2
#define STEP 1

static int rank_main(ckpt_comm *c, void *arg)
{
	ckpt_store **s = arg;
	ckpt_stats st;
	return scen_save(s[c->rank], c, STEP, &st);
}

static void save_world(const char *dir)
{
	ckpt_store *s[NR];
	int rc[NR];
	for (int k = 0; k < NR; k++)
		REQUIRE((s[k] = t_open_store(dir, SCEN_CHUNK, 0)));
	REQUIRE(tw_run(NR, rank_main, s, rc) == 0);
	for (int k = 0; k < NR; k++) {
		CHECK_OK(rc[k]);
		ckpt_store_close(s[k]);
	}
}

static void refused(ckpt_store *s, const char *path, const char *key, const char *value,
		    const char *orig)
{
	t_mf_set_meta(path, key, value);
	dreader *d = NULL;
	int rc = dreader_open(s, STEP, &d);
	if (rc != -CKPT_E_CORRUPT || !strstr(ckpt_errmsg(), key) || !strstr(ckpt_errmsg(), value))
		fprintf(stderr, "%s = \"%s\": rc %d (%s), world %u\n", key, value, rc,
			rc ? ckpt_errmsg() : "opened", dreader_world_size(d));
	CHECK(rc == -CKPT_E_CORRUPT && d == NULL);
	CHECK(strstr(ckpt_errmsg(), key) && strstr(ckpt_errmsg(), value));
	/* Never verify the parts of what did open: a world of 4 billion would take forever. */
	dreader_close(d);
	t_mf_set_meta(path, key, orig);
}

static void test_world(ckpt_store *s, const char *path)
{
	static const char *bad[] = {"-1", "0", "12abc", "", " 2", "+2", "2 ", "0x2", "4294967298",
				    "99999999999999999999", "1048577", "1023", "3", "1"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		refused(s, path, DIST_WORLD, bad[i], "2");
	dreader *d = NULL;
	CHECK_OK(dreader_open(s, STEP, &d));
	CHECK(dreader_world_size(d) == NR);
	CHECK(d && dreader_verify_parts(d, NULL, NULL) == 0);
	dreader_close(d);
}

static void test_shards(ckpt_store *s, const char *path)
{
	reader1 *r;
	CHECK_OK(reader1_open(s, STEP, &r));
	REQUIRE(r);
	char orig[DIST_VAL_MAX], v[DIST_VAL_MAX + 64];
	snprintf(orig, sizeof orig, "%s", reader1_get_meta(r, DIST_SHARDS "w"));
	reader1_close(r);
	unsigned dt, nd, k, t0, t1;
	unsigned long long g0, g1, o[4];
	REQUIRE(sscanf(orig, "%u %u %llu %llu %u %u %llu %llu %u %llu %llu", &dt, &nd, &g0, &g1, &k,
		       &t0, &o[0], &o[1], &t1, &o[2], &o[3]) == 11 && nd == 2 && k == 2);
	const char *key = DIST_SHARDS "w";
	snprintf(v, sizeof v, "%s junk", orig);
	refused(s, path, key, v, orig);
	snprintf(v, sizeof v, "%s 7", orig);
	refused(s, path, key, v, orig);
	snprintf(v, sizeof v, "%u %u %llux %llu %u %u %llu %llu %u %llu %llu", dt, nd, g0, g1, k, t0,
		 o[0], o[1], t1, o[2], o[3]);
	refused(s, path, key, v, orig);
	/* 2^33 x 2^32 elements of 4 bytes: the byte size overflows 64 bits. */
	snprintf(v, sizeof v, "%u %u %llu %llu %u %u %llu %llu %u %llu %llu", dt, nd, 1ull << 33,
		 1ull << 32, k, t0, o[0], o[1], t1, o[2], o[3]);
	refused(s, path, key, v, orig);
	snprintf(v, sizeof v, "%u %u %llu %llu %u %u %llu %llu %u %llu %s", dt, nd, g0, g1, k, t0,
		 o[0], o[1], t1, o[2], "18446744073709551616");
	refused(s, path, key, v, orig);
}

/* A strided restore that must fail with -CKPT_E_INVAL naming what, buf untouched. */
static void strided_refused(dreader *d, size_t w, const uint64_t *len,
			    const uint64_t *strides, uint64_t size, const char *what)
{
	uint8_t buf[256];
	memset(buf, 0xa5, sizeof buf);
	uint64_t off[2] = {0, 0};
	int rc = dreader_restore_box_strided(d, w, off, len, buf, strides, size);
	if (rc != -CKPT_E_INVAL || !strstr(ckpt_errmsg(), what))
		fprintf(stderr, "strides %llu %llu, lengths %llu %llu: rc %d (%s)\n",
			(unsigned long long)strides[0], (unsigned long long)strides[1],
			(unsigned long long)len[0], (unsigned long long)len[1], rc,
			rc ? ckpt_errmsg() : "restored");
	CHECK(rc == -CKPT_E_INVAL && strstr(ckpt_errmsg(), what));
	for (size_t i = 0; i < sizeof buf; i++)
		if (buf[i] != 0xa5) {
			CHECK(!"a refused restore wrote into the buffer");
			break;
		}
}

static void test_strided(ckpt_store *s)
{
	dreader *d = NULL;
	CHECK_OK(dreader_open(s, STEP, &d));
	REQUIRE(d);
	long w = dreader_find(d, "w");
	REQUIRE(w >= 0);
	/* (3 - 1) x 2^63 is 2^64: it wrapped to 0, the box fit in 4 bytes and rows 1 and 2
	 * landed on element 0. */
	strided_refused(d, (size_t)w, (uint64_t[]){3, 1}, (uint64_t[]){1ull << 63, 1}, 4,
			"strides[0]");
	strided_refused(d, (size_t)w, (uint64_t[]){1, 3}, (uint64_t[]){1, 1ull << 63}, 4,
			"strides[1]");
	/* The last element 2^62 fits, its end in bytes (x 4) does not. */
	strided_refused(d, (size_t)w, (uint64_t[]){2, 1}, (uint64_t[]){1ull << 62, 1}, 4,
			"extent");
	/* Two dimensions that each fit and whose sum does not. */
	strided_refused(d, (size_t)w, (uint64_t[]){2, 2}, (uint64_t[]){1ull << 63, 1ull << 63}, 4,
			"extent");
	/* Fits in 64 bits, not in the buffer. */
	strided_refused(d, (size_t)w, (uint64_t[]){2, 1}, (uint64_t[]){1ull << 40, 1}, 256,
			"buffer");
	/* A strided box that fits still restores: 2 x 3 elements into rows of 8. */
	float got[16];
	uint64_t off[2] = {255, 10}, len[2] = {2, 3}, st[2] = {8, 1};
	memset(got, 0, sizeof got);
	CHECK_OK(dreader_restore_box_strided(d, (size_t)w, off, len, got, st,
						      sizeof got));
	for (unsigned i = 0; i < 2; i++)
		for (unsigned j = 0; j < 3; j++)
			CHECK(got[i * 8 + j] == scen_w(STEP, (255 + i) * W_COLS + 10 + j));
	dreader_close(d);
}

int main(void)
{
	char *dir = t_tmpdir("dist-bounds");
	save_world(dir);
	ckpt_store *s = t_open_store(dir, SCEN_CHUNK, 0);
	REQUIRE(s);
	CHECK(scen_check_layout(s, STEP, 3) == 0); /* the save itself restores as 3 ranks */
	char name[64], path[4096];
	store_mf_name(STEP, name, sizeof name);
	snprintf(path, sizeof path, "%s/%s", s->layout.mf_dir, name);
	test_world(s, path);
	test_shards(s, path);
	test_strided(s);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
