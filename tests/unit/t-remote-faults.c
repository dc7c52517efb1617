/* Faults of the remote during a push: a put that fails at every position of an upload
 * (an I/O error: the remote dies mid-upload), a remote that fills up (ENOSPC from some put on),
 * each failing the push with the error naming the object, the remote never listing the
 * checkpoint, and the next push completing and pulling back intact. The faults are a wrapper
 * around the real remote ($CKPT_TEST_REMOTE or a directory), so they apply to every backend. */
#include <inttypes.h>

#include "common/common.h"
#include "remote/remote.h"
#include "t-remote.h"
#include "tier/tier.h"

enum { NT = 6, TBYTES = 600 << 10, CHUNK = 64 << 10 };

struct frmt {
	struct rmt base;
	struct rmt *in;
	int puts;     /* puts so far */
	int fail_at;  /* this put (from 1) fails; 0: none */
	int full_at;  /* this put and every later one finds the remote full; 0: never */
};

static struct frmt *FR(struct rmt *r) { return (struct frmt *)(void *)r; }

static int w_put(struct rmt *r, const char *key, const struct rmt_src *src, unsigned flags,
		 rmt_progress_cb progress, void *arg)
{
	struct frmt *f = FR(r);
	int n = __atomic_add_fetch(&f->puts, 1, __ATOMIC_SEQ_CST);
	if (f->fail_at && n == f->fail_at)
		return ckpt_fail(CKPT_E_IO, "put %s: connection reset by peer (injected)", key);
	if (f->full_at && n >= f->full_at)
		return ckpt_fail(CKPT_E_NOSPC, "put %s: no space left on device (injected)", key);
	return f->in->ops->put(f->in, key, src, flags, progress, arg);
}
static int w_get(struct rmt *r, const char *key, uint64_t off, uint64_t len, void *buf)
{
	return FR(r)->in->ops->get(FR(r)->in, key, off, len, buf);
}
static int w_stat(struct rmt *r, const char *key, uint64_t *size, int64_t *mtime)
{
	return FR(r)->in->ops->stat(FR(r)->in, key, size, mtime);
}
static int w_list(struct rmt *r, const char *prefix, rmt_list_cb cb, void *arg)
{
	return FR(r)->in->ops->list(FR(r)->in, prefix, cb, arg);
}
static int w_del(struct rmt *r, const char *key) { return FR(r)->in->ops->del(FR(r)->in, key); }
static unsigned w_caps(struct rmt *r) { return FR(r)->in->ops->caps(FR(r)->in); }

static const struct rmt_ops wrap_ops = {
	.scheme = "fault", .caps = w_caps, .put = w_put, .get = w_get, .stat = w_stat,
	.list = w_list, .del = w_del,
};

static void save(ckpt_store *s, uint64_t step, uint8_t **data)
{
	t_remote_save(s, step, data, NT, TBYTES);
}

static int count_key(void *arg, const struct rmt_obj *o)
{
	(void)o;
	++*(int *)arg;
	return 0;
}

static bool remote_lists(const struct tier_ref *t, uint64_t step)
{
	uint64_t *steps;
	long n = tier_remote_steps(t, &steps);
	bool found = false;
	for (long i = 0; i < n; i++)
		found |= steps[i] == step;
	free(steps);
	return found;
}

int main(void)
{
	char *cleanup, *url = t_remote_url("remote-faults", &cleanup);
	char *dir = t_tmpdir("remote-faults-local");
	uint8_t *data[NT];
	for (int i = 0; i < NT; i++) {
		data[i] = malloc(TBYTES);
		t_fill(data[i], TBYTES, 5 + (uint64_t)i);
	}
	/* Small packs, so that one checkpoint is several puts. */
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK);
	ckpt_options_set(o, CKPT_OPT_PACK_SIZE, 1 << 20);
	ckpt_options_set(o, CKPT_OPT_THREADS, 1);
	ckpt_store *s;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	struct frmt f = {.base = {.ops = &wrap_ops, .url = url}};
	REQUIRE(rmt_open(url, NULL, &f.in) == 0);
	f.base.cfg = f.in->cfg;
	f.base.cfg.parallel = 1; /* puts in a known order */
	struct tier_ref t = {.r = &f.base};
	tier_id_of(((struct ckpt_store *)s)->hdr.uuid, t.id);

	save(s, 1, data);
	CHECK_OK(tier_push(s, &t, 1, NULL, NULL, NULL, NULL));
	/* A put failing at each position of an upload of three new packs (header, writer record,
	 * upload marker, packs, manifest: 7 puts): the push fails naming the object, the
	 * checkpoint is not listed, and the next push completes. */
	int total = 7;
	for (int at = 1; at <= total; at++) {
		uint64_t step = 10 * (uint64_t)at;
		for (int k = 0; k < 3; k++) { /* three saves, each one new pack */
			t_fill(data[k], TBYTES, 100 + (uint64_t)(at * 3 + k));
			save(s, step + (uint64_t)k, data);
		}
		step += 2;
		f.puts = 0;
		f.fail_at = at;
		CHECK_RC(tier_push(s, &t, step, NULL, NULL, NULL, NULL), -CKPT_E_IO);
		CHECK(f.puts == at);
		CHECK(strstr(ckpt_errmsg(), "libckpt1/") && strstr(ckpt_errmsg(), "injected"));
		CHECK(!remote_lists(&t, step));
		f.fail_at = 0;
		f.puts = 0;
		ckpt_remote_stats st;
		CHECK_OK(tier_push(s, &t, step, &st, NULL, NULL, NULL));
		CHECK(remote_lists(&t, step));
		printf("at %d: resumed push sent %" PRIu64 " packs, %" PRIu64 " present\n", at, st.packs_sent, st.packs_present);
		/* Resumed: what the failed push had sent is not sent again. */
		CHECK(st.packs_sent == (uint64_t)(3 - MIN(3, MAX(at - 4, 0))));
	}
	/* A full remote: NOSPC naming the object, nothing listed, then (space freed) complete. */
	t_fill(data[1], TBYTES, 7777);
	save(s, 100, data);
	f.puts = 0;
	f.full_at = 3;
	CHECK_RC(tier_push(s, &t, 100, NULL, NULL, NULL, NULL), -CKPT_E_NOSPC);
	CHECK(strstr(ckpt_errmsg(), "no space") && strstr(ckpt_errmsg(), "libckpt1/"));
	printf("full: %s\n", ckpt_errmsg());
	CHECK(!remote_lists(&t, 100));
	f.full_at = 0;
	ckpt_remote_stats st;
	CHECK_OK(tier_push(s, &t, 100, &st, NULL, NULL, NULL));
	CHECK(remote_lists(&t, 100) && st.packs_present >= 1);
	ckpt_store_close(s);

	/* Every checkpoint pushed pulls back intact into a fresh store. */
	char fresh[4200];
	snprintf(fresh, sizeof fresh, "%s-fresh", dir);
	CHECK_OK(tier_adopt(f.in, t.id, fresh));
	REQUIRE(ckpt_store_open(fresh, NULL, &s) == 0);
	REQUIRE(rstore_set(s, url, 0) == 0);
	uint64_t *steps;
	long n = rstore_steps(s, &steps);
	CHECK(n == total + 2);
	/* No upload marker is left behind by the failed pushes. */
	char up[128];
	snprintf(up, sizeof up, "libckpt1/%s/uploads/", t.id);
	int markers = 0;
	CHECK_OK(f.in->ops->list(f.in, up, count_key, &markers));
	CHECK(markers == 0);
	for (long i = 0; i < n; i++) {
		CHECK_OK(rstore_pull(s, steps[i], NULL, NULL, NULL, NULL));
		reader1 *r;
		CHECK_OK(reader1_open(s, steps[i], &r));
		CHECK(r && reader1_verify(r, NULL, NULL, NULL) == 0);
		reader1_close(r);
	}
	free(steps);
	ckpt_store_close(s);
	rmt_close(f.in);
	for (int i = 0; i < NT; i++)
		free(data[i]);
	t_rmrf(fresh);
	return t_remote_done(dir, cleanup, url);
}
