/* Damage is reported, never restored: a flipped byte in a pack (payload or record header), a
 * damaged or truncated manifest, a missing or truncated pack. Also: a second writer is "busy". */
#include "helpers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

enum { CHUNK = 64 << 10, TB = 3 * CHUNK + 100 };

struct dmg {
	int n;
	char tensor[64];
	uint64_t chunk;
	int error;
};

static void on_damage(const ckpt_damage *d, void *arg)
{
	struct dmg *g = arg;
	if (!g->n++) {
		snprintf(g->tensor, sizeof g->tensor, "%s", d->tensor ? d->tensor : "");
		g->chunk = d->chunk;
		g->error = d->error;
	}
}

static ckpt_store *make_store(char *dir, uint8_t *a, uint8_t *b, int compress)
{
	ckpt_store *s = t_open_store(dir, CHUNK, compress);
	uint64_t shape[1] = {TB};
	for (uint64_t step = 1; step <= 2; step++) {
		save1 *sv;
		REQUIRE(save1_begin(s, step, &sv) == 0);
		REQUIRE(save1_add_tensor(sv, "alpha", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, a) == 0);
		REQUIRE(save1_add_tensor(sv, "beta", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, b) == 0);
		REQUIRE(save1_commit(sv, NULL) == 0);
		if (step == 1)
			b[0] ^= 1; /* step 2 differs in beta's first chunk */
	}
	b[0] ^= 1; /* back to step 1's bytes */
	return s;
}

static void pack_damage(int where, int compress)
{
	char *dir = t_tmpdir("corrupt");
	uint8_t *a = malloc(TB), *b = malloc(TB), *buf = malloc(TB);
	t_fill(a, TB, 1);
	t_fill(b, TB, 2);
	ckpt_store *s = make_store(dir, a, b, compress);
	char pd[4200];
	snprintf(pd, sizeof pd, "%s/packs", dir);
	char *pack = t_first_file(pd, ".pack");
	REQUIRE(pack);
	/* Step 1's pack: records in order alpha c0..c3, beta c0..c3. alpha chunk 1 starts at
	 * 4096 + span(c0); uncompressed spans are 64 KiB + 4 KiB. */
	uint64_t rec1 = 4096 + (compress ? 0 : (CHUNK + 4096));
	t_flip_byte(pack, where == 0 ? rec1 + 64 + 1000 : rec1 + 9);
	reader1 *r;
	CHECK_OK(reader1_open(s, 1, &r));
	struct dmg g = {0};
	long n = reader1_verify(r, on_damage, NULL, &g);
	CHECK(n >= 1);
	CHECK(g.n == n);
	if (!compress) {
		CHECK(!strcmp(g.tensor, "alpha"));
		CHECK(g.chunk == 1);
		CHECK(g.error == (where == 0 ? CKPT_E_CHECKSUM : CKPT_E_CHECKSUM));
	}
	int rc = reader1_restore(r, 0, CKPT_MEM_HOST, buf, TB);
	CHECK(rc == -CKPT_E_CHECKSUM || rc == -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "alpha") != NULL);
	CHECK(strstr(ckpt_errmsg(), "checkpoint 1") != NULL);
	CHECK(strstr(ckpt_errmsg(), ".pack") != NULL);
	/* beta is intact in step 1 */
	CHECK_OK(reader1_restore(r, 1, CKPT_MEM_HOST, buf, TB));
	CHECK(memcmp(buf, b, TB) == 0);
	reader1_close(r);
	/* Step 2 shares alpha's chunks: damage shows there too. */
	CHECK_OK(reader1_open(s, 2, &r));
	CHECK(reader1_verify(r, NULL, NULL, NULL) >= 1);
	reader1_close(r);
	ckpt_store_close(s);
	free(pack);
	t_rmrf(dir);
	free(dir);
	free(a);
	free(b);
	free(buf);
}

static void manifest_damage(void)
{
	char *dir = t_tmpdir("mfdmg");
	uint8_t *a = malloc(TB), *b = malloc(TB);
	t_fill(a, TB, 3);
	t_fill(b, TB, 4);
	ckpt_store *s = make_store(dir, a, b, 0);
	char mf[4200];
	snprintf(mf, sizeof mf, "%s/manifests/%020d.ckpt", dir, 2);
	t_flip_byte(mf, 200);
	reader1 *r;
	CHECK_RC(reader1_open(s, 2, &r), -CKPT_E_CHECKSUM);
	CHECK(strstr(ckpt_errmsg(), "00000000000000000002.ckpt") != NULL);
	/* "latest" skips the damaged checkpoint and falls back to the newest valid one. */
	uint64_t latest;
	CHECK_OK(ckpt_store_resolve(s, CKPT_STEP_LATEST, &latest));
	CHECK(latest == 1);
	ckpt_info *list;
	CHECK(ckpt_store_list(s, 0, &list) == 1);
	ckpt_info_free(list);
	CHECK(ckpt_store_list(s, 1, &list) == 2);
	CHECK(list[1].step == 2 && list[1].error == CKPT_E_CHECKSUM);
	ckpt_info_free(list);
	/* A damaged checkpoint's step is not silently overwritten. */
	save1 *sv;
	CHECK_RC(save1_begin(s, 2, &sv), -CKPT_E_EXISTS);
	/* Truncated manifest. */
	snprintf(mf, sizeof mf, "%s/manifests/%020d.ckpt", dir, 1);
	CHECK(truncate(mf, 150) == 0);
	CHECK_RC(reader1_open(s, 1, &r), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "truncated") != NULL);
	CHECK_RC(ckpt_store_resolve(s, CKPT_STEP_LATEST, &latest), -CKPT_E_NOTFOUND);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
	free(a);
	free(b);
}

static void pack_missing_or_truncated(void)
{
	char *dir = t_tmpdir("pkmiss");
	uint8_t *a = malloc(TB), *b = malloc(TB), *buf = malloc(TB);
	t_fill(a, TB, 5);
	t_fill(b, TB, 6);
	ckpt_store *s = make_store(dir, a, b, 0);
	char pd[4200];
	snprintf(pd, sizeof pd, "%s/packs", dir);
	char *pack = t_first_file(pd, ".pack");
	CHECK(truncate(pack, 4096 + 2 * (CHUNK + 4096) + 100) == 0);
	reader1 *r;
	CHECK_OK(reader1_open(s, 1, &r));
	struct dmg g = {0};
	long n = reader1_verify(r, on_damage, NULL, &g);
	CHECK(n == 6); /* alpha chunks 2,3 and beta 0..3 */
	CHECK(g.error == CKPT_E_CORRUPT);
	CHECK_RC(reader1_restore(r, 0, CKPT_MEM_HOST, buf, TB), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "truncated") != NULL);
	reader1_close(r);
	CHECK(unlink(pack) == 0);
	CHECK_OK(reader1_open(s, 1, &r));
	g.n = 0;
	CHECK(reader1_verify(r, on_damage, NULL, &g) == 8);
	CHECK_RC(reader1_restore(r, 0, CKPT_MEM_HOST, buf, TB), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "missing") != NULL);
	reader1_close(r);
	ckpt_store_close(s);
	free(pack);
	t_rmrf(dir);
	free(dir);
	free(a);
	free(b);
	free(buf);
}

static void busy(void)
{
	char *dir = t_tmpdir("busy");
	ckpt_store_close(t_open_store(dir, 0, 0));
	int pfd[2];
	REQUIRE(pipe(pfd) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		ckpt_store *s = t_open_store(dir, 0, 0);
		save1 *sv;
		if (save1_begin(s, 1, &sv))
			_exit(1);
		if (write(pfd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	char c;
	REQUIRE(read(pfd[0], &c, 1) == 1);
	ckpt_store *s = t_open_store(dir, 0, 0);
	save1 *sv;
	CHECK_RC(save1_begin(s, 2, &sv), -CKPT_E_BUSY);
	CHECK(strstr(ckpt_errmsg(), "busy") != NULL);
	char pid_s[32];
	snprintf(pid_s, sizeof pid_s, "process %d ", (int)pid);
	CHECK(strstr(ckpt_errmsg(), pid_s) != NULL);
	/* Readers need no lock. */
	ckpt_info *list;
	CHECK(ckpt_store_list(s, 0, &list) == 0);
	ckpt_info_free(list);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* The lock dies with its holder. */
	CHECK_OK(save1_begin(s, 2, &sv));
	CHECK_OK(save1_commit(sv, NULL));
	/* A read-only handle never writes. */
	ckpt_store_close(s);
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_READ_ONLY, 1);
	CHECK_OK(ckpt_store_open(dir, o, &s));
	CHECK_RC(save1_begin(s, 3, &sv), -CKPT_E_PERM);
	ckpt_options_free(o);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	pack_damage(0, 0);
	pack_damage(1, 0);
	pack_damage(0, 1);
	manifest_damage();
	pack_missing_or_truncated();
	busy();
	return t_done();
}
