/* Files planted in a store are never written through: a symbolic link (or a
 * hard link) as LOCK, symbolic links at the temporary names of the manifest, store header and
 * datadirs files, and a symlinked packs/ or manifests/. Before the fix the victim file was
 * truncated and overwritten. */
#include "helpers.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

static const char precious[] = "precious data nobody may overwrite\n";

static char *victim_in(const char *dir)
{
	char *p = malloc(8192), abs[4096];
	REQUIRE(realpath(dir, abs)); /* symbolic links resolve from their own directory */
	snprintf(p, 8192, "%s/victim", abs);
	FILE *f = fopen(p, "w");
	REQUIRE(f && fputs(precious, f) >= 0 && fclose(f) == 0);
	return p;
}

static int victim_intact(const char *p)
{
	char buf[256] = "";
	FILE *f = fopen(p, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	return !strcmp(buf, precious);
}

static int save_one(ckpt_store *s, uint64_t step)
{
	static uint8_t data[10000];
	uint64_t shape[1] = {sizeof data};
	t_fill(data, sizeof data, step);
	save1 *sv;
	int rc = save1_begin(s, step, &sv);
	if (rc)
		return rc;
	if ((rc = save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, data))) {
		save1_abort(sv);
		return rc;
	}
	return save1_commit(sv, NULL);
}

/* F3: LOCK as a symbolic link, then as a hard link, to the victim. */
static void lock_links(void)
{
	char *dir = t_tmpdir("sl"), *outside = t_tmpdir("slv");
	char *victim = victim_in(outside);
	ckpt_store *s = t_open_store(dir, 0, 0);
	char lock[4096];
	snprintf(lock, sizeof lock, "%s/LOCK", dir);
	unlink(lock);
	REQUIRE(symlink(victim, lock) == 0);
	CHECK_RC(save_one(s, 1), -CKPT_E_PERM);
	CHECK(strstr(ckpt_errmsg(), "LOCK") && strstr(ckpt_errmsg(), "symbolic link"));
	CHECK_RC(retain_gc(s, 0, 0, NULL), -CKPT_E_PERM);
	CHECK(victim_intact(victim));
	unlink(lock);
	if (link(victim, lock) == 0) { /* same file system; skipped where hard links are refused */
		CHECK_RC(save_one(s, 2), -CKPT_E_PERM);
		CHECK(strstr(ckpt_errmsg(), "one link"));
		CHECK(victim_intact(victim));
		unlink(lock);
	}
	CHECK_OK(save_one(s, 3)); /* with the link gone, a real LOCK is created */
	ckpt_store_close(s);
	t_rmrf(dir);
	t_rmrf(outside);
	free(dir);
	free(outside);
	free(victim);
}

/* F4: symbolic links planted at the temporary names this process would have used. */
static void planted_tmp_names(void)
{
	char *dir = t_tmpdir("st"), *outside = t_tmpdir("stv");
	char *victim = victim_in(outside);
	char p[4096];
	/* The store header's temporary file, planted before the store is created. */
	REQUIRE(mkdir(dir, 0755) == 0 || access(dir, F_OK) == 0);
	snprintf(p, sizeof p, "%s/.store.tmp.%d", dir, (int)getpid());
	REQUIRE(symlink(victim, p) == 0);
	ckpt_store *s = t_open_store(dir, 0, 0);
	CHECK(victim_intact(victim));
	snprintf(p, sizeof p, "%s/manifests/.%020d.ckpt.tmp.%d", dir, 1, (int)getpid());
	REQUIRE(symlink(victim, p) == 0);
	CHECK_OK(save_one(s, 1));
	CHECK(victim_intact(victim));
	ckpt_store_close(s);
	/* datadirs is written when a data directory is added. */
	snprintf(p, sizeof p, "%s/.datadirs.tmp.%d", dir, (int)getpid());
	REQUIRE(symlink(victim, p) == 0);
	char *data = t_tmpdir("std");
	ckpt_options *o = ckpt_options_create();
	REQUIRE(ckpt_options_add_data_dir(o, data) == 0);
	CHECK_OK(ckpt_store_open(dir, o, &s));
	ckpt_options_free(o);
	CHECK(victim_intact(victim));
	ckpt_store_close(s);
	t_rmrf(dir);
	t_rmrf(outside);
	t_rmrf(data);
	free(dir);
	free(outside);
	free(data);
	free(victim);
}

/* A symlinked packs/ or manifests/ is refused at open, naming it. */
static void symlinked_dirs(void)
{
	const char *sub[] = {"packs", "manifests"};
	for (int i = 0; i < 2; i++) {
		char *dir = t_tmpdir("sd"), *other = t_tmpdir("sdo");
		ckpt_store_close(t_open_store(dir, 0, 0));
		char p[4096], cmd[9000];
		snprintf(p, sizeof p, "%s/%s", dir, sub[i]);
		snprintf(cmd, sizeof cmd, "rmdir '%s'", p);
		REQUIRE(system(cmd) == 0);
		REQUIRE(symlink(other, p) == 0);
		ckpt_store *s = NULL;
		CHECK_RC(ckpt_store_open(dir, NULL, &s), -CKPT_E_PERM);
		CHECK(strstr(ckpt_errmsg(), sub[i]) && strstr(ckpt_errmsg(), "symbolic link"));
		ckpt_store_close(s);
		t_rmrf(dir);
		t_rmrf(other);
		free(dir);
		free(other);
	}
}

int main(void)
{
	lock_links();
	planted_tmp_names();
	symlinked_dirs();
	return t_done();
}
