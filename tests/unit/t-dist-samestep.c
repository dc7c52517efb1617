/* Two multi-rank jobs on one store, neither damaging what the other saves. Ranks are
 * threads, each with its own store handle; the main thread orders the jobs' phases (begin, then
 * commit) with gates, so every interleaving below is exact, not timing.
 * - Same step: while job A saves step 1, job B's begin fails BUSY on every rank naming A's
 *   holder, before B writes anything; after A commits, a job of another size gets EXISTS; A's
 *   checkpoint is A's data and its parts verify.
 * - A global manifest that appears between begin and commit (a commit this node's lock did not
 *   see) is never replaced: the commit fails EXISTS and the file is byte-identical.
 * - Different steps at once: ranks of the same number in both jobs allocate from one pack id
 *   range; both commit (a taken id moves on, no "create pack: File exists").
 * - A killed 4-rank save re-saved by 2 ranks leaves only the new parts; gc removes a stray part
 *   and a temporary file in a committed step's directory and keeps its world's parts.
 * - Ranks that disagree on the step or the chunk size fail at begin, before any part exists. */
#include "helpers.h"

#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "t-dist-tcomm.h"

#define MAXR 4
#define ROWS 50000 /* elements of each rank's shard of "w" (f32): 3 chunks */
#define CHUNK 65536

struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int count;
};

static void gate_add(struct gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->count++;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

static void gate_wait(struct gate *g, int n)
{
	pthread_mutex_lock(&g->mu);
	while (g->count < n)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

struct job {
	const char *dir;
	int n, abort1; /* 1 + the rank that aborts instead of committing, or 0 */
	uint64_t step[MAXR];
	uint32_t chunk[MAXR];
	float tag;
	ckpt_store *s[MAXR];
	struct tc_shared sh;
	struct tc_rank r[MAXR];
	pthread_t th[MAXR];
	struct gate begun, go;
	int brc[MAXR], rc[MAXR];
	char msg[MAXR][1024];
};

struct arg {
	struct job *j;
	int k;
};

static float val(float tag, uint64_t i)
{
	return tag * 1e6f + (float)i;
}

static void *rank_main(void *p)
{
	struct arg *a = p;
	struct job *j = a->j;
	int k = a->k;
	ckpt_comm c = tc_comm(&j->r[k]);
	dsave *d = NULL;
	j->brc[k] = j->rc[k] = dsave_begin(j->s[k], &c, j->step[k], &d);
	if (j->brc[k])
		snprintf(j->msg[k], sizeof j->msg[k], "%s", ckpt_errmsg());
	gate_add(&j->begun);
	if (j->brc[k]) {
		free(a);
		return NULL;
	}
	gate_wait(&j->go, 1);
	float *w = malloc(ROWS * sizeof *w);
	REQUIRE(w);
	for (uint64_t i = 0; i < ROWS; i++)
		w[i] = val(j->tag, (uint64_t)k * ROWS + i);
	uint64_t g = (uint64_t)j->n * ROWS, off = (uint64_t)k * ROWS, l = ROWS;
	int rc = dsave_add_shard(d, "w", CKPT_DTYPE_F32, 1, &g, &off, &l, CKPT_MEM_HOST, w);
	if (rc || k + 1 == j->abort1)
		dsave_abort(d);
	else
		rc = dsave_commit(d, NULL);
	j->rc[k] = rc ? rc : k + 1 == j->abort1 ? -CKPT_E_STATE : 0;
	if (j->rc[k])
		snprintf(j->msg[k], sizeof j->msg[k], "%s", ckpt_errmsg());
	free(w);
	free(a);
	return NULL;
}

/* Starts job j's n ranks (every rank saving step with chunk size CHUNK unless set) and waits
 * until each has returned from begin. */
static void job_begin(struct job *j, const char *dir, int n, uint64_t step, float tag)
{
	j->dir = dir;
	j->n = n;
	j->tag = tag;
	pthread_mutex_init(&j->begun.mu, NULL);
	pthread_cond_init(&j->begun.cv, NULL);
	pthread_mutex_init(&j->go.mu, NULL);
	pthread_cond_init(&j->go.cv, NULL);
	tc_init(&j->sh, j->r, (unsigned)n);
	for (int k = 0; k < n; k++) {
		if (!j->step[k])
			j->step[k] = step;
		j->s[k] = t_open_store(dir, j->chunk[k] ? j->chunk[k] : CHUNK, 0);
		REQUIRE(j->s[k]);
		struct arg *a = malloc(sizeof *a);
		REQUIRE(a);
		*a = (struct arg){j, k};
		REQUIRE(pthread_create(&j->th[k], NULL, rank_main, a) == 0);
	}
	gate_wait(&j->begun, n);
}

/* Lets job j's ranks commit and waits for them; returns how many failed. */
static int job_end(struct job *j)
{
	gate_add(&j->go);
	int failed = 0;
	for (int k = 0; k < j->n; k++) {
		pthread_join(j->th[k], NULL);
		ckpt_store_close(j->s[k]);
		failed += j->rc[k] != 0;
	}
	return failed;
}

static int begin_failures(const struct job *j, int want_rc, const char *want_text)
{
	int n = 0;
	for (int k = 0; k < j->n; k++) {
		bool ok = j->brc[k] == want_rc && strstr(j->msg[k], want_text);
		if (!ok)
			fprintf(stderr, "rank %d: begin rc %d, want %d with \"%s\": %s\n", k, j->brc[k],
				want_rc, want_text, j->msg[k]);
		n += ok;
	}
	return n;
}

/* Checkpoint step holds job tag's data of n ranks, and its parts verify. */
static void check_ckpt(const char *dir, uint64_t step, int n, float tag)
{
	ckpt_store *s = t_open_store(dir, CHUNK, 0);
	dreader *r = NULL;
	REQUIRE(s);
	CHECK_OK(dreader_open(s, step, &r));
	if (!r) {
		ckpt_store_close(s);
		return;
	}
	uint64_t len = (uint64_t)n * ROWS, off = 0, bad = 0;
	float *w = malloc(len * sizeof *w);
	REQUIRE(w);
	CHECK(dreader_world_size(r) == (unsigned)n);
	CHECK_OK(dreader_restore_box(r, 0, &off, &len, w, len * sizeof *w));
	for (uint64_t i = 0; i < len; i++)
		bad += w[i] != val(tag, i);
	CHECK(bad == 0);
	CHECK(dreader_verify_parts(r, NULL, NULL) == 0);
	free(w);
	dreader_close(r);
	ckpt_store_close(s);
}

/* The names in parts/<step>, sorted and joined by blanks ("" when the directory is missing). */
static void part_names(const char *dir, uint64_t step, char *out, size_t len)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/parts/%020" PRIu64, dir, step);
	struct dirent **v;
	int n = scandir(p, &v, NULL, alphasort);
	out[0] = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, ".."))
			snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? " " : "",
				 v[i]->d_name);
		free(v[i]);
	}
	if (n >= 0)
		free(v);
}

static void check_parts(const char *dir, uint64_t step, const char *want)
{
	char got[1024];
	part_names(dir, step, got, sizeof got);
	if (strcmp(got, want))
		fprintf(stderr, "parts/%" PRIu64 ": \"%s\", want \"%s\"\n", step, got, want);
	CHECK(!strcmp(got, want));
}

static void same_step(const char *dir)
{
	struct job a = {0}, b = {0}, c = {0};
	job_begin(&a, dir, 2, 1, 1);
	job_begin(&b, dir, 2, 1, 2); /* while A holds step 1 */
	CHECK(begin_failures(&b, -CKPT_E_BUSY, "being saved by another job (a save of 2 ranks, "
			     "rank 0 pid") == 2);
	CHECK(job_end(&b) == 2);
	CHECK(job_end(&a) == 0);
	job_begin(&c, dir, 3, 1, 3);
	CHECK(begin_failures(&c, -CKPT_E_EXISTS, "checkpoint 1 already exists") == 3);
	CHECK(job_end(&c) == 3);
	check_ckpt(dir, 1, 2, 1);
	check_parts(dir, 1, "0.part 1.part"); /* the claim went with the commit */
}

/* Copies manifests/<from> to manifests/<to>. */
static void copy_manifest(const char *dir, uint64_t from, uint64_t to, char *dst, size_t len)
{
	char src[4096];
	snprintf(src, sizeof src, "%s/manifests/%020" PRIu64 ".ckpt", dir, from);
	snprintf(dst, len, "%s/manifests/%020" PRIu64 ".ckpt", dir, to);
	FILE *f = fopen(src, "rb"), *g = fopen(dst, "wbx");
	REQUIRE(f && g);
	int ch;
	while ((ch = fgetc(f)) != EOF)
		fputc(ch, g);
	REQUIRE(fclose(f) == 0 && fclose(g) == 0);
}

static long slurp(const char *p, char *buf, size_t len)
{
	FILE *f = fopen(p, "rb");
	long n = f ? (long)fread(buf, 1, len, f) : -1;
	if (f)
		fclose(f);
	return n;
}

static bool same_file(const char *a, const char *b)
{
	static char x[1 << 20], y[1 << 20];
	long nx = slurp(a, x, sizeof x), ny = slurp(b, y, sizeof y);
	return nx > 0 && nx == ny && !memcmp(x, y, (size_t)nx);
}

static void manifest_appears(const char *dir)
{
	struct job a = {0};
	job_begin(&a, dir, 2, 7, 7);
	char dst[4096], src[4096];
	copy_manifest(dir, 1, 7, dst, sizeof dst);
	snprintf(src, sizeof src, "%s/manifests/%020d.ckpt", dir, 1);
	CHECK(job_end(&a) == 2);
	for (int k = 0; k < 2; k++)
		CHECK(a.rc[k] == -CKPT_E_EXISTS && strstr(a.msg[k], "another job committed it"));
	CHECK(same_file(src, dst));
	unlink(dst);
}

static void different_steps(const char *dir)
{
	struct job e = {0}, f = {0};
	job_begin(&e, dir, 2, 20, 20);
	job_begin(&f, dir, 2, 21, 21);
	CHECK(job_end(&e) == 0);
	CHECK(job_end(&f) == 0);
	for (int k = 0; k < 2; k++)
		if (f.rc[k])
			fprintf(stderr, "job F rank %d: %s\n", k, f.msg[k]);
	check_ckpt(dir, 20, 2, 20);
	check_ckpt(dir, 21, 2, 21);
}

static void touch(const char *dir, uint64_t step, const char *name)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/parts/%020" PRIu64 "/%s", dir, step, name);
	FILE *f = fopen(p, "w");
	REQUIRE(f && fputs("stray\n", f) >= 0 && fclose(f) == 0);
}

static void resave_fewer(const char *dir)
{
	struct job dead = {.abort1 = 1}, again = {0};
	job_begin(&dead, dir, 4, 9, 8);
	CHECK(job_end(&dead) == 4);
	check_parts(dir, 9, "1.part 2.part 3.part CLAIM"); /* ranks 1-3 made their parts durable */
	job_begin(&again, dir, 2, 9, 9);
	CHECK(job_end(&again) == 0);
	check_parts(dir, 9, "0.part 1.part");
	check_ckpt(dir, 9, 2, 9);
	/* A rank of a dead save still running could still add one; and a temporary file. */
	touch(dir, 9, "3.part");
	touch(dir, 9, ".1.part.tmp");
	ckpt_store *s = t_open_store(dir, CHUNK, 0);
	ckpt_du *du = NULL;
	REQUIRE(s && ckpt_store_du(s, &du) == 0);
	CHECK(du->parts == 2 * 4); /* steps 1, 9, 20, 21: their world's parts only */
	ckpt_du_free(du);
	gc_report *rep = NULL;
	CHECK_OK(retain_gc(s, 0, 0, &rep));
	/* The two strays, and the parts of step 7 whose commit failed. */
	CHECK(rep && rep->parts_removed == 2 + 2);
	if (rep && rep->parts_removed != 4)
		fprintf(stderr, "gc removed %" PRIu64 " part files\n", rep->parts_removed);
	gc_report_free(rep);
	ckpt_store_close(s);
	check_parts(dir, 9, "0.part 1.part");
	check_parts(dir, 7, "");
	check_ckpt(dir, 9, 2, 9);
}

static void disagree(const char *dir)
{
	struct job a = {.step = {30, 31}}, b = {.chunk = {CHUNK, 2 * CHUNK}};
	job_begin(&a, dir, 2, 30, 30);
	CHECK(begin_failures(&a, -CKPT_E_INVAL, "rank 1 begins step 31 of 2 ranks, rank 0 step 30")
	      == 2);
	CHECK(job_end(&a) == 2);
	check_parts(dir, 30, "CLAIM");
	job_begin(&b, dir, 2, 32, 32);
	CHECK(begin_failures(&b, -CKPT_E_INVAL, "rank 1's store handle has chunk size 131072") == 2);
	CHECK(job_end(&b) == 2);
	check_parts(dir, 32, "CLAIM");
}

int main(void)
{
	char *dir = t_tmpdir("samestep");
	ckpt_store *s = t_open_store(dir, CHUNK, 0);
	REQUIRE(s);
	ckpt_store_close(s);
	same_step(dir);
	manifest_appears(dir);
	different_steps(dir);
	resave_fewer(dir);
	disagree(dir);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
