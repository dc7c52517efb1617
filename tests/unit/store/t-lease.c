/* Readers are never broken by gc or prune: a reader that opened a checkpoint reads all
 * of it while prune removes that checkpoint and gc compacts or removes its packs; the packs it
 * needs are deferred and removed by a later gc once it is closed. A lease left by a killed reader
 * defers nothing (its lock died with it). Synchronisation is by pipes and waitpid, never time.
 *
 * Readers of another node: where flock is node-local, gc on node B takes the lock of a
 * reader's lease on node A. CKPT_TEST_LOCAL_LOCK=1 hides the lease locks of readers whose record
 * names another node, as such a mount does, and the two handles are given node identities: the
 * reader's lease keeps its packs through prune and gc while it is fresh (its refresh thread
 * touches it: CKPT_TEST_REFRESH_MS shortens the period), and not once older than the grace age.
 * An older libckpt's lease (no record) is judged by its lock as before, and a reader whose
 * manifest comes from the remote tier takes its lease too. Ages are set with utimensat, not
 * waited for. */
#include <stdbool.h>

#include "helpers.h"

/* lib/store/marker.c, test builds (TLIB): stops the markers' and leases' refreshes. */
void marker_test_pause_refresh(bool on);

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"

enum { NT = 3, TB = 8 * (64 << 10) + 123, CHUNK = 64 << 10, STEPS = 5 };

static void data_for(uint8_t *buf, uint64_t step, int t)
{
	/* Half of each tensor changes every step: packs shared across steps, compaction has work. */
	t_fill(buf, TB, (uint64_t)t);
	t_fill(buf + (step % 2) * (TB / 2), TB / 2, step * 100 + (uint64_t)t);
}

static ckpt_store *open_small(const char *dir)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 8 << 20);
	ckpt_options_set(o, CKPT_OPT_PACK_SIZE, 1 << 20);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	return s;
}

static void build(const char *dir)
{
	ckpt_store *s = open_small(dir);
	uint8_t *buf[NT];
	uint64_t shape[1] = {TB};
	for (int t = 0; t < NT; t++)
		buf[t] = malloc(TB);
	for (uint64_t step = 1; step <= STEPS; step++) {
		save1 *sv;
		REQUIRE(save1_begin(s, step, &sv) == 0);
		for (int t = 0; t < NT; t++) {
			char nm[16];
			snprintf(nm, sizeof nm, "w%d", t);
			data_for(buf[t], step, t);
			REQUIRE(save1_add_tensor(sv, nm, CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST,
						     buf[t]) == 0);
		}
		REQUIRE(save1_commit(sv, NULL) == 0);
	}
	for (int t = 0; t < NT; t++)
		free(buf[t]);
	ckpt_store_close(s);
}

/* Restores every tensor of r and compares; returns the number of failures. */
static int restore_all(reader1 *r, uint64_t step)
{
	uint8_t *want = malloc(TB), *got = malloc(TB);
	int bad = 0;
	for (int t = 0; t < NT; t++) {
		char nm[16];
		snprintf(nm, sizeof nm, "w%d", t);
		data_for(want, step, t);
		int rc = reader1_restore(r, (size_t)reader1_find(r, nm), CKPT_MEM_HOST, got, TB);
		if (rc || memcmp(want, got, TB)) {
			fprintf(stderr, "step %llu %s: %s\n", (unsigned long long)step, nm,
				rc ? ckpt_errmsg() : "bytes differ");
			bad++;
		}
	}
	if (reader1_verify(r, NULL, NULL, NULL) != 0)
		bad++;
	free(want);
	free(got);
	return bad;
}

/* Restores the newest checkpoint through s and compares; returns the number of failures. */
static int newest_restores(ckpt_store *s)
{
	reader1 *r;
	REQUIRE(reader1_open(s, STEPS, &r) == 0);
	int bad = restore_all(r, STEPS);
	reader1_close(r);
	return bad;
}

static int count_leases(const char *dir)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/leases", dir);
	DIR *d = opendir(p);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* Open readers of the oldest and of a middle checkpoint, then prune to the newest and gc with
 * compaction to completion: both readers still restore everything byte-exact. */
static void readers_survive(void)
{
	char *dir = t_tmpdir("lease");
	build(dir);
	/* The readers' handle is read-only, as ckptctl verify and export open theirs. */
	ckpt_options *ro = ckpt_options_create();
	ckpt_options_set(ro, CKPT_OPT_READ_ONLY, 1);
	ckpt_store *rs, *gs = open_small(dir);
	REQUIRE(ckpt_store_open(dir, ro, &rs) == 0);
	ckpt_options_free(ro);
	reader1 *r1, *r3;
	REQUIRE(reader1_open(rs, 1, &r1) == 0);
	REQUIRE(reader1_open(rs, 3, &r3) == 0);
	CHECK(count_leases(dir) == 2);
	retain_keep pol = {.keep_last = 1};
	gc_report *rep = NULL;
	CHECK_OK(retain_prune(gs, &pol, 0, &rep));
	CHECK(rep && rep->n_steps_removed == STEPS - 1 && rep->packs_deferred > 0);
	gc_report_free(rep);
	CHECK_OK(retain_gc(gs, 0.99, 0, &rep));
	CHECK(rep && rep->packs_deferred > 0);
	gc_report_free(rep);
	CHECK(restore_all(r1, 1) == 0);
	CHECK(restore_all(r3, 3) == 0);
	reader1_close(r1);
	reader1_close(r3);
	CHECK(count_leases(dir) == 0);
	/* Closed: the next gc removes what was deferred, and the store is clean. */
	CHECK_OK(retain_gc(gs, 0.99, 0, &rep));
	CHECK(rep && rep->packs_deferred == 0 && rep->packs_removed > 0);
	gc_report_free(rep);
	ckpt_du *du;
	CHECK_OK(ckpt_store_du(gs, &du));
	CHECK(du->garbage_bytes == 0);
	ckpt_du_free(du);
	CHECK(newest_restores(rs) == 0);
	ckpt_store_close(rs);
	ckpt_store_close(gs);
	t_rmrf(dir);
	free(dir);
}

/* A reader killed while open leaves its lease file, but not its lock: gc removes the lease and
 * defers nothing. */
static void killed_reader(void)
{
	char *dir = t_tmpdir("leasek");
	build(dir);
	int pfd[2];
	REQUIRE(pipe(pfd) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		ckpt_store *s = open_small(dir);
		reader1 *r;
		if (reader1_open(s, 1, &r))
			_exit(2);
		if (write(pfd[1], "x", 1) != 1)
			_exit(3);
		raise(SIGKILL);
	}
	close(pfd[1]);
	char c;
	REQUIRE(read(pfd[0], &c, 1) == 1);
	close(pfd[0]);
	int st;
	REQUIRE(waitpid(pid, &st, 0) == pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK(count_leases(dir) == 1);
	ckpt_store *s = open_small(dir);
	retain_keep pol = {.keep_last = 1};
	gc_report *rep = NULL;
	CHECK_OK(retain_prune(s, &pol, 0, &rep));
	CHECK(rep && rep->packs_deferred == 0 && rep->packs_removed > 0);
	gc_report_free(rep);
	CHECK(count_leases(dir) == 0);
	CHECK_OK(retain_gc(s, 0.99, 0, &rep));
	CHECK(rep && rep->packs_deferred == 0);
	gc_report_free(rep);
	CHECK(newest_restores(s) == 0);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

/* s as a handle of node (its boot id otherwise): which leases it judges by their lock. */
static ckpt_store *on_node(ckpt_store *s, const char *node)
{
	snprintf(s->lock.node, sizeof s->lock.node, "%s", node);
	return s;
}

static void age(const char *p, time_t seconds)
{
	struct timespec t[2] = {{time(NULL) - seconds, 0}, {time(NULL) - seconds, 0}};
	REQUIRE(utimensat(AT_FDCWD, p, t, 0) == 0);
}

static time_t mtime_of(const char *p)
{
	struct stat st;
	return stat(p, &st) ? 0 : st.st_mtime;
}

/* Whether the file p contains text. */
static bool holds(const char *p, const char *text)
{
	char buf[4096];
	FILE *f = fopen(p, "r");
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	return strstr(buf, text) != NULL;
}

/* A reader on node A, gc and prune on node B, whose flock does not see A's locks. */
static void other_node_reader(void)
{
	char *dir = t_tmpdir("leasen"), ld[4096], want[64];
	build(dir);
	snprintf(ld, sizeof ld, "%s/leases", dir);
	ckpt_store *a = on_node(open_small(dir), "node-a"), *b = on_node(open_small(dir), "node-b");
	setenv("CKPT_TEST_LOCAL_LOCK", "1", 1);
	reader1 *r1;
	REQUIRE(reader1_open(a, 2, &r1) == 0);
	char *lp = t_first_file(ld, ".lease");
	REQUIRE(lp);
	snprintf(want, sizeof want, "\npid %ld\n", (long)getpid());
	CHECK(holds(lp, "packs ") && holds(lp, "\nend\n") && holds(lp, want) &&
	      holds(lp, "\nnode node-a\n") && holds(lp, "\nwhat reader of step 2\n"));
	retain_keep pol = {.keep_last = 1};
	gc_report *rep = NULL;
	CHECK_OK(retain_prune(b, &pol, 0, &rep));
	snprintf(want, sizeof want, "process %ld on host ", (long)getpid());
	CHECK(rep && rep->n_steps_removed == STEPS - 1 && rep->packs_deferred > 0);
	CHECK(rep && rep->reader && strstr(rep->reader, want) &&
	      strstr(rep->reader, "(reader of step 2 since "));
	gc_report_free(rep);
	CHECK_OK(retain_gc(b, 0.99, 0, &rep));
	CHECK(rep && rep->packs_deferred > 0);
	gc_report_free(rep);
	CHECK(restore_all(r1, 2) == 0);
	/* Its process refreshes it: an hour old now, fresh again soon. */
	age(lp, 3600);
	for (int i = 0; i < 1000 && mtime_of(lp) < time(NULL) - 60; i++)
		usleep(10000);
	CHECK(mtime_of(lp) >= time(NULL) - 60);
	/* Older than the grace age (the reader's node stopped refreshing it): dead, removed. The
	 * refresh thread is paused first, or a touch between the aging and gc makes it fresh. */
	marker_test_pause_refresh(true);
	age(lp, 7 * 3600);
	CHECK_OK(retain_gc(b, 0.99, 0, &rep));
	marker_test_pause_refresh(false);
	CHECK(rep && rep->packs_deferred == 0 && rep->packs_removed > 0 && !rep->reader);
	gc_report_free(rep);
	CHECK(count_leases(dir) == 0);
	reader1_close(r1);
	unsetenv("CKPT_TEST_LOCAL_LOCK");
	CHECK(newest_restores(b) == 0);
	free(lp);
	ckpt_store_close(a);
	ckpt_store_close(b);
	t_rmrf(dir);
	free(dir);
}

/* Writes dir/leases/<name> with text; returns its path (malloc'd). */
static char *fake_lease(const char *dir, const char *name, const char *text)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/leases", dir);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/leases/%s", dir, name);
	FILE *f = fopen(p, "w");
	REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0);
	return strdup(p);
}

/* An older libckpt's lease (no record) counts while locked, as before; a lease being written
 * (no complete head or record) while locked or younger than the grace age. */
static void unrecorded_leases(void)
{
	char *dir = t_tmpdir("leaseo");
	build(dir);
	ckpt_store *s = open_small(dir);
	char *old = fake_lease(dir, "00000000000000aa.lease", "pending\n");
	int fd = open(old, O_RDONLY);
	REQUIRE(fd >= 0 && flock(fd, LOCK_SH) == 0);
	age(old, 7 * 3600); /* an old libckpt does not refresh it: its lock says it lives */
	retain_keep pol = {.keep_last = 1};
	gc_report *rep = NULL;
	CHECK_OK(retain_prune(s, &pol, 0, &rep));
	CHECK(rep && rep->packs_deferred > 0 && rep->packs_removed == 0);
	CHECK(rep && rep->reader && strstr(rep->reader, "00000000000000aa.lease (its reader not "));
	gc_report_free(rep);
	close(fd); /* its reader gone */
	char *half = fake_lease(dir, "00000000000000bb.lease", "packs 3\n1\n");
	CHECK_OK(retain_gc(s, 0, 0, &rep));
	CHECK(rep && rep->packs_deferred > 0 && rep->packs_removed == 0);
	gc_report_free(rep);
	CHECK(access(old, F_OK) != 0 && access(half, F_OK) == 0);
	age(half, 7 * 3600);
	CHECK_OK(retain_gc(s, 0, 0, &rep));
	CHECK(rep && rep->packs_deferred == 0 && rep->packs_removed > 0);
	gc_report_free(rep);
	CHECK(count_leases(dir) == 0);
	free(old);
	free(half);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
}

/* A reader whose manifest comes from the remote tier (the checkpoint is not local) takes its
 * lease as any reader does, with its record. */
static void remote_reader(void)
{
	char *dir = t_tmpdir("leaser"), *remote = t_tmpdir("leaser-remote"), a[4200], b[4200];
	snprintf(a, sizeof a, "%s/a", dir);
	snprintf(b, sizeof b, "%s/b", dir);
	build(a);
	ckpt_store *s = open_small(a);
	char *url = realpath(remote, NULL);
	REQUIRE(url && rstore_set(s, url, 0) == 0);
	CHECK_OK(rstore_push(s, STEPS, NULL, NULL, NULL));
	ckpt_store_close(s);
	REQUIRE(ckpt_remote_adopt(url, NULL, b) == 0);
	REQUIRE(ckpt_store_open(b, NULL, &s) == 0 && rstore_set(s, url, 0) == 0);
	reader1 *r;
	REQUIRE(reader1_open(s, STEPS, &r) == 0);
	char ld[4300], want[64];
	snprintf(ld, sizeof ld, "%s/leases", b);
	char *lp = t_first_file(ld, ".lease");
	snprintf(want, sizeof want, "\nwhat reader of step %d\n", STEPS);
	CHECK(lp && holds(lp, want) && holds(lp, "\nnode "));
	CHECK(restore_all(r, STEPS) == 0);
	reader1_close(r);
	CHECK(count_leases(b) == 0);
	free(lp);
	free(url);
	ckpt_store_close(s);
	t_rmrf(dir);
	t_rmrf(remote);
	free(dir);
	free(remote);
}

int main(void)
{
	setenv("CKPT_TEST_REFRESH_MS", "20", 1); /* read once, when the refresh thread starts */
	readers_survive();
	killed_reader();
	other_node_reader();
	unrecorded_leases();
	remote_reader();
	return t_done();
}
