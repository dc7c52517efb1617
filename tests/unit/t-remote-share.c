/* Every rank uploads its own packs: four ranks (threads, each with its own store handle
 * on one shared store, each with CKPT_REMOTE_UPLOAD) save a row-sharded tensor and a replicated one.
 * Checked:
 *   - each handle put exactly the packs of its own id range (its upload counters against the
 *     remote's pack keys by range), so no object was put twice, and every pack is there; rank
 *     1 is slow (CKPT_TEST_SHARE_STALL=1:300), so rank 0 must wait for it;
 *   - the global manifest was put last: on a directory remote, its mtime is not before any
 *     pack's or part's of that checkpoint;
 *   - every rank's wait_uploaded(step) returns once rank 0 put the manifest, and each sees the
 *     checkpoint REMOTE;
 *   - a rank whose share never reaches the remote (CKPT_TEST_SHARE_STALL: as if it died after
 *     the commit, before its upload): rank 0 sends that share itself once no rank made progress
 *     for CKPT_REMOTE_SHARE_WAIT_S, and the checkpoint is complete on the remote;
 *   - remote gc spares a young part object of a step without a manifest (a share in flight),
 *     and every unreferenced pack with it, until the grace age;
 *   - resume: a step saved by a job killed before any upload is put by the next job's handles,
 *     each its own share, once their first commit tells them their ranks;
 *   - the node-loss drill: the local store deleted, a store adopted from the remote restores
 *     every step bit-identical, read from the remote and then pulled (the parts verify).
 * The remote is $CKPT_TEST_REMOTE (t-remote.h) or a temporary directory. */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "t-dist-tcomm.h"
#include "t-remote.h"
#include "tier/tier.h"

#define NR 4
#define STEPS 5
enum { ROWS = 256, COLS = 4096, CHUNK = 64 << 10 };

static uint8_t w[STEPS + 1][ROWS * COLS], bias[COLS * 3];
static const char *store_path, *remote_url;
static struct tc_shared sh;
static struct tc_rank ranks[NR];
static ckpt_remote_stats sent[NR]; /* each handle's upload counters at its end */

static void save_step(ckpt_store *s, struct tc_rank *r, uint64_t step)
{
	ckpt_comm comm = tc_comm(r);
	uint64_t gshape[2] = {ROWS, COLS}, rows = ROWS / NR;
	uint64_t off[2] = {rows * (uint64_t)r->rank, 0}, ext[2] = {rows, COLS};
	uint64_t bshape[1] = {sizeof bias};
	dsave *sv;
	REQUIRE(dsave_begin(s, &comm, step, &sv) == 0);
	CHECK_OK(dsave_add_shard(sv, "w", CKPT_DTYPE_U8, 2, gshape, off, ext, CKPT_MEM_HOST,
					  w[step] + off[0] * COLS));
	CHECK_OK(dsave_add_replicated(sv, "bias", CKPT_DTYPE_U8, 1, bshape,
					       (unsigned)r->rank, NR, CKPT_MEM_HOST, bias));
	CHECK_OK(dsave_commit(sv, NULL));
}

static ckpt_store *open_rank(struct tc_rank *r, unsigned flags)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_THREADS, 1);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(store_path, o, &s) == 0);
	ckpt_options_free(o);
	tc_barrier(r); /* every rank sees the one store rank 0 may have created */
	REQUIRE(rstore_set(s, remote_url, flags) == 0);
	return s;
}

/* The handle's upload counters added to sent[], then closed. */
static void close_rank(ckpt_store *s, struct tc_rank *r)
{
	ckpt_remote_stats st;
	tier_upload_stats((struct ckpt_store *)s, &st);
	sent[r->rank].packs_sent += st.packs_sent;
	ckpt_store_close(s);
}

/* Step 4 is saved by a job killed before any upload (handles without CKPT_REMOTE_UPLOAD); the
 * next job's handles resume it: once its first commit (step 5) tells each its rank, each puts
 * its share of 4 and of 5, rank 0 finishing both. */
static void resume(struct tc_rank *r)
{
	ckpt_store *s = open_rank(r, 0);
	save_step(s, r, 4);
	ckpt_store_close(s);
	s = open_rank(r, CKPT_REMOTE_UPLOAD);
	CHECK(rstore_upload_state(s, 4) == CKPT_UPLOAD_UPLOADING); /* waits for the rank */
	save_step(s, r, 5);
	for (uint64_t step = 4; step <= 5; step++) {
		CHECK_OK(rstore_wait_uploaded(s, step, 60000));
		CHECK(rstore_upload_state(s, step) == CKPT_UPLOAD_REMOTE);
	}
	close_rank(s, r);
}

static void *rank_main(void *arg)
{
	struct tc_rank *r = arg;
	ckpt_store *s = open_rank(r, CKPT_REMOTE_UPLOAD);
	/* Steps 1 and 2: rank 1 is slow (CKPT_TEST_SHARE_STALL=1:300, set by main); rank 0 waits. */
	for (uint64_t step = 1; step <= 2; step++) {
		save_step(s, r, step);
		CHECK_OK(rstore_wait_uploaded(s, step, 60000)); /* rank > 0: the manifest too */
		CHECK(rstore_upload_state(s, step) == CKPT_UPLOAD_REMOTE);
	}
	tc_barrier(r);
	if (r->rank == 0) /* step 3: rank 3's share never comes */
		setenv("CKPT_TEST_SHARE_STALL", "3", 1);
	tc_barrier(r);
	save_step(s, r, 3);
	if (r->rank == 0) {
		CHECK_OK(rstore_wait_uploaded(s, 3, 60000));
		CHECK(rstore_upload_state(s, 3) == CKPT_UPLOAD_REMOTE);
	} else if (r->rank != 3) {
		CHECK_OK(rstore_wait_uploaded(s, 3, 60000));
	}
	tc_barrier(r);
	if (r->rank == 3) /* still stalled: its share of 3 is in flight */
		CHECK(rstore_wait_uploaded(s, CKPT_STEP_LATEST, 0) == -CKPT_E_BUSY);
	close_rank(s, r); /* rank 3's stalled share is canceled */
	tc_barrier(r);
	if (r->rank == 0)
		unsetenv("CKPT_TEST_SHARE_STALL");
	tc_barrier(r);
	resume(r);
	return NULL;
}

/* The remote's packs of the store, counted by id range (range r + 1: rank r). */
struct by_range {
	uint64_t n[NR + 2];
	uint64_t total;
};

static int count_pack(void *arg, const struct rmt_obj *o)
{
	struct by_range *b = arg;
	const char *p = strstr(o->key, "/packs/");
	if (!p)
		return 0;
	unsigned long id = strtoul(p + 7, NULL, 10);
	unsigned range = (unsigned)(id >> 22);
	b->n[range < NR + 2 ? range : NR + 1]++;
	b->total++;
	return 0;
}

/* Each handle put exactly its range's packs: rank 0's counters also hold step 3's rank-3 packs,
 * which it sent itself (the rank never did). */
static void check_puts(const char *id)
{
	struct rmt *r;
	REQUIRE(rmt_open(remote_url, NULL, &r) == 0);
	char prefix[128];
	snprintf(prefix, sizeof prefix, "libckpt1/%s/packs/", id);
	struct by_range b = {0};
	CHECK_OK(r->ops->list(r, prefix, count_pack, &b));
	rmt_close(r);
	uint64_t sum = 0;
	for (int k = 0; k < NR; k++) {
		printf("rank %d's handle put %" PRIu64 " packs; the remote holds %" PRIu64
		       " of its range\n", k, sent[k].packs_sent, b.n[k + 1]);
		sum += sent[k].packs_sent;
	}
	CHECK(b.n[0] == 0 && b.n[NR + 1] == 0);
	CHECK(sent[1].packs_sent == b.n[2] && sent[2].packs_sent == b.n[3]);
	/* Rank 3 put its packs of steps 1 and 2, rank 0 those of step 3 (one pack a save). */
	CHECK(sent[3].packs_sent == b.n[4] - 1);
	CHECK(sent[0].packs_sent == b.n[1] + 1);
	CHECK(sum == b.total); /* no pack put twice */
}

/* The modification time of remote object key on a directory remote, in ns (0: not one). */
static int64_t mtime_ns(const char *key)
{
	const char *root = !strncmp(remote_url, "file://", 7) ? remote_url + 7
			   : remote_url[0] == '/' ? remote_url : NULL;
	char p[8192];
	struct stat st;
	if (!root)
		return 0;
	snprintf(p, sizeof p, "%s/%s", root, key);
	REQUIRE(stat(p, &st) == 0);
	return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

/* On a directory remote: each step's manifest was put after every pack it references and every
 * part. */
static void check_order(ckpt_store *s)
{
	struct tier_ref t = {0};
	ckpt_store_id(s, t.id);
	char key[256];
	if (!mtime_ns("."))
		return (void)printf("not a directory remote: the order is not checked\n");
	for (uint64_t step = 1; step <= STEPS; step++) {
		struct manifest m;
		REQUIRE(store_load_manifest((struct ckpt_store *)s, step, &m) == 0);
		uint32_t *ids;
		long n = tier_packs_of(&m, &ids);
		tier_key_mf(&t, step, key, sizeof key);
		int64_t mf = mtime_ns(key), last = 0;
		for (long i = 0; i < n; i++) {
			tier_key_pack(&t, ids[i], key, sizeof key);
			{ int64_t t_ = mtime_ns(key); last = t_ > last ? t_ : last; }
		}
		for (unsigned k = 0; k < NR; k++) {
			tier_key_part(&t, step, k, key, sizeof key);
			{ int64_t t_ = mtime_ns(key); last = t_ > last ? t_ : last; }
		}
		printf("step %" PRIu64 ": manifest put %.3f ms after the last pack or part\n", step,
		       (double)(mf - last) / 1e6);
		CHECK(mf >= last);
		free(ids);
		manifest_free(&m);
	}
}

/* Remote gc: a part object of a step without a manifest (a share whose checkpoint rank 0 has not
 * finished) is live while younger than the grace age: it and every unreferenced pack stay; with
 * no grace both go. */
static void check_gc(const char *id)
{
	struct rmt *r;
	REQUIRE(rmt_open(remote_url, NULL, &r) == 0);
	char part[256], pack[256];
	snprintf(part, sizeof part, "libckpt1/%s/parts/%020d/1.part", id, 99);
	snprintf(pack, sizeof pack, "libckpt1/%s/packs/%08u.pack", id, (2u << 22) + 999);
	struct rmt_src src = {.buf = "x", .len = 1};
	REQUIRE(r->ops->put(r, part, &src, 0, NULL, NULL) == 0);
	REQUIRE(r->ops->put(r, pack, &src, 0, NULL, NULL) == 0);
	for (int grace = 3600; grace >= 0; grace -= 3600) {
		ckpt_options *o = ckpt_options_create();
		ckpt_options_set(o, CKPT_OPT_GC_GRACE_S, grace);
		ckpt_store *s;
		REQUIRE(ckpt_store_open(store_path, o, &s) == 0);
		ckpt_options_free(o);
		REQUIRE(rstore_set(s, remote_url, 0) == 0);
		rgc_report rep;
		CHECK_OK(rstore_gc(s, 0, &rep));
		printf("remote gc, grace %d s: %" PRIu64 " uploads in flight, %" PRIu64 " packs "
		       "spared, %" PRIu64 " removed, %" PRIu64 " parts removed\n", grace,
		       rep.uploads_in_flight, rep.packs_spared, rep.packs_removed, rep.parts_removed);
		uint64_t size;
		CHECK((r->ops->stat(r, part, &size, NULL) == 0) == (grace > 0));
		CHECK((r->ops->stat(r, pack, &size, NULL) == 0) == (grace > 0));
		CHECK(grace ? rep.uploads_in_flight == 1 && rep.packs_spared == 1
		      : rep.parts_removed == 1 && rep.packs_removed == 1);
		ckpt_store_close(s);
	}
	rmt_close(r);
}

/* Every step's global tensors restore bit-identical (and the parts verify once local). */
static void check_global(ckpt_store *s, bool parts)
{
	for (uint64_t step = 1; step <= STEPS; step++) {
		dreader *dr;
		CHECK_OK(dreader_open(s, step, &dr));
		if (!dr)
			continue;
		t_remote_check_whole(dr, "w", 2, (uint64_t[]){ROWS, COLS}, w[step], sizeof w[step]);
		t_remote_check_whole(dr, "bias", 1, (uint64_t[]){sizeof bias}, bias, sizeof bias);
		if (parts)
			CHECK(dreader_verify_parts(dr, NULL, NULL) == 0);
		dreader_close(dr);
	}
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-share", &cleanup);
	char *dir = t_tmpdir("remote-share-local");
	char path[4200], path2[4200];
	snprintf(path, sizeof path, "%s/a", dir);
	snprintf(path2, sizeof path2, "%s/b", dir);
	store_path = path;
	remote_url = url;
	setenv("CKPT_REMOTE_SHARE_WAIT_S", "1", 1);
	setenv("CKPT_TEST_SHARE_STALL", "1:300", 1);
	t_fill(w[1], sizeof w[1], 1);
	memcpy(w[2], w[1], sizeof w[1]);
	t_fill(w[2] + 2 * (ROWS / NR) * COLS, (ROWS / NR) * COLS, 77); /* rank 2's rows change */
	memcpy(w[3], w[2], sizeof w[1]);
	t_fill(w[3] + 3 * (ROWS / NR) * COLS, (ROWS / NR) * COLS, 78); /* rank 3's rows change */
	t_fill(w[3], (ROWS / NR) * COLS, 79);                         /* and rank 0's */
	memcpy(w[4], w[3], sizeof w[1]);
	t_fill(w[4] + 1 * (ROWS / NR) * COLS, (ROWS / NR) * COLS, 80); /* rank 1's rows */
	memcpy(w[5], w[4], sizeof w[1]);
	t_fill(w[5] + 2 * (ROWS / NR) * COLS, (ROWS / NR) * COLS, 81); /* rank 2's rows */
	t_fill(bias, sizeof bias, 2);
	tc_init(&sh, ranks, NR);
	pthread_t th[NR];
	for (int i = 0; i < NR; i++)
		REQUIRE(pthread_create(&th[i], NULL, rank_main, &ranks[i]) == 0);
	for (int i = 0; i < NR; i++)
		pthread_join(th[i], NULL);
	unsetenv("CKPT_TEST_SHARE_STALL");

	ckpt_store *s;
	REQUIRE(ckpt_store_open(path, NULL, &s) == 0);
	char id[33];
	ckpt_store_id(s, id);
	check_puts(id);
	check_order(s);
	ckpt_store_close(s);
	check_gc(id);

	/* Node loss. */
	t_rmrf(path);
	CHECK_OK(ckpt_remote_adopt(url, NULL, path2));
	REQUIRE(ckpt_store_open(path2, NULL, &s) == 0);
	REQUIRE(rstore_set(s, url, 0) == 0);
	check_global(s, false); /* read from the remote, nothing pulled */
	for (uint64_t step = 1; step <= STEPS; step++)
		CHECK_OK(rstore_pull(s, step, NULL, NULL, NULL, NULL));
	check_global(s, true);
	ckpt_store_close(s);
	return t_remote_done(dir, cleanup, url);
}
