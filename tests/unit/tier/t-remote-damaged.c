/* A damaged remote manifest and a missing remote pack, through the API. Three checkpoints
 * pushed, then the newest remote manifest overwritten with junk: a remote prune (dry run or not,
 * both entry points) refuses before removing anything, as a local prune does, with
 * -CKPT_E_CORRUPT naming the damaged key, and the remote keeps every manifest and pack; forced,
 * it removes what the policy drops and keeps the damaged one. A pull of the latest brings the
 * newest intact step back, and the remote list with include_invalid names the step it passed
 * over. A remote pack deleted: verify through the remote reports the damage in the remote object
 * (its key), not in the local pack file. The remote is $CKPT_TEST_REMOTE (t-remote.h) or a
 * temporary directory. */
#include <inttypes.h>

#include "common/common.h"

#include "remote/remote.h"
#include "t-remote.h"
#include "tier/tier.h"

enum { NT = 2, TBYTES = 256 << 10 };

static uint8_t *data[NT];

struct tally {
	int n;
};

static int count(void *arg, const struct rmt_obj *o)
{
	(void)o;
	((struct tally *)arg)->n++;
	return 0;
}

/* Objects under the store's id on the remote. */
static int objects(const struct tier_ref *t)
{
	char prefix[64];
	snprintf(prefix, sizeof prefix, "libckpt1/%s/", t->id);
	struct tally n = {0};
	CHECK_OK(t->r->ops->list(t->r, prefix, count, &n));
	return n.n;
}

static void steps_are(ckpt_store *s, const char *want)
{
	uint64_t *v;
	long n = rstore_steps(s, &v);
	char buf[64] = "";
	size_t l = 0;
	for (long i = 0; i < n; i++)
		l += (size_t)snprintf(buf + l, sizeof buf - l, "%s%" PRIu64, l ? " " : "", v[i]);
	free(v);
	printf("remote holds %s (want %s)\n", buf, want);
	CHECK(!strcmp(buf, want));
}

/* A remote prune refused for the damaged manifest key: nothing removed. */
static void refused(ckpt_store *s, const struct tier_ref *t, const char *key, int flags)
{
	retain_rules r = {.keep = {.keep_last = 1}};
	rgc_report rep;
	uint64_t *removed = NULL;
	int before = objects(t);
	CHECK_RC(rstore_prune_gc(s, &r, flags, &rep, &removed), -CKPT_E_CORRUPT);
	printf("refused (flags %d): %s\n", flags, ckpt_errmsg());
	CHECK(strstr(ckpt_errmsg(), key) != NULL);
	CHECK(removed == NULL);
	retain_keep pol = {.keep_last = 1};
	CHECK_RC(rstore_prune(s, &pol, flags, &rep), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), key) != NULL);
	steps_are(s, "1 2 3");
	CHECK(objects(t) == before);
}

static void on_damage(const ckpt_damage *d, void *arg)
{
	char *file = arg;
	if (!*file)
		snprintf(file, 512, "%s", d->file);
}

/* Verify through the remote after a pack of step 2 is gone there: the damage names the remote
 * key, not the local pack file. */
static void missing_pack(const char *dir, const char *url, const struct tier_ref *t,
			 const uint8_t uuid[16])
{
	struct manifest m;
	uint8_t *raw;
	uint64_t len;
	REQUIRE(tier_fetch_manifest(t, uuid, 2, &m, &raw, &len) == 0);
	free(raw);
	char key[256], file[512] = "";
	tier_key_pack(t, m.chunks[0].pack_id, key, sizeof key);
	manifest_free(&m);
	CHECK_OK(t->r->ops->del(t->r, key));
	ckpt_store *s = t_open_store(dir, 0, 0);
	REQUIRE(rstore_set(s, url, CKPT_REMOTE_READ) == 0);
	reader1 *rd;
	REQUIRE(reader1_open(s, 2, &rd) == 0);
	long bad = reader1_verify(rd, on_damage, NULL, file);
	reader1_close(rd);
	printf("missing pack: %ld damaged, first in %s (want ...%s)\n", bad, file, key);
	CHECK(bad > 0);
	CHECK(strstr(file, key) != NULL);
	ckpt_store_close(s);
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-damaged", &cleanup);
	char *dir = t_tmpdir("remote-damaged-local");
	char *fresh = t_tmpdir("remote-damaged-fresh");
	char *fresh2 = t_tmpdir("remote-damaged-fresh2");
	for (int i = 0; i < NT; i++) {
		data[i] = malloc(TBYTES);
		REQUIRE(data[i]);
	}
	ckpt_store *s = t_open_store(dir, 0, 0);
	REQUIRE(rstore_set(s, url, 0) == 0);
	for (uint64_t step = 1; step <= 3; step++) {
		for (int i = 0; i < NT; i++)
			t_fill(data[i], TBYTES, step * 10 + (uint64_t)i);
		t_remote_save(s, step, data, NT, TBYTES);
		CHECK_OK(rstore_push(s, step, NULL, NULL, NULL));
	}
	struct tier_ref t;
	REQUIRE(rmt_open(url, NULL, &t.r) == 0);
	ckpt_store_id(s, t.id);
	char key[256];
	tier_key_mf(&t, 3, key, sizeof key);
	uint8_t junk[64] = "not a manifest";
	struct rmt_src js = {.buf = junk, .len = sizeof junk};
	CHECK_OK(t.r->ops->del(t.r, key));
	CHECK_OK(t.r->ops->put(t.r, key, &js, 0, NULL, NULL));

	/* Prune refuses before removing anything, dry run or not. */
	refused(s, &t, key, 0);
	refused(s, &t, key, CKPT_GC_DRY_RUN);

	/* Pull of the latest: the newest intact step; the remote list names the one passed over. */
	ckpt_store *f;
	REQUIRE(ckpt_remote_adopt(url, NULL, fresh) == 0);
	REQUIRE(ckpt_store_open(fresh, NULL, &f) == 0);
	REQUIRE(rstore_set(f, url, 0) == 0);
	uint64_t got = 0;
	CHECK_OK(rstore_pull(f, CKPT_STEP_LATEST, &got, NULL, NULL, NULL));
	CHECK(got == 2);
	ckpt_info *list;
	int n = rstore_list(f, 1, &list);
	CHECK(n == 3);
	CHECK(n == 3 && list[2].step == 3 && list[2].error != 0 && !list[1].error);
	printf("pulled %" PRIu64 "; remote step 3 listed with error %d\n", got,
	       n == 3 ? list[2].error : 0);
	if (n > 0)
		ckpt_info_free(list);
	ckpt_store_close(f);

	/* Forced: the policy's choice goes, the damaged manifest stays. */
	retain_rules r = {.keep = {.keep_last = 1}};
	rgc_report rep;
	uint64_t *removed = NULL;
	CHECK_OK(rstore_prune_gc(s, &r, CKPT_GC_FORCE, &rep, &removed));
	CHECK(rep.manifests_removed == 1 && removed && removed[0] == 1);
	free(removed);
	steps_are(s, "2 3");
	uint8_t uuid[16];
	REQUIRE(tier_parse_id(t.id, uuid) == 0);
	ckpt_store_close(s);

	/* A missing remote pack is named by its remote key. */
	REQUIRE(ckpt_remote_adopt(url, NULL, fresh2) == 0);
	missing_pack(fresh2, url, &t, uuid);

	rmt_close(t.r);
	t_rmrf(fresh);
	t_rmrf(fresh2);
	free(fresh);
	free(fresh2);
	for (int i = 0; i < NT; i++)
		free(data[i]);
	return t_remote_done(dir, cleanup, url);
}
