/* gc and prune act only on this store's packs: a file whose name is not
 * exactly the canonical NNNNNNNN.pack, or whose header carries another store's uuid, is left
 * alone and reported; before the fix, "2.pack" made gc remove the real 00000002.pack, and gc of one
 * store removed the packs of another that shares its data directory. */
#include "helpers.h"

#include <sys/stat.h>
#include <unistd.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

enum { NT = 3, TB = 6 * (64 << 10) + 333, CHUNK = 64 << 10, STEPS = 4 };

static void data_for(uint8_t *buf, uint64_t step, int t)
{
	t_fill(buf, TB, step * 1000 + (uint64_t)t); /* every step new: one pack set per step */
}

static ckpt_store *open_opts(const char *dir, const char *data_dir)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 8 << 20);
	ckpt_options_set(o, CKPT_OPT_IO_SIZE, 256 << 10);
	ckpt_options_set(o, CKPT_OPT_PACK_SIZE, 1 << 20);
	if (data_dir)
		REQUIRE(ckpt_options_add_data_dir(o, data_dir) == 0);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	return s;
}

static void build(const char *dir, const char *data_dir)
{
	ckpt_store *s = open_opts(dir, data_dir);
	uint8_t *buf[NT]; /* the save reads them until commit returns */
	uint64_t shape[1] = {TB};
	for (int t = 0; t < NT; t++)
		buf[t] = malloc(TB);
	for (uint64_t step = 1; step <= STEPS; step++) {
		save1 *sv;
		REQUIRE(save1_begin(s, step, &sv) == 0);
		for (int t = 0; t < NT; t++) {
			char nm[16];
			snprintf(nm, sizeof nm, "w%d", t);
			data_for(buf[t], step, t);
			REQUIRE(save1_add_tensor(sv, nm, CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST,
						     buf[t]) == 0);
		}
		REQUIRE(save1_commit(sv, NULL) == 0);
	}
	for (int t = 0; t < NT; t++)
		free(buf[t]);
	ckpt_store_close(s);
}

/* Checkpoints that fail to verify or restore their data (want: how many must be listed). */
static int damaged(const char *dir, int want)
{
	ckpt_store *s = t_open_store(dir, 0, 0);
	ckpt_info *list;
	int n = ckpt_store_list(s, 1, &list), bad = 0;
	REQUIRE(n >= 0);
	if (n != want) {
		fprintf(stderr, "%s: %d checkpoints, expected %d\n", dir, n, want);
		bad++;
	}
	uint8_t *want_b = malloc(TB), *got = malloc(TB);
	for (int k = 0; k < n; k++) {
		reader1 *r;
		if (list[k].error || reader1_open(s, list[k].step, &r)) {
			fprintf(stderr, "%s step %llu: %s\n", dir, (unsigned long long)list[k].step,
				ckpt_errmsg());
			bad++;
			continue;
		}
		if (reader1_verify(r, NULL, NULL, NULL)) {
			fprintf(stderr, "%s step %llu: verify: %s\n", dir,
				(unsigned long long)list[k].step, ckpt_errmsg());
			bad++;
		}
		for (int t = 0; t < NT; t++) {
			data_for(want_b, list[k].step, t);
			char nm[16];
			snprintf(nm, sizeof nm, "w%d", t);
			int rc = reader1_restore(r, (size_t)reader1_find(r, nm), CKPT_MEM_HOST,
						     got, TB);
			if (rc || memcmp(want_b, got, TB)) {
				fprintf(stderr, "%s step %llu %s: %s\n", dir,
					(unsigned long long)list[k].step, nm,
					rc ? ckpt_errmsg() : "restored bytes differ");
				bad++;
			}
		}
		reader1_close(r);
	}
	ckpt_info_free(list);
	free(want_b);
	free(got);
	ckpt_store_close(s);
	return bad;
}

static void copy_file(const char *from, const char *to)
{
	char cmd[9000];
	snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
	REQUIRE(system(cmd) == 0);
}

/* F1: look-alike names of pack 2 (and an empty one) are no second pack 2. */
static void lookalike_names(void)
{
	char *dir = t_tmpdir("gcf");
	build(dir, NULL);
	char real[4096], p[4096];
	snprintf(real, sizeof real, "%s/packs/00000002.pack", dir);
	REQUIRE(access(real, F_OK) == 0);
	const char *names[] = {"2.pack", "02.pack", "+2.pack", "0000000002.pack", " 2.pack"};
	for (size_t i = 0; i < ARRAY_LEN(names); i++) {
		snprintf(p, sizeof p, "%s/packs/%s", dir, names[i]);
		copy_file(real, p);
	}
	snprintf(p, sizeof p, "%s/packs/000000002.pack", dir); /* empty, nine digits */
	FILE *f = fopen(p, "w");
	REQUIRE(f);
	fclose(f);
	ckpt_store *s = t_open_store(dir, 0, 0);
	gc_report *rep = NULL;
	CHECK_OK(retain_gc(s, 0.99, 0, &rep));
	CHECK(rep && rep->files_left_alone == ARRAY_LEN(names) + 1);
	CHECK(rep && rep->left_alone && strstr(rep->left_alone, "not a canonical pack name"));
	gc_report_free(rep);
	retain_keep pol = {.keep_last = 2};
	CHECK_OK(retain_prune(s, &pol, 0, &rep));
	CHECK(rep && rep->files_left_alone == ARRAY_LEN(names) + 1);
	gc_report_free(rep);
	ckpt_store_close(s);
	CHECK(damaged(dir, 2) == 0);
	for (size_t i = 0; i < ARRAY_LEN(names); i++) {
		snprintf(p, sizeof p, "%s/packs/%s", dir, names[i]);
		CHECK(access(p, F_OK) == 0); /* left alone */
	}
	t_rmrf(dir);
	free(dir);
}

/* F2: two stores share one data directory; gc and prune of one leave the other's packs. */
static void shared_data_dir(void)
{
	char *a = t_tmpdir("gca"), *b = t_tmpdir("gcb"), *d = t_tmpdir("gcd");
	build(a, d);
	build(b, d);
	ckpt_store *s = open_opts(a, NULL);
	retain_keep pol = {.keep_last = 1};
	gc_report *rep = NULL;
	CHECK_OK(retain_prune(s, &pol, 0, &rep));
	CHECK(rep && rep->files_left_alone > 0);
	CHECK(rep && rep->left_alone && strstr(rep->left_alone, "another store"));
	gc_report_free(rep);
	CHECK_OK(retain_gc(s, 0.99, 0, NULL));
	ckpt_store_close(s);
	CHECK(damaged(a, 1) == 0);
	CHECK(damaged(b, STEPS) == 0);
	t_rmrf(a);
	t_rmrf(b);
	t_rmrf(d);
	free(a);
	free(b);
	free(d);
}

/* F2: packs/ of a store (with no checkpoint) is a symlink into another store's packs/. gc either
 * refuses or leaves the other store's packs alone; the other store loses nothing. */
static void symlinked_packs(void)
{
	char *a = t_tmpdir("gsa"), *b = t_tmpdir("gsb");
	build(b, NULL);
	ckpt_store_close(t_open_store(a, 0, 0));
	char p[4096], target[4096], cmd[9000];
	snprintf(p, sizeof p, "%s/packs", a);
	snprintf(target, sizeof target, "%s/packs", b);
	snprintf(cmd, sizeof cmd, "rmdir '%s'", p);
	REQUIRE(system(cmd) == 0);
	REQUIRE(symlink(target, p) == 0);
	ckpt_store *s = NULL;
	if (ckpt_store_open(a, NULL, &s) == 0) {
		retain_gc(s, 0.99, 0, NULL);
		retain_keep pol = {.keep_last = 1};
		retain_prune(s, &pol, 0, NULL);
		ckpt_store_close(s);
	}
	CHECK(damaged(b, STEPS) == 0);
	t_rmrf(a);
	t_rmrf(b);
	free(a);
	free(b);
}

/* F5: prune with a data directory missing (not mounted) removes nothing and says why. */
static void missing_data_dir(void)
{
	char *a = t_tmpdir("gma"), *d = t_tmpdir("gmd");
	build(a, d);
	char moved[4096];
	snprintf(moved, sizeof moved, "%s.away", d);
	REQUIRE(rename(d, moved) == 0);
	ckpt_store *s = open_opts(a, NULL);
	retain_keep pol = {.keep_last = 1};
	CHECK(retain_prune(s, &pol, 0, NULL) < 0);
	CHECK(strstr(ckpt_errmsg(), d) && strstr(ckpt_errmsg(), "nothing was removed"));
	ckpt_info *list;
	CHECK(ckpt_store_list(s, 1, &list) == STEPS);
	ckpt_info_free(list);
	ckpt_store_close(s);
	REQUIRE(rename(moved, d) == 0);
	CHECK(damaged(a, STEPS) == 0);
	t_rmrf(a);
	t_rmrf(d);
	free(a);
	free(d);
}

int main(void)
{
	missing_data_dir();
	lookalike_names();
	shared_data_dir();
	symlinked_packs();
	return t_done();
}
