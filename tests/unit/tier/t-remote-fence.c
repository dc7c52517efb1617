/* A remote never loses a checkpoint it reported pushed, when two writers share one store id or a
 * remote gc runs beside a push (docs/format.md, "Remote layout"):
 *   writers     two stores bound to one remote store id (a second adopt) allocate the same pack
 *               id; the second's push of another pack under it fails naming both writers, and
 *               the first's remote checkpoint stays whole;
 *   put_race    the other writer's pack lands between the look and the put: never replaced;
 *   gc_race     a push begins after a gc looked for uploads and finds present a pack that gc is
 *               about to delete: the push waits for the gc, sends the pack again, and its
 *               checkpoint is whole when it returns;
 *   gc_dead     a killed gc's marker holds a push for the stale age only, and gc removes it
 *               once it is older than the grace age;
 *   gc_lapse    a gc stalled past half the stale age deletes no more packs;
 *   gc_sweep    a directory remote's temporary of a put killed longer than the grace age ago
 *               goes with gc, a younger one stays;
 *   repush      a checkpoint pushed, compacted locally (other pack ids), pushed again: nothing
 *               sent, nothing left behind; another checkpoint of a pushed step: refused before
 *               any pack is sent.
 * Interleavings are forced through the test hooks of lib/tier (tier_test_hook). The remote is
 * $CKPT_TEST_REMOTE (t-remote.h) or a temporary directory. */
/* The tests link the library's objects built with the hooks (TLIB): see their declarations. */
#define CKPT_TEST_HOOKS 1
#include <inttypes.h>
#include <pthread.h>
#include <fcntl.h>
#include <time.h>

#include "common/common.h"

#include "remote/remote.h"
#include "t-remote.h"
#include "tier/tier.h"

enum { NT = 2, TBYTES = 256 << 10, CHUNK = 64 << 10 };

static uint8_t *data[NT];
static char *dir;

static ckpt_store *open_store(const char *path)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(path, o, &s) == 0);
	ckpt_options_free(o);
	return s;
}

static struct tier_ref ref_of(const char *url, ckpt_store *s)
{
	struct tier_ref t = {0};
	REQUIRE(rmt_open(url, NULL, &t.r) == 0);
	tier_id_of(s->hdr.uuid, t.id);
	return t;
}

/* Whether the remote's checkpoint step restores as want[] (pulled into a fresh adopted store). */
static bool remote_whole(const char *url, const char *id, uint64_t step, uint8_t *const *want)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/check-%" PRIu64, dir, step);
	t_rmrf(path);
	REQUIRE(ckpt_remote_adopt(url, id, path) == 0);
	ckpt_store *s = open_store(path);
	struct tier_ref t = ref_of(url, s);
	bool ok = tier_pull(s, &t, step, NULL, NULL, NULL, NULL) == 0;
	if (!ok)
		printf("pull of %" PRIu64 ": %s\n", step, ckpt_errmsg());
	reader1 *r = NULL;
	ok = ok && reader1_open(s, step, &r) == 0;
	uint8_t *buf = malloc(TBYTES);
	for (int i = 0; ok && i < NT; i++) {
		char name[16];
		snprintf(name, sizeof name, "t%d", i);
		long k = reader1_find(r, name);
		ok = k >= 0 && reader1_restore(r, (size_t)k, CKPT_MEM_HOST, buf, TBYTES) == 0 &&
		     !memcmp(buf, want[i], TBYTES);
	}
	free(buf);
	if (r)
		reader1_close(r);
	t.r->ops->close(t.r);
	ckpt_store_close(s);
	t_rmrf(path);
	return ok;
}

static void fill(uint64_t seed)
{
	for (int i = 0; i < NT; i++)
		t_fill(data[i], TBYTES, seed * 10 + (uint64_t)i);
}

/* Waits for the start of a wall-clock second, so that two packs made next share their creation
 * time (without nonces, their headers would then be equal). */
static void next_second(void)
{
	time_t t0 = time(NULL);
	while (time(NULL) == t0)
		usleep(1000);
}

/* A stores step 1 and pushes it; B is adopted from the remote. Both then save a step of the same
 * shape that differs in its last chunk only: both take the same next pack id, and their packs
 * differ past their first record. */
static void two_writers(const char *url, const char *tag, ckpt_store **a, ckpt_store **b,
			uint8_t **keep)
{
	char pa[4200], pb[4200];
	snprintf(pa, sizeof pa, "%s/%s-a", dir, tag);
	snprintf(pb, sizeof pb, "%s/%s-b", dir, tag);
	*a = open_store(pa);
	struct tier_ref t = ref_of(url, *a);
	fill(1);
	t_remote_save(*a, 1, data, NT, TBYTES);
	CHECK_OK(tier_push(*a, &t, 1, NULL, NULL, NULL, NULL));
	CHECK_OK(ckpt_remote_adopt(url, t.id, pb));
	*b = open_store(pb);
	next_second();
	fill(2);
	t_remote_save(*a, 2, data, NT, TBYTES);
	for (int i = 0; i < NT; i++)
		memcpy(keep[i], data[i], TBYTES);
	t_fill(data[NT - 1] + TBYTES - CHUNK, CHUNK, 99); /* A's but the last chunk */
	t_remote_save(*b, 3, data, NT, TBYTES);
	t.r->ops->close(t.r);
}

/* ---- writers and put_race ----------------------------------------------------------------- */

static struct {
	ckpt_store *a;
	struct tier_ref *t;
	int fired, rc;
} pr;

/* A's push runs inside B's, between B's look at pack 2 and its put. */
static void put_race_hook(const char *point)
{
	if (strcmp(point, "push-pack-put") || pr.fired++)
		return;
	pr.rc = tier_push(pr.a, pr.t, 2, NULL, NULL, NULL, NULL);
}

/* A pushes its step 2 before B pushes its step 3 (race false), or inside B's push (true): B's
 * push fails naming the writers, and A's checkpoint stays whole on the remote. */
static void writers(const char *url, bool race)
{
	uint8_t *keep[NT];
	for (int i = 0; i < NT; i++)
		keep[i] = malloc(TBYTES);
	ckpt_store *a, *b;
	two_writers(url, race ? "p" : "w", &a, &b, keep);
	struct tier_ref t = ref_of(url, a);
	pr.a = a, pr.t = &t, pr.fired = 0, pr.rc = -1;
	if (race)
		tier_test_hook = put_race_hook;
	else
		pr.rc = tier_push(a, &t, 2, NULL, NULL, NULL, NULL);
	int rc = tier_push(b, &t, 3, NULL, NULL, NULL, NULL);
	tier_test_hook = NULL;
	printf("%s: A's push %d; B's push %d %s\n", race ? "put_race" : "writers", pr.rc, rc,
	       rc ? ckpt_errmsg() : "");
	CHECK(pr.rc == 0 && (!race || pr.fired >= 1));
	CHECK(rc == -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "two writers of store") != NULL);
	CHECK(strstr(ckpt_errmsg(), a->path) != NULL); /* the first writer is named */
	CHECK(remote_whole(url, t.id, 2, keep)); /* A's pack was not replaced */
	t.r->ops->close(t.r);
	ckpt_store_close(a);
	ckpt_store_close(b);
	for (int i = 0; i < NT; i++)
		free(keep[i]);
}

/* ---- gc_race: a push begins while gc deletes ------------------------------------------------ */

static struct {
	ckpt_store *s;
	struct tier_ref *t;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started, waiting, done;
	int rc;
} gr = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *push_thread(void *arg)
{
	(void)arg;
	int rc = tier_push(gr.s, gr.t, 2, NULL, NULL, NULL, NULL);
	pthread_mutex_lock(&gr.mu);
	gr.rc = rc, gr.done = true;
	pthread_cond_broadcast(&gr.cv);
	pthread_mutex_unlock(&gr.mu);
	return NULL;
}

/* Before gc's first delete: the push starts (after gc's last look at the uploads) and runs
 * until it ends or waits for the gc; then gc goes on. */
static void gc_race_hook(const char *point)
{
	pthread_mutex_lock(&gr.mu);
	if (!strcmp(point, "push-gc-wait")) {
		gr.waiting = true;
		pthread_cond_broadcast(&gr.cv);
	} else if (!strcmp(point, "gc-pack-delete") && !gr.started) {
		gr.started = true;
		pthread_create(&gr.th, NULL, push_thread, NULL);
		while (!gr.done && !gr.waiting)
			pthread_cond_wait(&gr.cv, &gr.mu);
	}
	pthread_mutex_unlock(&gr.mu);
}

static int count_one(void *arg, const struct rmt_obj *o)
{
	(void)o;
	(*(long *)arg)++;
	return 0;
}

/* The objects under the store's sub-prefix sub ("packs/", "gc/"). */
static long remote_count(struct tier_ref *t, const char *sub)
{
	long n = 0;
	char prefix[160];
	snprintf(prefix, sizeof prefix, "libckpt1/%s/%s", t->id, sub);
	CHECK_OK(t->r->ops->list(t->r, prefix, count_one, &n));
	return n;
}

/* The store of one case, dir/name, and its place on the remote. */
static ckpt_store *case_store(const char *name, const char *url, struct tier_ref *t)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	ckpt_store *s = open_store(path);
	*t = ref_of(url, s);
	return s;
}

static void case_end(ckpt_store *s, struct tier_ref *t)
{
	t->r->ops->close(t->r);
	ckpt_store_close(s);
}

static void gc_race(const char *url)
{
	char key[256];
	struct tier_ref t;
	ckpt_store *s = case_store("gcrace", url, &t);
	fill(3);
	t_remote_save(s, 1, data, NT, TBYTES);
	CHECK_OK(tier_push(s, &t, 1, NULL, NULL, NULL, NULL));
	t_remote_save(s, 2, data, NT, TBYTES); /* the same chunks: step 1's packs only */
	tier_key_mf(&t, 1, key, sizeof key);
	CHECK_OK(t.r->ops->del(t.r, key)); /* remote step 1 gone: its packs are garbage there */
	gr.s = s, gr.t = &t;
	tier_test_hook = gc_race_hook;
	rgc_report rep;
	CHECK_OK(tier_gc(&t, s->hdr.uuid, 3600, 0, &rep));
	tier_test_hook = NULL;
	REQUIRE(gr.started);
	pthread_join(gr.th, NULL);
	printf("gc_race: gc removed %" PRIu64 " packs; the push waited: %d, returned %d %s\n",
	       rep.packs_removed, gr.waiting, gr.rc, gr.rc ? ckpt_errmsg() : "");
	CHECK(rep.packs_removed >= 1);
	CHECK(gr.rc == 0);
	CHECK(remote_whole(url, t.id, 2, data));
	CHECK(remote_count(&t, "gc/") == 0);
	case_end(s, &t);
}

/* ---- gc_dead and gc_lapse ------------------------------------------------------------------- */

static void gc_dead(const char *url)
{
	char key[256];
	struct tier_ref t;
	ckpt_store *s = case_store("gcdead", url, &t);
	fill(4);
	t_remote_save(s, 1, data, NT, TBYTES);
	snprintf(key, sizeof key, "libckpt1/%s/gc/00000000000000aa.gc", t.id);
	struct rmt_src src = {.buf = "pid 1\n", .len = 6};
	CHECK_OK(t.r->ops->put(t.r, key, &src, 0, NULL, NULL)); /* a killed gc's */
	setenv("CKPT_REMOTE_GC_STALE_S", "2", 1);
	double t0 = ckpt_now();
	CHECK_OK(tier_push(s, &t, 1, NULL, NULL, NULL, NULL));
	double took = ckpt_now() - t0;
	printf("gc_dead: the push waited %.1f s for a dead gc's marker\n", took);
	CHECK(took >= 1.9 && took < 30);
	rgc_report rep;
	CHECK_OK(tier_gc(&t, s->hdr.uuid, 3600, 0, &rep));
	CHECK(remote_count(&t, "gc/") == 1); /* younger than the grace age: kept */
	sleep(1);
	CHECK_OK(tier_gc(&t, s->hdr.uuid, 0, 0, &rep));
	CHECK(remote_count(&t, "gc/") == 0);
	CHECK(remote_whole(url, t.id, 1, data));
	unsetenv("CKPT_REMOTE_GC_STALE_S");
	case_end(s, &t);
}

static int lapse_deletes;

static void lapse_hook(const char *point)
{
	if (!strcmp(point, "gc-pack-delete") && lapse_deletes++ == 0)
		usleep(1500 * 1000); /* past half the stale age of 2 s */
}

static void gc_lapse(const char *url)
{
	char key[256];
	struct tier_ref t;
	ckpt_store *s = case_store("gclapse", url, &t);
	for (uint64_t step = 1; step <= 3; step++) { /* three checkpoints, other packs each */
		fill(10 + step);
		t_remote_save(s, step, data, NT, TBYTES);
		CHECK_OK(tier_push(s, &t, step, NULL, NULL, NULL, NULL));
	}
	for (uint64_t step = 1; step <= 3; step++) {
		tier_key_mf(&t, step, key, sizeof key);
		CHECK_OK(t.r->ops->del(t.r, key));
	}
	setenv("CKPT_REMOTE_GC_STALE_S", "2", 1);
	lapse_deletes = 0;
	tier_test_hook = lapse_hook;
	rgc_report rep;
	CHECK_OK(tier_gc(&t, s->hdr.uuid, 3600, 0, &rep));
	tier_test_hook = NULL;
	unsetenv("CKPT_REMOTE_GC_STALE_S");
	printf("gc_lapse: removed %" PRIu64 ", spared %" PRIu64 " after a stall\n", rep.packs_removed,
	       rep.packs_spared);
	CHECK(rep.packs_removed == 1 && rep.packs_spared >= 2);
	case_end(s, &t);
}

/* ---- sweep: a killed put's temporary in a directory remote goes with gc -------------------- */

static void gc_sweep(const char *url)
{
	const char *root = !strncmp(url, "file://", 7) ? url + 7 : url[0] == '/' ? url : NULL;
	if (!root)
		return; /* S3's leftovers (incomplete multipart uploads): tests/s3 */
	char tmp[4400];
	struct tier_ref t;
	ckpt_store *s = case_store("gcsweep", url, &t);
	fill(6);
	t_remote_save(s, 1, data, NT, TBYTES);
	CHECK_OK(tier_push(s, &t, 1, NULL, NULL, NULL, NULL));
	snprintf(tmp, sizeof tmp, "%s/libckpt1/%s/packs/.00000009.pack.tmp.4242.00000000deadbeef",
		 root, t.id);
	FILE *f = fopen(tmp, "w");
	REQUIRE(f != NULL);
	fputs("half a pack", f);
	fclose(f);
	struct timespec old[2] = {{.tv_sec = time(NULL) - 7200}, {.tv_sec = time(NULL) - 7200}};
	CHECK(utimensat(AT_FDCWD, tmp, old, 0) == 0);
	rgc_report rep;
	CHECK_OK(tier_gc(&t, s->hdr.uuid, 7 * 3600, 0, &rep)); /* younger than the grace age */
	CHECK(rep.leftovers_removed == 0 && access(tmp, F_OK) == 0);
	CHECK_OK(tier_gc(&t, s->hdr.uuid, 3600, 0, &rep));
	printf("gc_sweep: %" PRIu64 " leftover(s), %" PRIu64 " bytes\n", rep.leftovers_removed,
	       rep.leftover_bytes);
	CHECK(rep.leftovers_removed == 1 && rep.leftover_bytes == 11 && access(tmp, F_OK) != 0);
	CHECK(remote_whole(url, t.id, 1, data));
	case_end(s, &t);
}

/* ---- repush ---------------------------------------------------------------------------------- */

static void repush(const char *url)
{
	struct tier_ref t;
	ckpt_store *s = case_store("repush", url, &t);
	fill(5);
	t_remote_save(s, 1, data, NT, TBYTES);
	t_fill(data[1], TBYTES, 55);
	t_remote_save(s, 2, data, NT, TBYTES);
	CHECK_OK(tier_push(s, &t, 2, NULL, NULL, NULL, NULL));
	long packs = remote_count(&t, "packs/");
	uint64_t one = 1;
	gc_report *gr1 = NULL; /* step 1 goes: its pack is half dead, and compacted */
	CHECK_OK(retain_delete(s, &one, 1, NULL, 0, &gr1));
	gc_report_free(gr1);
	gc_report *gr2 = NULL;
	CHECK_OK(retain_gc(s, 0.99, 0, &gr2));
	CHECK(gr2 && gr2->packs_compacted >= 1);
	gc_report_free(gr2);
	ckpt_remote_stats st;
	int rc = tier_push(s, &t, 2, &st, NULL, NULL, NULL);
	printf("repush after compaction: %d %s (sent %" PRIu64 ")\n", rc, rc ? ckpt_errmsg() : "",
	       st.packs_sent);
	CHECK(rc == 0 && st.packs_sent == 0);
	CHECK(remote_count(&t, "packs/") == packs);
	CHECK(remote_whole(url, t.id, 2, data));
	/* Another checkpoint 2 (deleted locally, saved anew): refused, nothing sent. */
	uint64_t two = 2;
	gc_report *gr3 = NULL;
	CHECK_OK(retain_delete(s, &two, 1, NULL, CKPT_GC_NEWEST, &gr3));
	gc_report_free(gr3);
	t_fill(data[0], TBYTES, 56);
	t_remote_save(s, 2, data, NT, TBYTES);
	rc = tier_push(s, &t, 2, &st, NULL, NULL, NULL);
	printf("push of another checkpoint 2: %d %s\n", rc, rc ? ckpt_errmsg() : "");
	CHECK(rc == -CKPT_E_EXISTS);
	CHECK(remote_count(&t, "packs/") == packs);
	case_end(s, &t);
}

int main(void)
{
	char *cleanup;
	char *url = t_remote_url("fence", &cleanup);
	dir = t_tmpdir("fence-local");
	for (int i = 0; i < NT; i++)
		REQUIRE((data[i] = malloc(TBYTES)) != NULL);
	writers(url, false);
	writers(url, true);
	gc_race(url);
	gc_dead(url);
	gc_lapse(url);
	repush(url);
	gc_sweep(url);
	for (int i = 0; i < NT; i++)
		free(data[i]);
	t_rmrf(dir);
	if (cleanup)
		t_rmrf(cleanup);
	free(cleanup);
	free(url);
	return t_done();
}
