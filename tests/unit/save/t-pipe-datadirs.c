/* Data directories (ckpt_options_add_data_dir): packs are striped over the store's own pack
 * directory and every data directory; the statistics count them; the list is recorded in
 * STORE/datadirs, so a handle opened without the options (read-write or read-only, from another
 * working directory) finds every pack; verify and restore work; a missing data directory makes
 * restore and verify fail with an error that names the pack, and a save fail with one that names
 * the directory; once it is back everything works again. */
#include "t-pipe-util.h"

#include <limits.h>

#define CS (64u << 10)

static char *file_text(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *b = calloc(1, 65536);
	size_t n = fread(b, 1, 65535, f);
	b[n] = 0;
	fclose(f);
	return b;
}

static void count_in(const char *root, int *out)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/packs", root);
	*out = tp_count_packs(p);
}

static void test_striping(int compress)
{
	char *base = t_tmpdir("dd");
	char abs[PATH_MAX];
	REQUIRE(realpath(base, abs));
	char store[PATH_MAX + 16], d1[PATH_MAX + 16], d2[PATH_MAX + 16], d2moved[PATH_MAX + 32];
	snprintf(store, sizeof store, "%s/store", abs);
	snprintf(d1, sizeof d1, "%s/nvme1", abs);
	snprintf(d2, sizeof d2, "%s/nvme2", abs);
	snprintf(d2moved, sizeof d2moved, "%s/nvme2.away", abs);
	struct tp_opts o = TP_OPTS(.pool = 2u << 20, .io_size = 256u << 10, .threads = 4,
				   .compress = compress, .data_dirs = {d1, d2});
	ckpt_store *s = tp_open(store, &o);
	struct tp_set *a = tp_set_new(8, 600000, 7); /* ~4.6 MiB: ~19 slab jobs */
	struct tp_set *b = tp_set_dup(a);
	tp_set_touch(b, CS, 2, 1);
	ckpt_stats st;
	CHECK_OK(tp_save(s, 1, a, &st));
	CHECK(st.data_dirs == 3);
	save1 *sv = tp_begin(s, 2, b);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.data_dirs == 3);
	CHECK(st.chunks_reused > 0);
	tp_check(s, 1, a);
	tp_check(s, 2, b);
	ckpt_store_close(s);

	int n0, n1, n2;
	count_in(store, &n0);
	count_in(d1, &n1);
	count_in(d2, &n2);
	printf("packs: store %d, %s %d, %s %d\n", n0, d1, n1, d2, n2);
	CHECK(n0 >= 1 && n1 >= 1 && n2 >= 1);
	char rec[PATH_MAX + 32];
	snprintf(rec, sizeof rec, "%s/datadirs", store);
	char *txt = file_text(rec);
	CHECK(txt && strstr(txt, d1) && strstr(txt, d2));
	free(txt);

	/* Reopen without the options: every pack is found. */
	s = tp_open(store, &TP_OPTS(.no_create = 1));
	tp_check(s, 1, a);
	tp_check(s, 2, b);
	/* A save through that handle stripes over the recorded directories too. */
	struct tp_set *c = tp_set_dup(b);
	tp_set_touch(c, CS, 1, 2);
	CHECK_OK(tp_save(s, 3, c, &st));
	CHECK(st.data_dirs == 3);
	tp_check(s, 3, c);
	ckpt_store_close(s);
	/* Read-only, from another working directory. */
	char cwd[PATH_MAX];
	REQUIRE(getcwd(cwd, sizeof cwd));
	REQUIRE(chdir("/") == 0);
	ckpt_options *ro = ckpt_options_create();
	ckpt_options_set(ro, CKPT_OPT_READ_ONLY, 1);
	s = NULL;
	CHECK_OK(ckpt_store_open(store, ro, &s));
	ckpt_options_free(ro);
	if (s) {
		tp_check(s, 1, a);
		tp_check(s, 3, c);
		ckpt_store_close(s);
	}
	REQUIRE(chdir(cwd) == 0);

	/* A data directory goes missing. */
	REQUIRE(rename(d2, d2moved) == 0);
	s = tp_open(store, &TP_OPTS(.no_create = 1));
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 1, &r));
	int failures = 0;
	char msg[2048] = "";
	for (size_t i = 0; r && i < reader1_tensor_count(r); i++) {
		uint8_t *buf = malloc(a->t[i].n);
		int rc = reader1_restore(r, i, CKPT_MEM_HOST, buf, a->t[i].n);
		if (rc) {
			CHECK(rc == -CKPT_E_CORRUPT || rc == -CKPT_E_NOTFOUND || rc == -CKPT_E_IO);
			if (!failures)
				snprintf(msg, sizeof msg, "%s", ckpt_errmsg());
			failures++;
		}
		free(buf);
	}
	printf("missing data directory: %d tensor(s) fail: %s\n", failures, msg);
	CHECK(failures > 0);
	CHECK(strstr(msg, ".pack") != NULL);
	CHECK(strstr(msg, "missing") != NULL || strstr(msg, "No such file") != NULL);
	CHECK(strstr(msg, "checkpoint 1") != NULL);
	CHECK(reader1_verify(r, NULL, NULL, NULL) > 0);
	reader1_close(r);
	/* A save cannot stripe over a directory that is gone: it fails and names it. */
	save1 *sv2 = NULL;
	int rc = save1_begin(s, 4, &sv2);
	if (!rc) {
		for (size_t i = 0; i < c->nt; i++)
			save1_add_tensor(sv2, c->t[i].name, c->t[i].dt, c->t[i].ndim, c->t[i].shape,
					     CKPT_MEM_HOST, c->t[i].data);
		rc = save1_commit(sv2, NULL);
	}
	printf("save with a missing data directory: %s\n", rc ? ckpt_errmsg() : "succeeded");
	CHECK(rc != 0);
	CHECK(strstr(ckpt_errmsg(), "nvme2") != NULL);
	ckpt_store_close(s);
	REQUIRE(rename(d2moved, d2) == 0);
	s = tp_open(store, &TP_OPTS(.no_create = 1));
	tp_check(s, 1, a);
	tp_check(s, 2, b);
	tp_check(s, 3, c);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	tp_set_free(c);
	t_rmrf(base);
	free(base);
}

/* Data directories given as relative paths must still be found from another working directory
 * (the list is read by other processes: ckptctl, a restore job). */
static void test_relative(void)
{
	char *base = t_tmpdir("dd-rel"); /* relative to the repository root */
	char store[4200], d1[4200];
	snprintf(store, sizeof store, "%s/store", base);
	snprintf(d1, sizeof d1, "%s/nvme1", base);
	ckpt_store *s = tp_open(store, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 2,
						.data_dirs = {d1}));
	struct tp_set *a = tp_set_new(6, 300000, 9);
	CHECK_OK(tp_save(s, 1, a, NULL));
	ckpt_store_close(s);
	char abs[PATH_MAX], cwd[PATH_MAX];
	REQUIRE(realpath(store, abs));
	REQUIRE(getcwd(cwd, sizeof cwd));
	REQUIRE(chdir("/") == 0);
	s = tp_open(abs, &TP_OPTS(.no_create = 1));
	if (tp_check(s, 1, a))
		fprintf(stderr, "BUG: a data directory given as a relative path is not found from "
				"another working directory\n");
	ckpt_store_close(s);
	REQUIRE(chdir(cwd) == 0);
	tp_set_free(a);
	t_rmrf(base);
	free(base);
}

int main(void)
{
	test_striping(0);
	test_striping(1);
	test_relative();
	return t_done();
}
