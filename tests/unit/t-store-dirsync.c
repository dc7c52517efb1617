/* Directories the store creates are made durable: the new store directory's entry in
 * its parent, and a new data directory's in its parent and DATA/packs in DATA. The test defines
 * fsync() itself (the static library's calls resolve to it) to record which directories were
 * fsynced; nothing depends on timing. */
#include "helpers.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char synced[64][PATH_MAX];
static int nsynced;

int fsync(int fd)
{
	struct stat st;
	char link[64];
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && nsynced < 64) {
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
		ssize_t n = readlink(link, synced[nsynced], PATH_MAX - 1);
		if (n > 0)
			synced[nsynced++][n] = 0;
	}
	return (int)syscall(SYS_fsync, fd);
}

static int was_synced(const char *dir)
{
	char abs[PATH_MAX];
	if (!realpath(dir, abs))
		return 0;
	for (int i = 0; i < nsynced; i++)
		if (!strcmp(synced[i], abs))
			return 1;
	fprintf(stderr, "directory %s was not fsynced\n", abs);
	return 0;
}

int main(void)
{
	char *root = t_tmpdir("dsync");
	char store[4096], data[4096], p[4096];
	snprintf(store, sizeof store, "%s/store", root);
	snprintf(data, sizeof data, "%s/dd/data", root);
	snprintf(p, sizeof p, "%s/dd", root);
	REQUIRE(mkdir(p, 0755) == 0);
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	REQUIRE(ckpt_options_add_data_dir(o, data) == 0);
	ckpt_store *s;
	nsynced = 0;
	CHECK_OK(ckpt_store_open(store, o, &s));
	ckpt_options_free(o);
	ckpt_store_close(s);
	CHECK(was_synced(root));  /* holds the new store/ */
	CHECK(was_synced(store)); /* holds packs/, manifests/, store */
	CHECK(was_synced(p));     /* holds the new data/ */
	CHECK(was_synced(data));  /* holds the new data/packs/ */
	t_rmrf(root);
	free(root);
	return t_done();
}
