/* The background upload (CKPT_REMOTE_UPLOAD): a save commits while the previous
 * checkpoint is still uploading (the local store is never held by the remote); the state goes
 * uploading -> remote and rstore_wait_uploaded waits for it (or times out with BUSY); a close
 * cancels the upload in flight and the next open resumes it. Then kill -9 at random points of an
 * upload, 50 trials (CKPT_TEST_KILL_TRIALS): after each, every checkpoint the remote lists has
 * every pack it references there whole, and the next upload completes. The remote is
 * $CKPT_TEST_REMOTE (t-remote.h) or a temporary directory. */
#include <inttypes.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "common/common.h"
#include "remote/remote.h"
#include "t-remote.h"
#include "tier/tier.h"

enum { NT = 8, TBYTES = 2 << 20, CHUNK = 256 << 10 };

static uint8_t *data[NT];

static void save(ckpt_store *s, uint64_t step)
{
	t_remote_save(s, step, data, NT, TBYTES);
}

static ckpt_store *open_store(const char *path, int64_t bandwidth)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_THREADS, 2);
	ckpt_options_set(o, CKPT_OPT_REMOTE_BANDWIDTH, bandwidth);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(path, o, &s) == 0);
	ckpt_options_free(o);
	return s;
}

/* Uploading does not hold saves; states and waits; a close cancels, a reopen resumes. */
static void background(const char *path, const char *url)
{
	ckpt_store *s = open_store(path, 4 << 20); /* 16 MiB a step: about 4 s */
	REQUIRE(rstore_set(s, url, CKPT_REMOTE_UPLOAD) == 0);
	save(s, 1);
	CHECK(rstore_upload_state(s, 1) == CKPT_UPLOAD_UPLOADING);
	t_fill(data[0], TBYTES, 42);
	save(s, 2);
	CHECK(rstore_upload_state(s, 1) == CKPT_UPLOAD_UPLOADING); /* the save did not wait */
	CHECK(rstore_upload_state(s, 2) == CKPT_UPLOAD_UPLOADING);
	CHECK_RC(rstore_wait_uploaded(s, 2, 0), -CKPT_E_BUSY);
	CHECK_OK(rstore_wait_uploaded(s, CKPT_STEP_LATEST, 120000));
	CHECK(rstore_upload_state(s, 1) == CKPT_UPLOAD_REMOTE);
	CHECK(rstore_upload_state(s, 2) == CKPT_UPLOAD_REMOTE);
	CHECK_OK(rstore_wait_uploaded(s, 1, 0));
	/* Closed mid-upload: canceled, not listed; the next open resumes it. */
	t_fill(data[1], TBYTES, 43);
	save(s, 3);
	ckpt_store_close(s);
	s = open_store(path, 0);
	REQUIRE(rstore_set(s, url, 0) == 0);
	CHECK(rstore_upload_state(s, 3) == CKPT_UPLOAD_LOCAL);
	CHECK_RC(rstore_wait_uploaded(s, 3, 0), -CKPT_E_STATE);
	REQUIRE(rstore_set(s, url, CKPT_REMOTE_UPLOAD) == 0);
	CHECK_OK(rstore_wait_uploaded(s, 3, 60000));
	CHECK(rstore_upload_state(s, 3) == CKPT_UPLOAD_REMOTE);
	ckpt_store_close(s);
}

/* Every checkpoint the remote lists has each pack it names there at its local size. */
static void check_whole(ckpt_store *s, const char *url)
{
	struct tier_ref t;
	REQUIRE(rmt_open(url, NULL, &t.r) == 0);
	tier_id_of(((struct ckpt_store *)s)->hdr.uuid, t.id);
	uint64_t *steps;
	long n = tier_remote_steps(&t, &steps);
	CHECK(n >= 0);
	for (long i = 0; i < n; i++) {
		struct manifest m;
		uint8_t *raw;
		uint64_t rl;
		CHECK_OK(tier_fetch_manifest(&t, ((struct ckpt_store *)s)->hdr.uuid, steps[i], &m, &raw, &rl));
		uint32_t *ids;
		long np = tier_packs_of(&m, &ids);
		for (long k = 0; k < np; k++) {
			char key[256], local[4096];
			uint64_t size = 0;
			struct stat st;
			tier_key_pack(&t, ids[k], key, sizeof key);
			store_pack_path((struct ckpt_store *)s, 0, ids[k], local, sizeof local);
			CHECK_OK(t.r->ops->stat(t.r, key, &size, NULL));
			CHECK(!stat(local, &st) && (uint64_t)st.st_size == size);
		}
		free(ids);
		free(raw);
		manifest_free(&m);
	}
	free(steps);
	rmt_close(t.r);
}

struct keys {
	char **k;
	size_t n, cap;
};

static int collect(void *arg, const struct rmt_obj *o)
{
	struct keys *ks = arg;
	if (ckpt_grow((void **)&ks->k, &ks->cap, ks->n + 1, sizeof *ks->k))
		return -1;
	ks->k[ks->n++] = strdup(o->key);
	return 0;
}

/* Removes what a trial put on the remote once it is checked: 50 trials of whole uploads would
 * otherwise fill an S3 server whose data lives in RAM (radosgw on memstore). Listed first, then
 * deleted, so that no listing page moves under the deletions. */
static void drop_remote(const char *url)
{
	struct rmt *r;
	struct keys ks = {0};
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	CHECK_OK(r->ops->list(r, "", collect, &ks));
	for (size_t i = 0; i < ks.n; i++) {
		CHECK(ks.k[i] && r->ops->del(r, ks.k[i]) == 0);
		free(ks.k[i]);
	}
	free(ks.k);
	rmt_close(r);
}

/* The child of a trial: uploads everything, until killed. */
static void upload_child(const char *path, const char *url)
{
	ckpt_store *s = open_store(path, 96 << 20);
	if (rstore_set(s, url, CKPT_REMOTE_UPLOAD))
		_exit(3);
	int rc = rstore_wait_uploaded(s, CKPT_STEP_LATEST, 60000);
	ckpt_store_close(s);
	_exit(rc ? 4 : 0);
}

static void kills(const char *path, const char *url_base, int trials, uint64_t seed)
{
	int finished = 0;
	for (int i = 0; i < trials; i++) {
		char url[8400], name[16];
		snprintf(name, sizeof name, "k%d", i);
		t_remote_sub(url_base, name, url, sizeof url);
		long us = (long)(t_rand(&seed) % 400000); /* a whole upload takes about 0.3 s */
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0)
			upload_child(path, url);
		struct timespec ts = {0, us * 1000}; /* the kill's moment, not a wait for a condition */
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		int status;
		waitpid(pid, &status, 0);
		finished += WIFEXITED(status);
		CHECK(!WIFEXITED(status) || WEXITSTATUS(status) == 0);
		ckpt_store *s = open_store(path, 0);
		check_whole(s, url); /* never a partial checkpoint */
		REQUIRE(rstore_set(s, url, CKPT_REMOTE_UPLOAD) == 0);
		CHECK_OK(rstore_wait_uploaded(s, CKPT_STEP_LATEST, 60000));
		for (uint64_t step = 1; step <= 3; step++)
			CHECK(rstore_upload_state(s, step) == CKPT_UPLOAD_REMOTE);
		check_whole(s, url);
		ckpt_store_close(s);
		drop_remote(url);
	}
	printf("%d kill trials, %d uploads finished before their kill\n", trials, finished);
	CHECK(finished < trials); /* the kills landed inside uploads */
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-upload", &cleanup);
	char *dir = t_tmpdir("remote-upload-local");
	char path[4200];
	snprintf(path, sizeof path, "%s/s", dir);
	for (int i = 0; i < NT; i++) {
		data[i] = malloc(TBYTES);
		t_fill(data[i], TBYTES, 21 + (uint64_t)i);
	}
	char bg[8400];
	t_remote_sub(url, "bg", bg, sizeof bg);
	background(path, bg);
	const char *e = getenv("CKPT_TEST_KILL_TRIALS");
	int trials = e ? atoi(e) : 50;
	uint64_t seed = getenv("CKPT_TEST_SEED") ? strtoull(getenv("CKPT_TEST_SEED"), NULL, 10)
						  : (uint64_t)time(NULL);
	printf("seed %" PRIu64 "\n", seed);
	kills(path, url, trials, seed);
	for (int i = 0; i < NT; i++)
		free(data[i]);
	return t_remote_done(dir, cleanup, url);
}
