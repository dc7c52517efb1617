#include "helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

int t_failures;

int t_done(void)
{
	if (t_failures) {
		fprintf(stderr, "%d check(s) failed\n", t_failures);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}

char *t_tmpdir(const char *tag)
{
	const char *base = getenv("CKPT_TEST_DIR");
	char *p = malloc(4096);
	snprintf(p, 4096, "%s/ckpt-%s-XXXXXX", base ? base : "build/tests/tmp", tag);
	if (!base)
		mkdir("build/tests/tmp", 0755);
	if (!mkdtemp(p)) {
		perror(p);
		exit(1);
	}
	return p;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p);
}

void t_rmrf(const char *path)
{
	nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

ckpt_store *t_open_store(const char *path, uint32_t cs, int compress)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	if (cs)
		REQUIRE(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, cs) == 0);
	ckpt_options_set(o, CKPT_OPT_COMPRESS, compress);
	/* Small pools keep test start-up fast; backpressure tests set their own. */
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 32 << 20);
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(path, o, &s);
	ckpt_options_free(o);
	REQUIRE(rc == 0 && s);
	return s;
}

uint64_t t_rand(uint64_t *x)
{
	/* splitmix64 */
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void t_fill(void *buf, size_t n, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t st = seed;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = t_rand(&st);
		memcpy(p + i, &v, 8);
	}
	uint64_t v = t_rand(&st);
	memcpy(p + i, &v, n - i);
}

static uint64_t du_total;
static int du_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)p; (void)ftw;
	if (flag == FTW_F)
		du_total += (uint64_t)sb->st_size;
	return 0;
}

uint64_t t_dir_bytes(const char *dir)
{
	du_total = 0;
	nftw(dir, du_cb, 16, FTW_PHYS);
	return du_total;
}

void t_flip_byte(const char *file, uint64_t offset)
{
	int fd = open(file, O_RDWR);
	REQUIRE(fd >= 0);
	uint8_t b;
	REQUIRE(pread(fd, &b, 1, (off_t)offset) == 1);
	b ^= 0x01;
	REQUIRE(pwrite(fd, &b, 1, (off_t)offset) == 1);
	close(fd);
}

char *t_first_file(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	if (!d)
		return NULL;
	struct dirent *e;
	char *best = NULL;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name), m = strlen(suffix);
		if (e->d_name[0] == '.' || n < m || strcmp(e->d_name + n - m, suffix))
			continue;
		char *p = malloc(4096);
		snprintf(p, 4096, "%s/%s", dir, e->d_name);
		if (!best || strcmp(p, best) < 0) {
			free(best);
			best = p;
		} else {
			free(p);
		}
	}
	closedir(d);
	return best;
}
