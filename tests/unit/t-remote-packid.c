/* Pack ids a remote may hold are never reused (the bug of a reused id): a pack id names
 * one object on the remote forever, and a push refuses (CKPT_E_CORRUPT) to replace a remote pack
 * with another of the same id. Three ways a local save could pick such an id, each checked to push
 * and restore after the fix:
 *   1. local gc removes the newest pack (its checkpoint deleted) and the next save takes its id;
 *   2. the same for a rank's id range of a multi-rank save (a probe stops in gc's hole);
 *   3. after a node loss, a fresh store adopted from the remote (no packs local) saves anew.
 * And a damaged STORE/packids stops saves, naming it.
 * The remote is $CKPT_TEST_REMOTE (t-remote.h) or a temporary directory. */
#include <inttypes.h>
#include <stdbool.h>

#include "t-dist-tcomm.h"
#include "t-remote.h"

enum { NT = 4, TBYTES = 256 << 10, CHUNK = 64 << 10 };

static uint8_t *data[NT];

static ckpt_store *open_store(const char *path, const char *url)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(path, o, &s) == 0);
	ckpt_options_free(o);
	REQUIRE(rstore_set(s, url, 0) == 0);
	return s;
}

/* A save of one rank as a world of one (part mode: the rank's own pack id range). */
static void dist_save1(ckpt_store *s, uint64_t step)
{
	static struct tc_shared sh;
	static struct tc_rank rk[1];
	tc_init(&sh, rk, 1);
	ckpt_comm comm = tc_comm(&rk[0]);
	dsave *d;
	uint64_t shape[1] = {TBYTES};
	REQUIRE(dsave_begin(s, &comm, step, &d) == 0);
	for (int i = 0; i < NT; i++) {
		char name[16];
		snprintf(name, sizeof name, "t%d", i);
		CHECK_OK(dsave_add_replicated(d, name, CKPT_DTYPE_U8, 1, shape, 0, 1,
						       CKPT_MEM_HOST, data[i]));
	}
	REQUIRE(dsave_commit(d, NULL) == 0);
}

static void save(ckpt_store *s, uint64_t step, bool dist)
{
	if (dist)
		dist_save1(s, step);
	else
		t_remote_save(s, step, data, NT, TBYTES);
}

/* Deletes step locally and collects its packs: the newest pack goes with it. */
static void delete_local(ckpt_store *s, uint64_t step)
{
	gc_report *rep = NULL;
	CHECK_OK(retain_delete(s, &step, 1, NULL, CKPT_GC_NEWEST, &rep));
	CHECK(rep && rep->packs_removed >= 1);
	gc_report_free(rep);
}

/* Every tensor of step (a multi-rank one's replicated tensors are plain tensors) restores as
 * data[] holds it now. */
static void check_step(ckpt_store *s, uint64_t step)
{
	reader1 *r;
	CHECK_OK(reader1_open(s, step, &r));
	if (!r)
		return;
	uint8_t *buf = malloc(TBYTES);
	for (int i = 0; i < NT; i++) {
		char name[16];
		snprintf(name, sizeof name, "t%d", i);
		long k = reader1_find(r, name);
		CHECK(k >= 0);
		memset(buf, 0, TBYTES);
		if (k >= 0)
			CHECK_OK(reader1_restore(r, (size_t)k, CKPT_MEM_HOST, buf, TBYTES));
		CHECK(!memcmp(buf, data[i], TBYTES));
	}
	free(buf);
	reader1_close(r);
}

/* Cases 1 and 2: save 1, save 2 (new data: a new pack), push 2; delete 2 and gc; save 3 (other
 * new data); push 3 must work, and 3 restore from a store adopted from the remote. */
static void gc_reuse(const char *dir, const char *url, bool dist)
{
	char path[4200], path2[4200];
	snprintf(path, sizeof path, "%s/%s", dir, dist ? "dist" : "one");
	snprintf(path2, sizeof path2, "%s/%s-adopted", dir, dist ? "dist" : "one");
	ckpt_store *s = open_store(path, url);
	save(s, 1, dist);
	t_fill(data[1], TBYTES, dist ? 201 : 101);
	save(s, 2, dist);
	CHECK_OK(rstore_push(s, 2, NULL, NULL, NULL));
	delete_local(s, 2);
	ckpt_store_close(s); /* a new handle: nothing remembered but what is on disk */
	s = open_store(path, url);
	t_fill(data[1], TBYTES, dist ? 202 : 102);
	save(s, 3, dist);
	int rc = rstore_push(s, 3, NULL, NULL, NULL);
	if (rc)
		printf("%s: push after gc: %s\n", dist ? "multi-rank" : "one-process", ckpt_errmsg());
	CHECK(rc == 0);
	ckpt_store_close(s);
	t_rmrf(path2);
	CHECK_OK(ckpt_remote_adopt(url, NULL, path2));
	s = open_store(path2, url);
	check_step(s, 3); /* read from the remote */
	ckpt_store_close(s);
	t_rmrf(path);
	t_rmrf(path2);
}

/* Case 3: node loss, a fresh store adopted (nothing local), a new save pushed. */
static void adopt_reuse(const char *dir, const char *url)
{
	char path[4200], path2[4200];
	snprintf(path, sizeof path, "%s/lost", dir);
	snprintf(path2, sizeof path2, "%s/new", dir);
	ckpt_store *s = open_store(path, url);
	save(s, 1, false);
	save(s, 2, true); /* a rank's range too */
	CHECK_OK(rstore_push(s, 1, NULL, NULL, NULL));
	CHECK_OK(rstore_push(s, 2, NULL, NULL, NULL));
	ckpt_store_close(s);
	t_rmrf(path);
	CHECK_OK(ckpt_remote_adopt(url, NULL, path2));
	s = open_store(path2, url);
	t_fill(data[2], TBYTES, 303);
	save(s, 3, false);
	t_fill(data[3], TBYTES, 304);
	save(s, 4, true);
	int rc = rstore_push(s, 3, NULL, NULL, NULL);
	if (rc)
		printf("after adopt: push of 3: %s\n", ckpt_errmsg());
	CHECK(rc == 0);
	rc = rstore_push(s, 4, NULL, NULL, NULL);
	if (rc)
		printf("after adopt: push of 4: %s\n", ckpt_errmsg());
	CHECK(rc == 0);
	ckpt_store_close(s);
	t_rmrf(path2);
	CHECK_OK(ckpt_remote_adopt(url, NULL, path2));
	s = open_store(path2, url);
	check_step(s, 4);
	ckpt_store_close(s);
	t_rmrf(path2);
}

/* A packids file that does not parse stops saves (an id might be reused), naming the file. */
static void damaged_marks(const char *dir, const char *url)
{
	char path[4200], f[4300];
	snprintf(path, sizeof path, "%s/damaged", dir);
	ckpt_store *s = open_store(path, url);
	snprintf(f, sizeof f, "%s/packids", path);
	FILE *fp = fopen(f, "w");
	REQUIRE(fp);
	fputs("0 12\n0 13\n", fp); /* a range twice */
	fclose(fp);
	save1 *sv = NULL;
	int rc = save1_begin(s, 1, &sv);
	if (!rc)
		save1_abort(sv);
	CHECK(rc == -CKPT_E_CORRUPT && strstr(ckpt_errmsg(), "packids"));
	ckpt_store_close(s);
	t_rmrf(path);
}

int main(void)
{
	char *dir = t_tmpdir("remote-packid");
	for (int i = 0; i < NT; i++) {
		data[i] = malloc(TBYTES);
		t_fill(data[i], TBYTES, 7 + (uint64_t)i);
	}
	char *c1, *u1 = t_remote_url("packid-one", &c1);
	gc_reuse(dir, u1, false);
	char *c2, *u2 = t_remote_url("packid-dist", &c2);
	gc_reuse(dir, u2, true);
	char *c3, *u3 = t_remote_url("packid-adopt", &c3);
	adopt_reuse(dir, u3);
	damaged_marks(dir, u3);
	for (int i = 0; i < NT; i++)
		free(data[i]);
	for (char **c = (char *[]){c1, c2, NULL}; *c; c++)
		t_rmrf(*c), free(*c);
	free(u1);
	free(u2);
	return t_remote_done(dir, c3, u3);
}
