/* Pack ids of multi-rank saves without a listing of the shared pack directory:
 * each rank probes its own id range (store_max_pack_id in part mode) instead of reading every
 * rank's packs at every save. Two ranks (threads, tests/unit/t-dist-world.h) save 3 MiB each per
 * step into 1 MiB packs:
 * - steps 1 to 3 on the same handles, then (the handles closed, steps 1 and 2 deleted and their
 *   packs collected) step 4 on new handles, which find ids below the live ones free, then step 5
 *   after a crashed save (or another job's same rank) left 40 packs above rank 1's last: no save
 *   opens the pack directory (opendir is counted here), every pack id lies in the range of its
 *   rank, the 40 foreign packs are untouched, and every live checkpoint restores its values (no
 *   pack was written over). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "store/store.h"
#include "t-dist-world.h"
#include "t-open-opts.h"

#define NR 2
#define PER (768u << 10) /* f32 elements per rank: 3 MiB */

static unsigned long pack_listings;

/* Every opendir of this process: those of a pack directory are counted. */
DIR *opendir(const char *name)
{
	size_t n = strlen(name), k = strlen("/" PACK_DIR);
	if (n >= k && !strcmp(name + n - k, "/" PACK_DIR))
		__atomic_add_fetch(&pack_listings, 1, __ATOMIC_RELAXED);
	int fd = open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (fd >= 0 && !d)
		close(fd);
	return d;
}

struct job {
	ckpt_store *s[NR];
	uint64_t step;
	float *w[NR];
};

static float val(uint64_t step, uint64_t i)
{
	return (float)(step * 10000019u + i);
}

static int rank_main(ckpt_comm *c, void *arg)
{
	struct job *j = arg;
	unsigned r = (unsigned)c->rank;
	uint64_t g = NR * PER, off = r * PER, len = PER;
	for (uint64_t i = 0; i < PER; i++)
		j->w[r][i] = val(j->step, off + i);
	dsave *d;
	int rc = dsave_begin(j->s[r], c, j->step, &d);
	if (rc)
		return rc;
	if ((rc = dsave_add_shard(d, "w", CKPT_DTYPE_F32, 1, &g, &off, &len, CKPT_MEM_HOST,
					   j->w[r]))) {
		dsave_abort(d);
		return rc;
	}
	return dsave_commit(d, NULL);
}

static ckpt_store *open_store(const char *dir)
{
	return t_open_opts(dir, (const int64_t[]){CKPT_OPT_PACK_SIZE, 1 << 20, CKPT_OPT_CHUNK_SIZE,
						  256 << 10, CKPT_OPT_POOL_SIZE, 4 << 20, 0});
}

static void save(struct job *j, uint64_t step)
{
	int rc[NR];
	j->step = step;
	unsigned long before = pack_listings;
	REQUIRE(tw_run(NR, rank_main, j, rc) == 0);
	for (int r = 0; r < NR; r++)
		CHECK_OK(rc[r]);
	CHECK(pack_listings == before);
	if (pack_listings != before)
		fprintf(stderr, "step %llu: %lu listings of the pack directory\n",
			(unsigned long long)step, pack_listings - before);
}

static void check_restore(ckpt_store *s, uint64_t step, float *buf)
{
	dreader *d = NULL;
	CHECK_OK(dreader_open(s, step, &d));
	REQUIRE(d);
	uint64_t off = 0, len = NR * PER;
	CHECK_OK(dreader_restore_box(d, 0, &off, &len, buf, len * sizeof *buf));
	uint64_t bad = 0;
	for (uint64_t i = 0; i < len; i++)
		bad += buf[i] != val(step, i);
	CHECK(bad == 0);
	dreader_close(d);
}

/* Every pack of the store has an id in a rank's range; returns rank 1's highest. */
static uint32_t check_ranges(const char *dir)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", dir, PACK_DIR);
	unsigned long before = pack_listings;
	DIR *d = opendir(p);
	REQUIRE(d);
	uint32_t top1 = DIST_PACK_LO(1);
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		unsigned long id;
		char tail[16];
		if (sscanf(e->d_name, "%lu%15s", &id, tail) != 2 || strcmp(tail, ".pack"))
			continue;
		n++;
		CHECK(id > DIST_PACK_LO(0) && id < DIST_PACK_LO(NR));
		if (id >= DIST_PACK_LO(1) && id > top1)
			top1 = (uint32_t)id;
	}
	closedir(d);
	pack_listings = before;
	CHECK(n >= 2 * NR);
	return top1;
}

static void foreign_path(const char *dir, uint32_t id, char *p, size_t len)
{
	snprintf(p, len, "%s/%s/%08u.pack", dir, PACK_DIR, id);
}

int main(void)
{
	static struct job j;
	char *dir = t_tmpdir("dist-packids");
	float *buf = malloc(NR * PER * sizeof *buf);
	REQUIRE(buf);
	for (int r = 0; r < NR; r++) {
		REQUIRE((j.w[r] = malloc(PER * sizeof *j.w[r])));
		j.s[r] = open_store(dir);
	}
	for (uint64_t step = 1; step <= 3; step++)
		save(&j, step);
	check_ranges(dir);
	for (int r = 0; r < NR; r++)
		ckpt_store_close(j.s[r]);

	/* Steps 1 and 2 go, and their packs: the lowest ids of each range are free again. */
	ckpt_store *s = open_store(dir);
	uint64_t gone[2] = {1, 2};
	CHECK_OK(retain_delete(s, gone, 2, NULL, 0, NULL));
	CHECK_OK(retain_gc(s, 0, 0, NULL));
	ckpt_store_close(s);
	for (int r = 0; r < NR; r++)
		j.s[r] = open_store(dir);
	save(&j, 4);
	uint32_t top1 = check_ranges(dir);

	/* 40 packs above rank 1's last, as a crashed save or another job's rank 1 leaves them. */
	char p[4096];
	for (uint32_t k = 1; k <= 40; k++) {
		foreign_path(dir, top1 + k, p, sizeof p);
		int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
		REQUIRE(fd >= 0 && write(fd, "foreign", 7) == 7);
		close(fd);
	}
	save(&j, 5);
	check_ranges(dir);
	for (uint32_t k = 1; k <= 40; k++) {
		char got[16] = {0};
		foreign_path(dir, top1 + k, p, sizeof p);
		int fd = open(p, O_RDONLY);
		REQUIRE(fd >= 0);
		CHECK(read(fd, got, sizeof got) == 7 && !memcmp(got, "foreign", 7));
		close(fd);
	}
	for (uint64_t step = 3; step <= 5; step++)
		check_restore(j.s[0], step, buf);
	for (int r = 0; r < NR; r++) {
		ckpt_store_close(j.s[r]);
		free(j.w[r]);
	}
	free(buf);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
