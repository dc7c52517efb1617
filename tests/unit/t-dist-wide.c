/* A commit of 64 ranks (threads, tests/unit/t-dist-world.h) with tiny shards:
 * "w" F32 [256, 3] split by rows, "g" I16 [16, 24] as an 8 x 8 grid of boxes and "z" U8 [64]
 * where rank 63's box is empty, inside rank 62's two elements (the merge's pairwise test took
 * that for an overlap; the shared sweep of dist_find_overlap, as the readers, does not).
 * - The commit works and restores whole; rank 0 reads the parts at once: the first 8 part reads
 *   meet before any goes on (ckpt_test_part_hook), which a reading one after another never does.
 * - Rank 37's rows moved by one onto rank 38's, rank 45's grid box by one column onto rank 46's,
 *   rank 20 one row short: every rank's commit fails naming the tensor, and the two ranks of an
 *   overlap.
 * - The parts of ranks 37 and 50 damaged after their ranks reported them durable (one byte
 *   flipped, one appended) at the commit's gather: every rank's commit fails naming rank 37,
 *   never 50 (the lowest rank's error, as a reading in rank order gives, whatever the threads).
 * - The next step commits. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define TC_MAXR 64
#include "t-dist-world.h"
#include "t-open-opts.h"

#define NR 64
#define RV 8 /* part reads that must be in flight together */

extern void (*ckpt_test_part_hook)(unsigned rank);

enum fault { NONE, ROWS, GRID, SHORT, DAMAGE };

struct job {
	const char *dir;
	ckpt_store *s[NR];
	uint64_t step;
	enum fault f;
	int rc[NR];
	char msg[NR][1024];
};

static float wval(uint64_t step, unsigned i) { return (float)(step * 100000 + i); }
static int16_t gval(uint64_t step, unsigned i) { return (int16_t)(step * 1000 + i); }

static int rv_in;
static bool rv_serial;
static pthread_mutex_t rv_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rv_cv = PTHREAD_COND_INITIALIZER;

/* The first RV part reads wait for each other; the time limit only ends a reading one after
 * another (the test then fails), it decides nothing when the reads run at once. */
static void rendezvous(unsigned rank)
{
	(void)rank;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 60;
	pthread_mutex_lock(&rv_mu);
	if (++rv_in == RV)
		pthread_cond_broadcast(&rv_cv);
	while (rv_in < RV && !rv_serial)
		if (pthread_cond_timedwait(&rv_cv, &rv_mu, &until) == ETIMEDOUT)
			rv_serial = true;
	pthread_mutex_unlock(&rv_mu);
}

/* The job of the ranks' damaging communicator (one job at a time). */
static struct job *g_job;

/* At the commit's gather (each part durable, its size and checksum taken): ranks 37 and 50
 * damage their part, 37 in its middle, 50 by one byte more; no part exists at begin's gather. */
static int damaging_allgather(void *ctx, const void *in, size_t len, void *out)
{
	struct tc_rank *r = ctx;
	char p[4096];
	struct stat st;
	snprintf(p, sizeof p, "%s/parts/%020llu/%d.part", g_job->dir,
		 (unsigned long long)g_job->step, r->rank);
	if ((r->rank == 37 || r->rank == 50) && stat(p, &st) == 0) {
		if (r->rank == 37) {
			t_flip_byte(p, (uint64_t)st.st_size / 2);
		} else {
			int fd = open(p, O_WRONLY | O_APPEND);
			REQUIRE(fd >= 0 && write(fd, "x", 1) == 1);
			close(fd);
		}
	}
	return tc_allgather(ctx, in, len, out);
}

static int add(dsave *d, const struct job *j, unsigned r, float *w, int16_t *g,
	       uint8_t *z)
{
	uint64_t wg[2] = {4 * NR, 3}, wo[2] = {4 * r, 0}, wl[2] = {4, 3};
	uint64_t gg[2] = {16, 24}, go[2] = {r / 8 * 2, r % 8 * 3}, gl[2] = {2, 3};
	uint64_t zg = NR, zo = r, zl = 1;
	if (j->f == ROWS && r == 37)
		wo[0]++;
	if (j->f == SHORT && r == 20)
		wl[0] = 3;
	if (j->f == GRID && r == 45)
		go[1]++;
	if (r == 62)
		zl = 2;
	if (r == 63)
		zo = 63, zl = 0;
	for (unsigned i = 0; i < 12; i++)
		w[i] = wval(j->step, (4 * r + i / 3) * 3 + i % 3);
	for (unsigned i = 0; i < 6; i++)
		g[i] = gval(j->step, (go[0] + i / 3) * 24 + go[1] + i % 3);
	z[0] = z[1] = (uint8_t)(j->step + zo);
	z[1]++;
	int rc = dsave_add_shard(d, "w", CKPT_DTYPE_F32, 2, wg, wo, wl, CKPT_MEM_HOST, w);
	if (!rc)
		rc = dsave_add_shard(d, "g", CKPT_DTYPE_I16, 2, gg, go, gl, CKPT_MEM_HOST, g);
	if (!rc)
		rc = dsave_add_shard(d, "z", CKPT_DTYPE_U8, 1, &zg, &zo, &zl, CKPT_MEM_HOST,
					      z);
	return rc;
}

static int rank_main(ckpt_comm *c, void *arg)
{
	struct job *j = arg;
	unsigned r = (unsigned)c->rank;
	ckpt_comm mine = *c;
	if (j->f == DAMAGE)
		mine.allgather = damaging_allgather;
	float w[12];
	int16_t g[6];
	uint8_t z[2];
	dsave *d;
	int rc = dsave_begin(j->s[r], &mine, j->step, &d);
	if (!rc && (rc = add(d, j, r, w, g, z)))
		dsave_abort(d);
	else if (!rc)
		rc = dsave_commit(d, NULL);
	if (rc)
		snprintf(j->msg[r], sizeof j->msg[r], "%s", ckpt_errmsg());
	return rc;
}

static void run(struct job *j, uint64_t step, enum fault f)
{
	j->step = step;
	j->f = f;
	g_job = j;
	REQUIRE(tw_run(NR, rank_main, j, j->rc) == 0);
}

/* Every rank failed, and its message names each of want and none of unwanted (or NULL). */
static void all_failed(const struct job *j, const char *const *want, const char *unwanted)
{
	for (unsigned r = 0; r < NR; r++) {
		bool named = j->rc[r] != 0;
		for (const char *const *w = want; *w && named; w++)
			named = strstr(j->msg[r], *w) != NULL;
		if (unwanted && named)
			named = !strstr(j->msg[r], unwanted);
		if (!named)
			fprintf(stderr, "step %llu, rank %u: rc %d: %s\n",
				(unsigned long long)j->step, r, j->rc[r], j->msg[r]);
		CHECK(named);
	}
}

static void check_restore(ckpt_store *s, uint64_t step)
{
	dreader *d = NULL;
	CHECK_OK(dreader_open(s, step, &d));
	REQUIRE(d);
	CHECK(dreader_world_size(d) == NR);
	static float w[4 * NR * 3];
	int16_t g[16 * 24];
	uint8_t z[NR];
	uint64_t o[2] = {0, 0}, wl[2] = {4 * NR, 3}, gl[2] = {16, 24}, zl = NR;
	long wi = dreader_find(d, "w"), gi = dreader_find(d, "g");
	long zi = dreader_find(d, "z");
	REQUIRE(wi >= 0 && gi >= 0 && zi >= 0);
	CHECK(dreader_shard_count(d, (size_t)wi) == NR);
	CHECK_OK(dreader_restore_box(d, (size_t)wi, o, wl, w, sizeof w));
	CHECK_OK(dreader_restore_box(d, (size_t)gi, o, gl, g, sizeof g));
	CHECK_OK(dreader_restore_box(d, (size_t)zi, o, &zl, z, sizeof z));
	for (unsigned i = 0; i < 4 * NR * 3; i++)
		CHECK(w[i] == wval(step, i));
	for (unsigned i = 0; i < 16 * 24; i++)
		CHECK(g[i] == gval(step, i));
	for (unsigned i = 0; i < NR; i++)
		CHECK(z[i] == (uint8_t)(step + i));
	dreader_close(d);
}

static ckpt_store *open_small(const char *dir)
{
	/* 64 handles: one thread and the smallest pool each. */
	return t_open_opts(dir, (const int64_t[]){CKPT_OPT_THREADS, 1, CKPT_OPT_IO_SIZE, 64 << 10,
						  CKPT_OPT_POOL_SIZE, 1 << 20, 0});
}

int main(void)
{
	static struct job j;
	char *dir = t_tmpdir("dist-wide");
	j.dir = dir;
	for (unsigned r = 0; r < NR; r++)
		j.s[r] = open_small(dir);
	ckpt_test_part_hook = rendezvous;
	run(&j, 1, NONE);
	ckpt_test_part_hook = NULL;
	for (unsigned r = 0; r < NR; r++)
		CHECK_OK(j.rc[r]);
	CHECK(!rv_serial);
	check_restore(j.s[0], 1);

	run(&j, 2, ROWS);
	all_failed(&j, (const char *[]){"tensor w", "ranks 37 and 38", "overlap", NULL}, NULL);
	run(&j, 3, GRID);
	all_failed(&j, (const char *[]){"tensor g", "ranks 45 and 46", "overlap", NULL}, NULL);
	run(&j, 4, SHORT);
	all_failed(&j, (const char *[]){"tensor w", "do not cover", NULL}, NULL);
	run(&j, 5, DAMAGE);
	all_failed(&j, (const char *[]){"rank 37", NULL}, "rank 50");

	run(&j, 6, NONE);
	for (unsigned r = 0; r < NR; r++)
		CHECK_OK(j.rc[r]);
	check_restore(j.s[0], 6);
	for (unsigned r = 0; r < NR; r++)
		ckpt_store_close(j.s[r]);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
