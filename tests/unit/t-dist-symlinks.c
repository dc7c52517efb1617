/* A symlinked STORE/parts, or a symlinked STORE/parts/<step>, is never followed:
 * gc does not remove, and du does not count, files outside the store through it, and a multi-rank
 * save refuses to write its part there. Before the fix gc deleted the decoy and saves wrote part
 * files outside the store. Ranks are threads, each with its own store handle. */
#include "helpers.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "t-dist-scen.h"
#include "t-dist-tcomm.h"

#define NR 2

struct job {
	ckpt_store *s[NR];
	struct tc_shared sh;
	struct tc_rank r[NR];
	uint64_t step;
	int rc[NR];
};

struct arg {
	struct job *j;
	int k;
};

static void *rank_main(void *p)
{
	struct arg *a = p;
	ckpt_comm c = tc_comm(&a->j->r[a->k]);
	a->j->rc[a->k] = scen_save(a->j->s[a->k], &c, a->j->step, NULL);
	return NULL;
}

/* Every rank saves step on its own handle of dir; returns how many ranks failed. */
static int save_step(const char *dir, uint64_t step)
{
	struct job j = {.step = step};
	tc_init(&j.sh, j.r, NR);
	for (int k = 0; k < NR; k++)
		j.s[k] = t_open_store(dir, SCEN_CHUNK, 0);
	pthread_t th[NR];
	struct arg a[NR];
	for (int k = 0; k < NR; k++) {
		a[k] = (struct arg){&j, k};
		REQUIRE(pthread_create(&th[k], NULL, rank_main, &a[k]) == 0);
	}
	int failed = 0;
	for (int k = 0; k < NR; k++) {
		pthread_join(th[k], NULL);
		failed += j.rc[k] != 0;
	}
	for (int k = 0; k < NR; k++)
		ckpt_store_close(j.s[k]);
	return failed;
}

static void step_dir(const char *top, uint64_t step, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%020llu", top, (unsigned long long)step);
}

/* A decoy top/<step>/0.part; returns its path (malloc'd). */
static char *decoy(const char *top, uint64_t step)
{
	char d[PATH_MAX + 32], *p = malloc(8192);
	step_dir(top, step, d, sizeof d);
	REQUIRE(mkdir(d, 0755) == 0);
	snprintf(p, 8192, "%s/0.part", d);
	FILE *f = fopen(p, "w");
	REQUIRE(f && fputs("decoy\n", f) >= 0 && fclose(f) == 0);
	return p;
}

/* gc and du through the store leave outside alone: its decoys stay and du counts no part. */
static void gc_du_leave_alone(const char *dir)
{
	ckpt_store *s = t_open_store(dir, SCEN_CHUNK, 0);
	(void)retain_gc(s, 0, 0, NULL); /* may fail on the missing parts; must not delete */
	ckpt_du *du = NULL;
	if (ckpt_store_du(s, &du) == 0)
		CHECK(du->parts == 0 && du->part_bytes == 0);
	ckpt_du_free(du);
	ckpt_store_close(s);
}

/* (a) STORE/parts is a symbolic link to outside/. */
static void symlinked_parts(void)
{
	char *dir = t_tmpdir("dp"), *outside = t_tmpdir("dpo"), abs[PATH_MAX], top[4096];
	REQUIRE(realpath(outside, abs));
	CHECK(save_step(dir, 1) == 0);
	char *live = decoy(abs, 1), *left = decoy(abs, 5); /* step 5 has no manifest: a leftover */
	snprintf(top, sizeof top, "%s/parts", dir);
	t_rmrf(top);
	REQUIRE(symlink(abs, top) == 0);
	gc_du_leave_alone(dir);
	CHECK(access(live, F_OK) == 0 && access(left, F_OK) == 0);
	CHECK(save_step(dir, 2) == NR);
	char d[PATH_MAX + 32];
	step_dir(abs, 2, d, sizeof d);
	CHECK(access(d, F_OK) != 0); /* nothing created outside */
	t_rmrf(dir);
	t_rmrf(outside);
	free(dir);
	free(outside);
	free(live);
	free(left);
}

/* (b) STORE/parts/<step> is a symbolic link to outside/<step>. */
static void symlinked_step(void)
{
	char *dir = t_tmpdir("ds"), *outside = t_tmpdir("dso"), abs[PATH_MAX], top[4096], p[4200];
	REQUIRE(realpath(outside, abs));
	CHECK(save_step(dir, 1) == 0);
	snprintf(top, sizeof top, "%s/parts", dir);
	char *live = decoy(abs, 1), *left = decoy(abs, 5), *next = decoy(abs, 3), o[PATH_MAX + 32];
	const uint64_t steps[] = {1, 5, 3};
	for (int i = 0; i < 3; i++) {
		step_dir(top, steps[i], p, sizeof p);
		t_rmrf(p);
		step_dir(abs, steps[i], o, sizeof o);
		REQUIRE(symlink(o, p) == 0);
	}
	gc_du_leave_alone(dir);
	CHECK(access(live, F_OK) == 0 && access(left, F_OK) == 0);
	CHECK(save_step(dir, 3) == NR);
	char part[PATH_MAX + 64];
	snprintf(part, sizeof part, "%s/1.part", o);
	CHECK(access(part, F_OK) != 0); /* rank 1's part was not written outside */
	FILE *f = fopen(next, "r");
	char buf[16] = "";
	CHECK(f && fgets(buf, sizeof buf, f) && !strcmp(buf, "decoy\n"));
	if (f)
		fclose(f);
	t_rmrf(dir);
	t_rmrf(outside);
	free(dir);
	free(outside);
	free(live);
	free(left);
	free(next);
}

int main(void)
{
	(void)scen_check_layout; /* the shared scenario's checks are not needed here */
	symlinked_parts();
	symlinked_step();
	return t_done();
}
