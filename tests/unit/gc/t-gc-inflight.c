/* gc and prune spare what a save in flight may reference when the store's lock does not keep
 * them out: CKPT_TEST_LOCAL_LOCK=1 makes every flock on STORE/LOCK succeed,
 * as a node-local flock on a shared mount does on every node, and the handles are given
 * different node identities, as the processes of two nodes have. A save begun on node A (its
 * dedup index loaded) while node B deletes the checkpoint it deduplicates against still
 * commits a checkpoint that restores and verifies; a marker of a dead save (another node's,
 * aged past the grace age; this node's, its lock free) spares nothing and is removed. And the
 * mount check that warns at open, fed fake mountinfo files. No timing: ages are set with
 * utimensat, the order of the steps is the program's. */
#include "helpers.h"

#include <sys/wait.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/marker.h"
#include "store/store.h"

enum { TB = 5 * (64 << 10) + 77, CHUNK = 64 << 10 };

static ckpt_store *open_node(const char *dir, const char *node, int64_t grace)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 4 << 20);
	ckpt_options_set(o, CKPT_OPT_PACK_SIZE, 1 << 20);
	if (grace >= 0)
		REQUIRE(ckpt_options_set(o, CKPT_OPT_GC_GRACE_S, grace) == 0);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	/* The handle's node identity (its boot id otherwise): which markers it judges by lock. */
	snprintf(s->lock.node, sizeof s->lock.node, "%s", node);
	return s;
}

static void add(save1 *sv, uint64_t seed)
{
	static uint8_t buf[TB];
	uint64_t shape[1] = {TB};
	t_fill(buf, TB, seed);
	REQUIRE(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, buf) == 0);
}

static void save(ckpt_store *s, uint64_t step, uint64_t seed)
{
	save1 *sv;
	REQUIRE(save1_begin(s, step, &sv) == 0);
	add(sv, seed);
	REQUIRE(save1_commit(sv, NULL) == 0);
}

/* Whether step restores as the data of seed and verifies. */
static bool restores(ckpt_store *s, uint64_t step, uint64_t seed)
{
	static uint8_t want[TB], got[TB];
	reader1 *r;
	if (reader1_open(s, step, &r))
		return false;
	t_fill(want, TB, seed);
	bool ok = reader1_restore(r, 0, CKPT_MEM_HOST, got, TB) == 0 && !memcmp(want, got, TB) &&
		  reader1_verify(r, NULL, NULL, NULL) == 0;
	if (!ok)
		fprintf(stderr, "step %llu does not restore: %s\n", (unsigned long long)step,
			ckpt_errmsg());
	reader1_close(r);
	return ok;
}

static int delete_step(ckpt_store *s, uint64_t step, gc_report **rep)
{
	return retain_delete(s, &step, 1, NULL, CKPT_GC_NEWEST, rep);
}

/* Node A saves step 2 deduplicating against step 1 while node B deletes step 1 and collects. */
static void test_live_save(void)
{
	char *dir = t_tmpdir("gcinflight");
	ckpt_store *a = open_node(dir, "node-a", -1);
	save(a, 1, 7);
	save1 *sv;
	REQUIRE(save1_begin(a, 2, &sv) == 0); /* marker made, dedup index loaded */
	ckpt_store *b = open_node(dir, "node-b", -1);
	gc_report *rep = NULL;
	CHECK_OK(delete_step(b, 1, &rep));
	if (rep) {
		CHECK(rep->n_steps_removed == 1);
		CHECK(rep->packs_removed == 0);
		CHECK(rep->packs_spared >= 1);
		CHECK(rep->in_flight && strstr(rep->in_flight, "(save since "));
	}
	gc_report_free(rep);
	CHECK_OK(retain_gc(b, 0.5, 0, &rep));
	if (rep)
		CHECK(rep->packs_removed == 0 && rep->packs_spared >= 1);
	gc_report_free(rep);
	add(sv, 7);
	ckpt_stats st;
	CHECK_OK(save1_commit(sv, &st));
	CHECK(st.chunks_new == 0); /* every chunk from the packs of the deleted step 1 */
	CHECK(restores(b, 2, 7));
	/* Committed: its marker is gone, and nothing it references is garbage. */
	CHECK_OK(retain_gc(b, 0, 0, &rep));
	if (rep)
		CHECK(rep->packs_removed == 0 && rep->packs_spared == 0 && !rep->in_flight);
	gc_report_free(rep);
	CHECK(restores(a, 2, 7));
	ckpt_store_close(b);
	ckpt_store_close(a);
	t_rmrf(dir);
	free(dir);
}

/* Writes a marker of a save of node (pid 4242 on host far) into dir/writers; returns its path. */
static char *fake_marker(const char *dir, const char *node)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/writers", dir);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/writers/00000000deadbeef.writer", dir);
	FILE *f = fopen(p, "w");
	REQUIRE(f);
	fprintf(f, "pid 4242\nhost far\nnode %s\nwhat save\nsince 2020-01-02T03:04:05Z\n", node);
	fclose(f);
	return strdup(p);
}

static void age(const char *p, time_t seconds)
{
	struct timespec t[2] = {{time(NULL) - seconds, 0}, {time(NULL) - seconds, 0}};
	REQUIRE(utimensat(AT_FDCWD, p, t, 0) == 0);
}

/* Markers of dead saves: another node's aged past the grace age, this node's unlocked. */
static void test_dead_markers(void)
{
	char *dir = t_tmpdir("gcinflight");
	ckpt_store *b = open_node(dir, "node-b", -1);
	save(b, 1, 1);
	save(b, 2, 2);
	save(b, 3, 3);
	/* Another node's, refreshed an hour ago: live under the default grace age (six hours). */
	char *m = fake_marker(dir, "node-far");
	age(m, 3600);
	gc_report *rep = NULL;
	CHECK_OK(delete_step(b, 1, &rep));
	if (rep) {
		CHECK(rep->packs_removed == 0 && rep->packs_spared >= 1);
		CHECK(rep->in_flight && !strcmp(rep->in_flight,
						"process 4242 on host far (save since 2020-01-02T03:04:05Z)"));
	}
	gc_report_free(rep);
	CHECK(access(m, F_OK) == 0);
	/* Seven hours: dead; gc removes it and reclaims step 1's packs. */
	age(m, 7 * 3600);
	CHECK_OK(retain_gc(b, 0, 0, &rep));
	if (rep)
		CHECK(rep->packs_removed >= 1 && rep->packs_spared == 0 && !rep->in_flight);
	gc_report_free(rep);
	CHECK(access(m, F_OK) != 0);
	free(m);
	/* This node's, its lock free (its save died): dead at once, whatever its age. */
	m = fake_marker(dir, "node-b");
	CHECK_OK(delete_step(b, 2, &rep));
	if (rep)
		CHECK(rep->packs_removed >= 1 && rep->packs_spared == 0);
	gc_report_free(rep);
	CHECK(access(m, F_OK) != 0);
	free(m);
	/* Grace 0: every other node's marker is dead (an operator who knows the job is gone). */
	m = fake_marker(dir, "node-far");
	ckpt_store *z = open_node(dir, "node-b", 0);
	CHECK_OK(retain_gc(z, 0, 0, &rep));
	if (rep)
		CHECK(rep->packs_spared == 0);
	gc_report_free(rep);
	CHECK(access(m, F_OK) != 0);
	free(m);
	CHECK(restores(b, 3, 3));
	ckpt_store_close(z);
	ckpt_store_close(b);
	t_rmrf(dir);
	free(dir);
}

/* An empty temporary marker ".NAME.PID.NODE.tmp" (its writer killed before the record was
 * written, as t-mpi's kill rounds hit once): of this node and a dead pid, dead at once; of a
 * live pid (in creation), or of another node, live. */
static char *tmp_marker(const char *dir, long pid, const char *node)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/writers", dir);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/writers/.00000000feedf00d.writer.%ld.%s.tmp", dir, pid, node);
	FILE *f = fopen(p, "w");
	REQUIRE(f);
	fclose(f);
	return strdup(p);
}

static void test_tmp_markers(void)
{
	char *dir = t_tmpdir("gcinflight");
	ckpt_store *b = open_node(dir, "node-b", -1);
	save(b, 1, 1);
	save(b, 2, 2);
	pid_t child = fork(); /* a pid that is surely gone: a child reaped */
	REQUIRE(child >= 0);
	if (child == 0)
		_exit(0);
	REQUIRE(waitpid(child, NULL, 0) == child);
	char *live = tmp_marker(dir, (long)getpid(), "node-b");
	gc_report *rep = NULL;
	CHECK_OK(delete_step(b, 1, &rep));
	if (rep)
		CHECK(rep->packs_removed == 0 && rep->packs_spared >= 1);
	gc_report_free(rep);
	CHECK(access(live, F_OK) == 0);
	unlink(live);
	char *far = tmp_marker(dir, (long)child, "node-far"), *dead = tmp_marker(dir, (long)child,
										 "node-b");
	CHECK_OK(retain_gc(b, 0, 0, &rep));
	if (rep)
		CHECK(rep->packs_removed == 0 && rep->packs_spared >= 1); /* the far one is live */
	gc_report_free(rep);
	CHECK(access(dead, F_OK) != 0 && access(far, F_OK) == 0);
	unlink(far);
	CHECK_OK(retain_gc(b, 0, 0, &rep));
	if (rep)
		CHECK(rep->packs_removed >= 1 && rep->packs_spared == 0);
	gc_report_free(rep);
	CHECK(restores(b, 2, 2));
	free(live);
	free(far);
	free(dead);
	ckpt_store_close(b);
	t_rmrf(dir);
	free(dir);
}

/* A save's own marker: there while it is in flight, gone after commit and after abort. */
static void test_marker_lifetime(void)
{
	char *dir = t_tmpdir("gcinflight");
	ckpt_store *a = open_node(dir, "node-a", -1);
	char wdir[4096];
	snprintf(wdir, sizeof wdir, "%s/writers", dir);
	save1 *sv;
	REQUIRE(save1_begin(a, 1, &sv) == 0);
	char *f = t_first_file(wdir, ".writer");
	CHECK(f != NULL);
	add(sv, 1);
	CHECK_OK(save1_commit(sv, NULL));
	CHECK(!f || access(f, F_OK) != 0);
	free(f);
	REQUIRE(save1_begin(a, 2, &sv) == 0);
	f = t_first_file(wdir, ".writer");
	CHECK(f != NULL);
	save1_abort(sv);
	CHECK(!f || access(f, F_OK) != 0);
	free(f);
	ckpt_store_close(a);
	t_rmrf(dir);
	free(dir);
}

static void mkdirs(const char *top, const char *sub, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", top, sub);
	REQUIRE(mkdir(out, 0755) == 0);
}

/* store_mount_check on fake mountinfo files: the options that make flocks node-local, and mounts
 * that do not (local file systems, NFS with local_lock=none or posix, Lustre with flock, a local
 * mount below an NFS one). */
static void test_mountinfo(void)
{
	char *tmp = t_tmpdir("mountinfo"), *top = realpath(tmp, NULL);
	static const struct {
		const char *sub, *type, *opts;
		const char *want; /* in the message, or NULL: no warning */
	} c[] = {
		{"nfsflock", "nfs4", "rw,vers=4.2,rsize=1048576,local_lock=flock,addr=10.0.0.1",
		 "local_lock=flock"},
		{"nfsall", "nfs", "rw,vers=3,local_lock=all,addr=10.0.0.1", "local_lock=all"},
		{"nfsnolock", "nfs", "rw,vers=3,nolock,addr=10.0.0.1", "nolock"},
		{"lustre", "lustre", "rw,localflock,lazystatfs", "localflock"},
		{"with space", "nfs4", "rw,local_lock=flock", "local_lock=flock"},
		{"nfsnone", "nfs4", "rw,vers=4.2,local_lock=none,addr=10.0.0.1", NULL},
		{"nfsposix", "nfs4", "rw,vers=4.2,local_lock=posix", NULL},
		{"lustreflock", "lustre", "rw,flock", NULL},
		{"ext4", "ext4", "rw,nolock_fake,localflock", NULL},
		{"nfsflock/inner", "ext4", "rw", NULL},
	};
	char mi[4096], d[4096];
	snprintf(mi, sizeof mi, "%s/mountinfo", top);
	FILE *f = fopen(mi, "w");
	REQUIRE(f);
	fprintf(f, "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro\n");
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		mkdirs(top, c[i].sub, d, sizeof d);
		char esc[4096];
		size_t k = 0;
		for (const char *p = d; *p && k < sizeof esc - 5; p++)
			k += (size_t)(*p == ' ' ? snprintf(esc + k, 5, "\\040") :
				      snprintf(esc + k, 2, "%c", *p));
		fprintf(f, "%zu 22 0:%zu / %s rw,relatime shared:%zu - %s srv:/export %s\n", 30 + i,
			40 + i, esc, 5 + i, c[i].type, c[i].opts);
	}
	fclose(f);
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		/* A store directory below the mount point is on it too. */
		snprintf(d, sizeof d, "%s/%s/store", top, c[i].sub);
		REQUIRE(mkdir(d, 0755) == 0);
		char *msg = store_mount_check(mi, d);
		if (c[i].want) {
			CHECK(msg && strstr(msg, c[i].want) && strstr(msg, "local to each node"));
		} else if (msg) {
			fprintf(stderr, "%s: unexpected warning: %s\n", c[i].sub, msg);
			CHECK(!msg);
		}
		free(msg);
	}
	CHECK(store_mount_check("/nonexistent/mountinfo", top) == NULL);
	CHECK(store_mount_check(mi, "/nonexistent/dir") == NULL);
	/* The real one: a warning or none, never a failure of the open. */
	snprintf(d, sizeof d, "%s/real", top);
	ckpt_store *s = open_node(d, "n", -1);
	const char *w = ckpt_store_warning(s);
	if (w)
		printf("note: %s\n", w);
	ckpt_store_close(s);
	CHECK(ckpt_store_warning(NULL) == NULL);
	free(top);
	t_rmrf(tmp);
	free(tmp);
}

int main(void)
{
	/* Before any thread: every writer-lock flock of this process succeeds. */
	setenv("CKPT_TEST_LOCAL_LOCK", "1", 1);
	test_live_save();
	test_dead_markers();
	test_tmp_markers();
	test_marker_lifetime();
	test_mountinfo();
	return t_done();
}
