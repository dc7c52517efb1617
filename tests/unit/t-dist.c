/* Multi-rank checkpoints without MPI: each rank is a forked process, the communicator is pipes
 * to rank 0 (a dead rank is an EOF, so no rank waits forever). Saves with 4 and 2 ranks
 * (sharded and replicated tensors, an incremental step), restores every save as 1, 2, 3 and 4
 * ranks by rows and by columns (byte-exact, contiguous and strided), then SIGKILLs one rank at
 * every kill point of a save (CKPT_DIST_KILL_AT) and at 40 arbitrary points, and checks that no
 * partial checkpoint is visible, earlier ones are intact, the store accepts the next save, a
 * rank that aborts fails every commit naming it, ranks share the lock that gc and
 * single-process saves are refused, and gc removes the leftovers (parts and per-rank packs). */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "t-dist-scen.h"

#define MAXW 8

/* Pipes: up[r] rank r -> rank 0, down[r] rank 0 -> rank r. Every message from rank 0 starts
 * with a status word: 0, or 1 + the rank that failed. */
struct pcomm {
	int rank, size;
	int up[MAXW][2], down[MAXW][2];
	int broken; /* 1 + the failed rank */
	char msg[256];
};

static int full_io(int fd, void *buf, size_t len, int wr)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = wr ? write(fd, p, len) : read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int fail_rank(struct pcomm *c, int r)
{
	if (!c->broken)
		c->broken = r + 1;
	snprintf(c->msg, sizeof c->msg, "rank %d is gone (pipe closed)", c->broken - 1);
	return -CKPT_E_IO;
}

/* Rank 0 sends status + len bytes to every other rank. */
static int root_send(struct pcomm *c, const void *buf, size_t len)
{
	int32_t st = c->broken;
	for (int r = 1; r < c->size; r++)
		if (full_io(c->down[r][1], &st, 4, 1) == 0 && !st)
			full_io(c->down[r][1], (void *)buf, len, 1);
	return st ? -CKPT_E_IO : 0;
}

static int leaf_recv(struct pcomm *c, void *buf, size_t len)
{
	int32_t st;
	if (full_io(c->down[c->rank][0], &st, 4, 0))
		return fail_rank(c, 0);
	if (st)
		return fail_rank(c, st - 1);
	return full_io(c->down[c->rank][0], buf, len, 0) ? fail_rank(c, 0) : 0;
}

static int p_allgather(void *ctx, const void *in, size_t len, void *out)
{
	struct pcomm *c = ctx;
	if (c->rank != 0) {
		/* A failed write may mean rank 0 already gave up on another rank: its status
		 * word, waiting in down, says which. */
		int wrc = full_io(c->up[c->rank][1], (void *)in, len, 1);
		int rc = leaf_recv(c, out, len * (size_t)c->size);
		return rc ? rc : wrc ? fail_rank(c, 0) : 0;
	}
	memcpy(out, in, len);
	for (int r = 1; r < c->size && !c->broken; r++)
		if (full_io(c->up[r][0], (uint8_t *)out + len * (size_t)r, len, 0))
			fail_rank(c, r);
	return root_send(c, out, len * (size_t)c->size);
}

static int p_broadcast(void *ctx, void *buf, size_t len, int root)
{
	struct pcomm *c = ctx;
	if (root != 0)
		return -CKPT_E_INVAL;
	return c->rank == 0 ? root_send(c, buf, len) : leaf_recv(c, buf, len);
}

static int p_barrier(void *ctx)
{
	struct pcomm *c = ctx;
	uint8_t in = 0, out[MAXW];
	return p_allgather(c, &in, 1, out);
}

static const char *p_errmsg(void *ctx)
{
	return ((struct pcomm *)ctx)->msg;
}

static char *g_store;
static int g_victim = -1; /* the rank whose failure the others' errors must name */

/* Child body: rank r saves step; exits 0 on success, 1 when the commit failed. */
static int rank_main(struct pcomm *c, uint64_t step, const char *kill_at)
{
	if (kill_at && strncmp(kill_at, "after:", 6))
		setenv("CKPT_DIST_KILL_AT", kill_at, 1);
	ckpt_comm comm = {.struct_size = sizeof comm, .rank = c->rank, .size = c->size, .ctx = c,
			  .allgather = p_allgather, .broadcast = p_broadcast, .barrier = p_barrier,
			  .errmsg = p_errmsg};
	ckpt_store *s = t_open_store(g_store, SCEN_CHUNK, 0);
	if (!s)
		return 2;
	ckpt_stats st;
	memset(&st, 0, sizeof st);
	int rc = scen_save(s, &comm, step, &st);
	char msg[2048];
	snprintf(msg, sizeof msg, "%s", rc ? ckpt_errmsg() : "");
	if (rc)
		fprintf(stderr, "rank %d: step %llu: %s\n", c->rank, (unsigned long long)step,
			ckpt_errmsg());
	else
		printf("rank %d step %llu: %llu of %llu chunks new\n", c->rank,
		       (unsigned long long)step, (unsigned long long)st.chunks_new,
		       (unsigned long long)st.chunks);
	ckpt_store_close(s);
	fflush(NULL); /* the child ends with _exit */
	if (!rc)
		return 0;
	/* A failed commit names the rank that failed. */
	char a[64], b[64];
	snprintf(a, sizeof a, "rank %d is gone", g_victim);
	snprintf(b, sizeof b, "rank %d failed", g_victim);
	return strstr(msg, a) || strstr(msg, b) || c->rank == g_victim ? 1 : 3;
}

/* Runs a world of n ranks saving step; victim (or -1) gets kill_at. Fills status[r] with each
 * rank's exit code (or 128 + signal). */
static void run_world(int n, uint64_t step, int victim, const char *kill_at, int *status)
{
	struct pcomm c = {.size = n};
	for (int r = 1; r < n; r++)
		REQUIRE(pipe(c.up[r]) == 0 && pipe(c.down[r]) == 0);
	fflush(NULL);
	pid_t pid[MAXW];
	for (int r = 0; r < n; r++) {
		REQUIRE((pid[r] = fork()) >= 0);
		if (pid[r] == 0) {
			/* Keep only this rank's ends, so that a dead peer reads as EOF. */
			for (int q = 1; q < n; q++) {
				if (r != 0) {
					if (q != r)
						close(c.up[q][1]), close(c.down[q][0]);
					close(c.up[q][0]);
					close(c.down[q][1]);
				} else {
					close(c.up[q][1]);
					close(c.down[q][0]);
				}
			}
			c.rank = r;
			_exit(rank_main(&c, step, r == victim ? kill_at : NULL));
		}
	}
	for (int q = 1; q < n; q++) {
		close(c.up[q][0]), close(c.up[q][1]);
		close(c.down[q][0]), close(c.down[q][1]);
	}
	if (victim >= 0 && !strncmp(kill_at, "after:", 6)) {
		/* A kill at an arbitrary point of the victim's save (wherever the delay lands; the
		 * checks hold for every point, and a victim that finished first is not counted). */
		usleep((useconds_t)atol(kill_at + 6));
		kill(pid[victim], SIGKILL);
	}
	for (int r = 0; r < n; r++) {
		int ws;
		REQUIRE(waitpid(pid[r], &ws, 0) == pid[r]);
		status[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
	}
}

static int manifest_exists(uint64_t step)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/manifests/%020llu.ckpt", g_store, (unsigned long long)step);
	return access(p, F_OK) == 0;
}

static void save_ok(int n, uint64_t step)
{
	int st[MAXW];
	run_world(n, step, -1, NULL, st);
	for (int r = 0; r < n; r++)
		CHECK(st[r] == 0);
	CHECK(manifest_exists(step));
}

static void check_all_layouts(ckpt_store *s, uint64_t step)
{
	for (unsigned n = 1; n <= 4; n++)
		CHECK(scen_check_layout(s, step, n) == 0);
}

/* Strided boxes: two column halves of w written into their places of one whole matrix, and w
 * restored transposed (innermost stride not 1). */
static void test_strided(ckpt_store *s, uint64_t step)
{
	dreader *r;
	CHECK_OK(dreader_open(s, step, &r));
	long iw = dreader_find(r, "w");
	REQUIRE(iw >= 0);
	size_t n = (size_t)W_ROWS * W_COLS;
	float *m = calloc(n, sizeof *m), *t = calloc(n, sizeof *t);
	REQUIRE(m && t);
	for (unsigned q = 0; q < 2; q++) {
		uint64_t o[2] = {0, W_COLS * q / 2}, l[2] = {W_ROWS, W_COLS / 2}, st[2] = {W_COLS, 1};
		CHECK_OK(dreader_restore_box_strided(r, (size_t)iw, o, l, m + o[1], st,
							      (n - o[1]) * sizeof *m));
	}
	uint64_t o[2] = {0, 0}, l[2] = {W_ROWS, W_COLS}, tst[2] = {1, W_ROWS};
	CHECK_OK(dreader_restore_box_strided(r, (size_t)iw, o, l, t, tst, n * sizeof *t));
	CHECK_RC(dreader_restore_box_strided(r, (size_t)iw, o, l, t, tst, n * sizeof *t - 1),
		 -CKPT_E_INVAL);
	long bad = 0;
	for (uint64_t i = 0; i < W_ROWS; i++)
		for (uint64_t j = 0; j < W_COLS; j++) {
			float want = scen_w(step, i * W_COLS + j);
			bad += memcmp(&m[i * W_COLS + j], &want, 4) != 0;
			bad += memcmp(&t[j * W_ROWS + i], &want, 4) != 0;
		}
	CHECK(bad == 0);
	free(m);
	free(t);
	dreader_close(r);
}

/* Saves, an incremental step, resharding in both directions. */
static void test_roundtrip(void)
{
	save_ok(4, 1);
	save_ok(4, 2);
	save_ok(2, 3);
	ckpt_store *s = t_open_store(g_store, SCEN_CHUNK, 0);
	REQUIRE(s);
	for (uint64_t step = 1; step <= 3; step++)
		check_all_layouts(s, step);
	/* An odd box across shard boundaries. */
	uint64_t o[2] = {100, 7}, l[2] = {300, 201};
	CHECK(scen_check_box(s, 2, o, l) == 0);
	test_strided(s, 3);
	/* Step 2 changed rows 0..63 only: the global manifest says how much was new. */
	reader1 *r;
	CHECK_OK(reader1_open(s, 2, &r));
	/* The replicated tensor is an ordinary tensor of the global manifest (ckptctl, export). */
	long e = reader1_find(r, "emb");
	CHECK(e >= 0);
	CHECK(reader1_get_meta(r, "step") && !strcmp(reader1_get_meta(r, "step"), "2"));
	CHECK(reader1_get_meta(r, "ckpt.dist.world") &&
	      !strcmp(reader1_get_meta(r, "ckpt.dist.world"), "4"));
	ckpt_tensor_info ti;
	size_t newc = 0;
	for (size_t i = 0; i < reader1_tensor_count(r); i++)
		if (reader1_tensor(r, i, &ti) == 0)
			newc += ti.chunks_new;
	/* rows 0..63 of w are 96 KiB: 2 chunks of 64 KiB (rank 0's shard), nothing else. */
	CHECK(newc == 2);
	reader1_close(r);
	/* Step 1 wrote w (12 chunks) and emb (10 chunks) once, not once per replica. */
	CHECK_OK(reader1_open(s, 1, &r));
	newc = 0;
	for (size_t i = 0; i < reader1_tensor_count(r); i++)
		if (reader1_tensor(r, i, &ti) == 0)
			newc += ti.chunks_new;
	CHECK(newc == 22);
	reader1_close(r);
	ckpt_store_close(s);
}

/* Kill points per rank: 1 before its part commits, 2 after, 3 after the allgather; rank 0 also
 * 4 before the global manifest's rename, 5 after it. */
static void test_kills(uint64_t *next_step, int *kills)
{
	for (int victim = 0; victim < 4; victim++)
		for (int point = 1; point <= (victim == 0 ? 5 : 3); point++) {
			uint64_t step = (*next_step)++;
			char at[32];
			snprintf(at, sizeof at, "%d:%d", victim, point);
			g_victim = victim;
			int st[MAXW];
			run_world(4, step, victim, at, st);
			CHECK(st[victim] == 128 + SIGKILL);
			(*kills)++;
			/* Committed when every part was durable and gathered before the kill
			 * (the others learn of it), or after rank 0's rename (they do not). */
			bool gathered = victim != 0 && point == 3;
			bool after_rename = gathered || (victim == 0 && point == 5);
			for (int r = 0; r < 4; r++)
				if (r != victim)
					CHECK(st[r] == (gathered ? 0 : 1));
			CHECK(manifest_exists(step) == after_rename);
			ckpt_store *s = t_open_store(g_store, SCEN_CHUNK, 0);
			REQUIRE(s);
			if (after_rename)
				CHECK(scen_check_layout(s, step, 2) == 0);
			CHECK(scen_check_layout(s, 2, 4) == 0); /* earlier checkpoint intact */
			ckpt_store_close(s);
			if (!after_rename) {
				save_ok(4, step); /* the same step again: leftovers do not get in the way */
				s = t_open_store(g_store, SCEN_CHUNK, 0);
				REQUIRE(s);
				CHECK(scen_check_layout(s, step, 3) == 0);
				ckpt_store_close(s);
			}
		}
}

/* SIGKILLs of one rank at arbitrary points of its save (pipeline included): whatever the point,
 * either the checkpoint is visible and byte-exact, or it is not and every other rank's commit
 * failed; the store accepts the next save. Returns the kills that landed. */
static int test_random_kills(uint64_t *next_step, int tries)
{
	uint64_t seed = 42;
	int landed = 0;
	for (int i = 0; i < tries; i++) {
		uint64_t step = (*next_step)++;
		int victim = (int)(t_rand(&seed) % 4), st[MAXW];
		char at[32];
		snprintf(at, sizeof at, "after:%llu", (unsigned long long)(t_rand(&seed) % 150000));
		g_victim = victim;
		run_world(4, step, victim, at, st);
		if (st[victim] != 128 + SIGKILL) {
			CHECK(st[victim] == 0);
			continue;
		}
		landed++;
		ckpt_store *s = t_open_store(g_store, SCEN_CHUNK, 0);
		REQUIRE(s);
		if (manifest_exists(step)) {
			CHECK(scen_check_layout(s, step, 2) == 0);
		} else {
			for (int r = 0; r < 4; r++)
				if (r != victim)
					CHECK(st[r] == 1);
		}
		CHECK(scen_check_layout(s, 2, 4) == 0);
		ckpt_store_close(s);
	}
	save_ok(4, (*next_step)++);
	return landed;
}

/* A rank that gives up makes every rank's commit fail naming it; nothing becomes visible, even
 * over a stale part of that rank left by an earlier killed attempt of the same step. */
static void test_abort(uint64_t step)
{
	int st[MAXW];
	run_world(4, step, 2, "2:2", st); /* rank 2 dies after its part is durable */
	CHECK(st[2] == 128 + SIGKILL);
	for (int r = 0; r < 4; r++) {
		scen_abort_rank = r;
		g_victim = r;
		run_world(4, step, -1, NULL, st);
		for (int q = 0; q < 4; q++)
			CHECK(st[q] == 1);
		CHECK(!manifest_exists(step));
	}
	scen_abort_rank = -1;
	save_ok(4, step);
}

/* A communicator of one process that plays every rank of its world (for the lock checks). */
static int solo_allgather(void *ctx, const void *in, size_t len, void *out)
{
	for (int r = 0; r < *(int *)ctx; r++)
		memcpy((uint8_t *)out + len * (size_t)r, in, len);
	return 0;
}
static int solo_broadcast(void *ctx, void *buf, size_t len, int root)
{
	(void)ctx, (void)buf, (void)len, (void)root;
	return 0;
}

/* Ranks share the lock; gc and single-process saves are excluded while any rank's save is open,
 * and admitted again after it. */
static void test_locking(uint64_t step)
{
	int one = 1, two = 2;
	ckpt_comm c0 = {.rank = 0, .size = 1, .ctx = &one, .allgather = solo_allgather,
			.broadcast = solo_broadcast};
	ckpt_comm c1 = {.rank = 1, .size = 2, .ctx = &two, .allgather = solo_allgather,
			.broadcast = solo_broadcast};
	ckpt_store *a = t_open_store(g_store, SCEN_CHUNK, 0), *b = t_open_store(g_store, SCEN_CHUNK, 0);
	ckpt_store *c = t_open_store(g_store, SCEN_CHUNK, 0);
	REQUIRE(a && b && c);
	dsave *da, *dc;
	CHECK_OK(dsave_begin(a, &c0, step, &da));
	CHECK_OK(dsave_begin(c, &c1, step + 1, &dc)); /* another rank: not blocked */
	dsave *again;
	CHECK_RC(dsave_begin(a, &c0, step + 2, &again), -CKPT_E_BUSY);
	gc_report *rep = NULL;
	CHECK_RC(retain_gc(b, 0, 0, &rep), -CKPT_E_BUSY);
	save1 *sv;
	CHECK_RC(save1_begin(b, step + 3, &sv), -CKPT_E_BUSY);
	uint64_t shape[1] = {1000};
	static float x[1000];
	CHECK_OK(dsave_add_shard(da, "x", CKPT_DTYPE_F32, 1, shape, (uint64_t[]){0},
					  shape, CKPT_MEM_HOST, x));
	CHECK_RC(dsave_set_meta(da, "ckpt.dist.world", "9"), -CKPT_E_INVAL);
	ckpt_stats st;
	CHECK_OK(dsave_commit(da, &st));
	dsave_abort(dc);
	CHECK_OK(retain_gc(b, 0, 0, &rep));
	gc_report_free(rep);
	CHECK(manifest_exists(step) && !manifest_exists(step + 1));
	ckpt_store_close(a);
	ckpt_store_close(b);
	ckpt_store_close(c);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	g_store = t_tmpdir("dist");
	ckpt_store *s = t_open_store(g_store, SCEN_CHUNK, 0);
	REQUIRE(s);
	ckpt_store_close(s);
	test_roundtrip();
	uint64_t next = 10;
	int kills = 0;
	test_kills(&next, &kills);
	uint64_t abort_step = next++;
	test_abort(abort_step);
	test_locking(next);
	next += 4;
	int landed = test_random_kills(&next, 40);
	printf("%d kills at the kill points and %d at arbitrary points; none left a partial "
	       "checkpoint\n", kills, landed);
	/* A save that never commits: its parts and packs are garbage for gc. */
	int st[MAXW];
	uint64_t orphan = next++;
	g_victim = 0;
	run_world(4, orphan, 0, "0:3", st);
	char pd[4096];
	snprintf(pd, sizeof pd, "%s/parts/%020llu", g_store, (unsigned long long)orphan);
	CHECK(access(pd, F_OK) == 0 && !manifest_exists(orphan));
	s = t_open_store(g_store, SCEN_CHUNK, 0);
	REQUIRE(s);
	gc_report *rep = NULL;
	CHECK_OK(retain_gc(s, 0, 0, &rep));
	CHECK(rep && rep->packs_removed > 0 && rep->leftovers_removed >= 4);
	gc_report_free(rep);
	CHECK(access(pd, F_OK) != 0);
	/* Prune the odd steps (their packs become partly dead), then compaction rewrites global
	 * manifests (version 2 kept) over moved per-rank records. */
	retain_keep pol = {.keep_every = 2};
	rep = NULL;
	CHECK_OK(retain_prune(s, &pol, 0, &rep));
	gc_report_free(rep);
	rep = NULL;
	CHECK_OK(retain_gc(s, 1.0, 0, &rep));
	CHECK(rep && rep->manifests_rewritten > 0);
	gc_report_free(rep);
	CHECK(scen_check_layout(s, 2, 4) == 0);
	CHECK(scen_check_layout(s, 10, 3) == 0);
	snprintf(pd, sizeof pd, "%s/manifests/%020d.ckpt", g_store, 2);
	FILE *f = fopen(pd, "rb");
	uint8_t hdr[12] = {0};
	CHECK(f && fread(hdr, 1, 12, f) == 12 && hdr[8] == 2 && !hdr[9] && !hdr[10] && !hdr[11]);
	if (f)
		fclose(f);
	CHECK(scen_check_layout(s, 2, 1) == 0);
	if (abort_step % 2 == 0)
		CHECK(scen_check_layout(s, abort_step, 2) == 0); /* the abort test's resave */
	CHECK(scen_check_layout(s, 10, 2) == 0);
	ckpt_store_close(s);
	t_rmrf(g_store);
	free(g_store);
	return t_done();
}
