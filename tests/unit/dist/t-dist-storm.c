/* The metadata storm: at every step of a multi-rank job, a rank must not reread every
 * manifest to refresh its dedup index. 4 ranks (threads, each with its own store handle kept
 * across steps, tests/unit/t-dist-tcomm.h) save 8 steps; the test build counts the manifests
 * read into dedup indexes (CKPT_TEST_HOOKS) and the part files read by commits: each rank reads
 * each new global manifest once (4 x 7, where rereading all would be 4 x 28) and only rank 0
 * reads parts (4 per step). Dedup still works across the steps (an unchanged rank writes
 * nothing new). Then a step that fails (a rank aborts) and a gc that removes its packs: the same
 * step saved again through the same handles must not reuse the chunks gc removed (every
 * checkpoint verifies and restores byte-exact). Last, a part forged to disagree with the global
 * chunk table (its record in the global manifest forged to match) fails verify of the parts.
 * Also run under TSan (make tsan). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dist/dist.h"
#include "format/format.h"
#include "helpers.h"
#include "io/io.h"
#include "t-dist-scen.h"
#include "t-dist-tcomm.h"
#include "t-mf-rewrite.h"

#define NR 4
#define STEPS 8

extern unsigned long ckpt_test_index_reads, ckpt_test_part_reads;

struct job {
	ckpt_store *s[NR];
	struct tc_shared sh;
	struct tc_rank r[NR];
	uint64_t step;
	int rc[NR];
	ckpt_stats st[NR];
};

struct arg {
	struct job *j;
	int k;
};

static void *rank_main(void *p)
{
	struct arg *a = p;
	ckpt_comm c = tc_comm(&a->j->r[a->k]);
	a->j->rc[a->k] = scen_save(a->j->s[a->k], &c, a->j->step, &a->j->st[a->k]);
	return NULL;
}

/* Every rank saves step; returns how many ranks' commits failed. */
static int save_step(struct job *j, uint64_t step)
{
	pthread_t th[NR];
	struct arg a[NR];
	j->step = step;
	for (int k = 0; k < NR; k++) {
		a[k] = (struct arg){j, k};
		REQUIRE(pthread_create(&th[k], NULL, rank_main, &a[k]) == 0);
	}
	int failed = 0;
	for (int k = 0; k < NR; k++) {
		pthread_join(th[k], NULL);
		failed += j->rc[k] != 0;
	}
	return failed;
}

static void check_all(ckpt_store *s, const uint64_t *steps, int n)
{
	for (int i = 0; i < n; i++) {
		reader1 *r;
		CHECK_OK(reader1_open(s, steps[i], &r));
		if (r)
			CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
		reader1_close(r);
		CHECK(scen_check_layout(s, steps[i], 2) == 0);
	}
}

static void flip_digest(struct manifest *m, void *arg)
{
	(void)arg;
	m->chunks[0].digest.b[0] ^= 0xff;
}

static void set_part_record(struct manifest *m, void *arg)
{
	for (uint32_t i = 0; i < m->n_meta; i++)
		if (!strcmp(m->meta[i].key, DIST_PART "1")) {
			m->meta[i].value = arg;
			m->meta[i].vlen = (uint32_t)strlen(arg);
		}
}

/* A part whose checksum its global manifest records but one of whose chunks the global chunk
 * table lacks (both files forged consistently): verify of the parts names rank 1. */
static void test_forged_part(ckpt_store *s, uint64_t step)
{
	char part[4096], mf[4096], name[64], rec[64];
	uint8_t t[16], unused[16];
	dist_part_path(s, step, 1, part, sizeof part);
	size_t n = t_mf_rewrite(part, flip_digest, NULL, t);
	int l = snprintf(rec, sizeof rec, "%zu ", n);
	for (int b = 0; b < 16; b++)
		l += snprintf(rec + l, sizeof rec - (size_t)l, "%02x", t[b]);
	store_mf_name(step, name, sizeof name);
	snprintf(mf, sizeof mf, "%s/%s", s->layout.mf_dir, name);
	t_mf_rewrite(mf, set_part_record, rec, unused);
	dreader *d;
	CHECK_OK(dreader_open(s, step, &d));
	CHECK(d && dreader_verify_parts(d, NULL, NULL) == 1);
	dreader_close(d);
}

/* A multi-rank save of step 200 that fails leaves parts/200; a single-process save of step 200
 * then commits a v1 manifest. Those parts belong to no checkpoint: gc removes them (and du does
 * not count them as live), and step 200 still verifies. */
static void test_single_after_failed(struct job *j, ckpt_store *g, const char *dir)
{
	scen_abort_rank = 2;
	CHECK(save_step(j, 200) == NR);
	scen_abort_rank = -1;
	char parts[4096];
	snprintf(parts, sizeof parts, "%s/parts/%020llu", dir, 200ULL);
	CHECK(access(parts, F_OK) == 0);
	static uint8_t data[3 * SCEN_CHUNK + 17];
	t_fill(data, sizeof data, 200);
	uint64_t shape[1] = {sizeof data};
	save1 *sv;
	CHECK_OK(save1_begin(g, 200, &sv));
	CHECK_OK(save1_add_tensor(sv, "single", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, data));
	CHECK_OK(save1_commit(sv, NULL));
	ckpt_du *du = NULL;
	CHECK_OK(ckpt_store_du(g, &du));
	uint64_t live_before = du ? du->parts : 0;
	ckpt_du_free(du);
	gc_report *rep = NULL;
	CHECK_OK(retain_gc(g, 0, 0, &rep));
	CHECK(rep && rep->parts_removed > 0);
	gc_report_free(rep);
	CHECK(access(parts, F_OK) != 0 && errno == ENOENT);
	CHECK_OK(ckpt_store_du(g, &du));
	CHECK(du && du->parts == live_before);
	ckpt_du_free(du);
	reader1 *r;
	CHECK_OK(reader1_open(g, 200, &r));
	if (r)
		CHECK(reader1_verify(r, NULL, NULL, NULL) == 0);
	reader1_close(r);
}

int main(void)
{
	char *dir = t_tmpdir("dist-storm");
	static struct job j;
	tc_init(&j.sh, j.r, NR);
	for (int k = 0; k < NR; k++)
		j.s[k] = t_open_store(dir, SCEN_CHUNK, 0);

	unsigned long r0 = ckpt_test_index_reads, p0 = ckpt_test_part_reads;
	uint64_t steps[STEPS + 1];
	for (int i = 0; i < STEPS; i++) {
		steps[i] = (uint64_t)i + 1;
		CHECK(save_step(&j, steps[i]) == 0);
		if (i > 0) /* rank 1's rows and emb are unchanged: the index knew them */
			CHECK(j.st[1].chunks_new == 0 && j.st[1].chunks > 0);
	}
	unsigned long reads = ckpt_test_index_reads - r0, parts = ckpt_test_part_reads - p0;
	printf("%d ranks x %d steps: %lu manifests read into dedup indexes (rereading every "
	       "manifest: %d), %lu part files read\n", NR, STEPS, reads, NR * STEPS * (STEPS - 1) / 2,
	       parts);
	CHECK(reads == NR * (STEPS - 1));
	CHECK(parts == NR * STEPS);

	/* A failed step leaves chunks that this job's ranks wrote but no manifest names. */
	scen_abort_rank = 2;
	CHECK(save_step(&j, 100) == NR);
	scen_abort_rank = -1;
	ckpt_store *g = t_open_store(dir, SCEN_CHUNK, 0);
	gc_report *rep = NULL;
	CHECK_OK(retain_gc(g, 0, 0, &rep));
	CHECK(rep && rep->packs_removed > 0 && rep->parts_removed > 0);
	gc_report_free(rep);
	CHECK(save_step(&j, 100) == 0); /* the same data again, through the same handles */
	steps[STEPS] = 100;
	check_all(g, steps, STEPS + 1);
	test_forged_part(g, 1);
	test_single_after_failed(&j, g, dir);
	ckpt_store_close(g);
	for (int k = 0; k < NR; k++)
		ckpt_store_close(j.s[k]);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
