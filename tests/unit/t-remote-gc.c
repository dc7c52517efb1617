/* Remote prune and gc with two stores on one remote: A's prune removes its old
 * checkpoints and gc their packs, a dry run changes nothing, and B's objects (same prefix) are all
 * still there and B's checkpoints pull back intact, as do A's kept ones; an upload in flight (a
 * live upload marker) keeps its packs from gc until the marker is dead; a damaged remote manifest
 * stops gc (nothing removed) unless forced. The remote is $CKPT_TEST_REMOTE (t-remote.h) or a
 * temporary directory. */
#include <inttypes.h>
#include <sys/stat.h>

#include "common/common.h"

#include "remote/remote.h"
#include "t-remote.h"
#include "tier/tier.h"

enum { NT = 4, TBYTES = 512 << 10, CHUNK = 64 << 10 };

static uint8_t *data[NT];

static void save(ckpt_store *s, uint64_t step)
{
	t_remote_save(s, step, data, NT, TBYTES);
}

static ckpt_store *open_store(const char *path, const char *url, int64_t grace)
{
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_GC_GRACE_S, grace);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(path, o, &s) == 0);
	ckpt_options_free(o);
	REQUIRE(rstore_set(s, url, 0) == 0);
	return s;
}

struct tally {
	int n;
	uint64_t bytes;
};

static int count(void *arg, const struct rmt_obj *o)
{
	struct tally *t = arg;
	t->n++;
	t->bytes += o->size;
	return 0;
}

/* Objects under store s's id. */
static struct tally objects(const char *url, ckpt_store *s)
{
	struct rmt *r;
	REQUIRE(rmt_open(url, NULL, &r) == 0);
	char id[33], prefix[64];
	ckpt_store_id(s, id);
	snprintf(prefix, sizeof prefix, "libckpt1/%s/", id);
	struct tally t = {0};
	CHECK_OK(r->ops->list(r, prefix, count, &t));
	rmt_close(r);
	return t;
}

/* Every checkpoint of s on the remote pulls into a fresh store and verifies. */
static void pulls_back(const char *url, ckpt_store *s, const char *fresh, long want)
{
	char id[33];
	ckpt_store_id(s, id);
	t_rmrf(fresh);
	CHECK_OK(ckpt_remote_adopt(url, id, fresh));
	ckpt_store *f;
	REQUIRE(ckpt_store_open(fresh, NULL, &f) == 0);
	REQUIRE(rstore_set(f, url, 0) == 0);
	uint64_t *steps;
	long n = rstore_steps(f, &steps);
	CHECK(n == want);
	for (long i = 0; i < n; i++) {
		CHECK_OK(rstore_pull(f, steps[i], NULL, NULL, NULL, NULL));
		reader1 *r;
		CHECK_OK(reader1_open(f, steps[i], &r));
		CHECK(r && reader1_verify(r, NULL, NULL, NULL) == 0);
		reader1_close(r);
	}
	free(steps);
	ckpt_store_close(f);
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-gc", &cleanup);
	char *dir = t_tmpdir("remote-gc-local");
	char pa[4200], pb[4200], fresh[4200];
	snprintf(pa, sizeof pa, "%s/a", dir);
	snprintf(pb, sizeof pb, "%s/b", dir);
	snprintf(fresh, sizeof fresh, "%s/fresh", dir);
	for (int i = 0; i < NT; i++) {
		data[i] = malloc(TBYTES);
		t_fill(data[i], TBYTES, 3 + (uint64_t)i);
	}
	ckpt_store *a = open_store(pa, url, 3600), *b = open_store(pb, url, 3600);
	for (uint64_t step = 1; step <= 4; step++) {
		t_fill(data[0], TBYTES, 100 + step); /* each step a new pack, the last one's garbage */
		save(a, step);
		CHECK_OK(rstore_push(a, step, NULL, NULL, NULL));
	}
	for (uint64_t step = 1; step <= 2; step++) {
		t_fill(data[0], TBYTES, 500 + step);
		save(b, step);
		CHECK_OK(rstore_push(b, step, NULL, NULL, NULL));
	}
	struct tally b0 = objects(url, b), a0 = objects(url, a);

	/* A dry run counts and removes nothing. */
	retain_keep pol = {.keep_last = 2};
	rgc_report rep;
	CHECK_OK(rstore_prune(a, &pol, CKPT_GC_DRY_RUN, &rep));
	CHECK(rep.manifests_removed == 2);
	struct tally a1 = objects(url, a);
	CHECK(a1.n == a0.n && a1.bytes == a0.bytes);
	/* The prune, then its gc: A's old checkpoints and packs go, B's objects all stay. */
	CHECK_OK(rstore_prune(a, &pol, 0, &rep));
	printf("prune: %" PRIu64 " checkpoints, %" PRIu64 " packs (%" PRIu64 " bytes) removed\n",
	       rep.manifests_removed, rep.packs_removed, rep.bytes_freed);
	CHECK(rep.manifests_removed == 2 && rep.packs_removed >= 1 && rep.packs_spared == 0);
	struct tally b1 = objects(url, b);
	CHECK(b1.n == b0.n && b1.bytes == b0.bytes);
	struct tally a2 = objects(url, a);
	CHECK(a2.bytes + rep.bytes_freed < a0.bytes && a2.n < a0.n); /* packs and manifests gone */
	CHECK_OK(rstore_gc(b, 0, &rep));
	CHECK(rep.packs_removed == 0); /* B's gc finds nothing of B's to remove, and leaves A's */
	pulls_back(url, a, fresh, 2);
	pulls_back(url, b, fresh, 2);

	/* An upload in flight: its pack is there before its manifest, and its marker is live. */
	t_fill(data[1], TBYTES, 999);
	save(a, 5);
	struct tier_ref t = {0};
	REQUIRE(rmt_open(url, NULL, &t.r) == 0);
	ckpt_store_id(a, t.id);
	char mark[256], key[256], local[4300];
	CHECK_OK(tier_mark_upload(&t, mark, sizeof mark));
	struct manifest m;
	REQUIRE(store_load_manifest((struct ckpt_store *)a, 5, &m) == 0);
	uint32_t newest = 0;
	for (uint32_t i = 0; i < m.n_chunks; i++)
		newest = MAX(newest, m.chunks[i].pack_id);
	manifest_free(&m);
	store_pack_path((struct ckpt_store *)a, 0, newest, local, sizeof local);
	FILE *lf = fopen(local, "rb");
	REQUIRE(lf);
	int fd = fileno(lf);
	struct stat st;
	REQUIRE(fstat(fd, &st) == 0);
	struct rmt_src src = {.fd = fd, .len = (uint64_t)st.st_size};
	tier_key_pack(&t, newest, key, sizeof key);
	CHECK_OK(t.r->ops->put(t.r, key, &src, 0, NULL, NULL));
	fclose(lf);
	CHECK_OK(rstore_gc(a, 0, &rep));
	CHECK(rep.packs_spared == 1 && rep.uploads_in_flight == 1 && rep.packs_removed == 0);
	uint64_t size;
	CHECK_OK(t.r->ops->stat(t.r, key, &size, NULL));
	/* The upload finished: the manifest names the pack, gc keeps it. */
	CHECK_OK(rstore_push(a, 5, NULL, NULL, NULL));
	tier_unmark_upload(&t, mark);
	CHECK_OK(rstore_gc(a, 0, &rep));
	CHECK(rep.packs_removed == 0 && rep.uploads_in_flight == 0);
	CHECK_OK(t.r->ops->stat(t.r, key, &size, NULL));
	/* A killed push's marker is dead after the grace age (0 here): gc goes on. */
	ckpt_store_close(a);
	a = open_store(pa, url, 0);
	CHECK_OK(tier_mark_upload(&t, mark, sizeof mark));
	CHECK_OK(rstore_gc(a, 0, &rep));
	CHECK(rep.uploads_in_flight == 0);

	/* A damaged remote manifest of A: gc removes nothing unless forced. */
	tier_key_mf(&t, 3, key, sizeof key);
	uint8_t junk[64] = "not a manifest";
	struct rmt_src js = {.buf = junk, .len = sizeof junk};
	CHECK_OK(t.r->ops->put(t.r, key, &js, 0, NULL, NULL));
	CHECK_RC(rstore_gc(a, 0, &rep), -CKPT_E_CORRUPT);
	printf("damaged: %s\n", ckpt_errmsg());
	CHECK(rep.packs_removed == 0);
	CHECK_OK(rstore_gc(a, CKPT_GC_FORCE, &rep));
	pol.keep_last = 1; /* a damaged manifest is never pruned */
	CHECK_OK(rstore_prune(a, &pol, CKPT_GC_FORCE, &rep));
	CHECK(!t.r->ops->stat(t.r, key, &size, NULL));
	rmt_close(t.r);
	ckpt_store_close(a);
	ckpt_store_close(b);
	for (int i = 0; i < NT; i++)
		free(data[i]);
	return t_remote_done(dir, cleanup, url);
}
