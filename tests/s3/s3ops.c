/* The S3 backend (rmt_s3_ops) against a real server, driven by tests/s3/t-s3-*.sh, which start
 * radosgw (tests/s3/rgw.sh) and export its endpoint and keys. Not a t-* program: without a server
 * it has nothing to do.
 *
 *   s3ops URL mkbucket               creates the url's bucket
 *   s3ops URL basic                  put/get/range/stat/list (pages of 2 keys)/noreplace/delete
 *   s3ops URL multipart              a 12 MiB object in 5 MiB parts, 3 in flight; progress; cancel
 *   s3ops URL errors                 credentials, missing bucket, refused, missing key, short read
 *   s3ops URL nospc                  a put over the user's quota is -CKPT_E_NOSPC
 *   s3ops URL bandwidth              the cap holds (a lower bound on the time only)
 *   s3ops URL slowput KEY MIB RETRIES MARK   puts MIB MiB at 8 MiB/s; creates MARK at a quarter
 *   s3ops URL verify KEY MIB         exit 0: the whole object; 4: absent; 1: anything else
 *   s3ops URL uploads                prints the multipart uploads in progress under the prefix
 *   s3ops URL threads                8 threads on one handle: put/get/stat/list/del, a multipart
 *   s3ops URL hung                   the server answers nothing: open fails in bounded time
 *   s3ops URL fake                   against tests/s3/fakes3.py: retried 5xx, 429, SlowDown, dropped
 *                                    connections, short bodies; a Range ignored; a completion
 *                                    failing inside its 200; listings that lie
 *   s3ops URL stall                  against fakes3.py (FAKES3_LOG its log): a stalled server
 *                                    times each operation out, a failed upload's abort is one
 *                                    bounded attempt, a cancel stops a request awaiting its answer
 *   s3ops URL sweep                  against fakes3.py: the sweep aborts old incomplete uploads
 *   s3ops URL sweeprgw               the same against radosgw (ages of +-1 h: its clock)
 *   s3ops URL pull                   against fakes3.py: rstore_pull of a pushed checkpoint
 *                                    whose ranged pieces fail mid-way (retried: bit-identical),
 *                                    fail every time, come back damaged or short (the pull
 *                                    fails naming the pack, nothing of it is kept)
 * Environment for errors: S3T_AK2/S3T_SK2, keys of a user who may not read the url's bucket. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"
#include "helpers.h"
#include "t-remote.h"
#include "remote/s3_int.h"

static const struct rmt_ops *S3 = &rmt_s3_ops;

static struct rmt *must_open(const char *url, const struct rmt_config *cfg)
{
	struct rmt *r = NULL;
	int rc = S3->open(url, cfg, &r);
	if (rc) {
		fprintf(stderr, "open %s: %s: %s\n", url, ckpt_strerror(rc), ckpt_errmsg());
		exit(1);
	}
	return r;
}

static int put_buf(struct rmt *r, const char *key, const void *buf, size_t n, unsigned flags)
{
	struct rmt_src src = { .buf = buf, .len = n };
	return S3->put(r, key, &src, flags, NULL, NULL);
}

/* The message of the last failure contains every one of the words. */
static void check_msg(const char *what, const char *w1, const char *w2)
{
	const char *m = ckpt_errmsg();
	if (!strstr(m, w1) || (w2 && !strstr(m, w2))) {
		fprintf(stderr, "%s: the message '%s' does not name '%s'%s%s\n", what, m, w1,
			w2 ? " and " : "", w2 ? w2 : "");
		t_failures++;
	} else {
		printf("  %s: %s\n", what, m);
	}
}

struct names {
	char keys[16][64];
	unsigned n;
	uint64_t bytes;
};

static int collect(void *arg, const struct rmt_obj *o)
{
	struct names *nm = arg;
	if (nm->n < 16)
		snprintf(nm->keys[nm->n], sizeof nm->keys[0], "%s", o->key);
	nm->n++;
	nm->bytes += o->size;
	CHECK(o->mtime > 1700000000);
	return 0;
}

static int stop_at_3(void *arg, const struct rmt_obj *o)
{
	(void)o;
	return ++*(int *)arg == 3 ? 42 : 0;
}

static void basic_list(struct rmt *r)
{
	char key[64];
	for (int i = 0; i < 7; i++) {
		snprintf(key, sizeof key, "list/k%d", i);
		CHECK_OK(put_buf(r, key, key, strlen(key), 0));
	}
	CHECK_OK(put_buf(r, "listx", "x", 1, 0));
	struct names nm = { 0 };
	CHECK_OK(S3->list(r, "list/", collect, &nm)); /* 4 pages of 2 keys: ?page=2 */
	CHECK(nm.n == 7);
	int found = 0;
	for (unsigned i = 0; i < nm.n && i < 16; i++)
		found += strncmp(nm.keys[i], "list/k", 6) == 0;
	CHECK(found == 7);
	int seen = 0;
	CHECK_RC(S3->list(r, "list/", stop_at_3, &seen), 42);
	CHECK(seen == 3);
	struct names none = { 0 };
	CHECK_OK(S3->list(r, "nothing-here/", collect, &none));
	CHECK(none.n == 0);
	for (int i = 0; i < 7; i++) {
		snprintf(key, sizeof key, "list/k%d", i);
		CHECK_OK(S3->del(r, key));
	}
	struct names after = { 0 };
	CHECK_OK(S3->list(r, "list", collect, &after));
	CHECK(after.n == 1 && !strcmp(after.keys[0], "listx"));
}

static int case_basic(const char *url)
{
	struct rmt *r = must_open(url, NULL);
	char data[3000], back[3000];
	t_fill(data, sizeof data, 1);
	/* keys that need encoding: a space, a plus, a tilde, a percent, a dot step */
	const char *keys[] = { "S/packs/00000001.pack", "odd key+~%x", "a/../b" };
	for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
		CHECK_OK(put_buf(r, keys[k], data, sizeof data, 0));
		memset(back, 0, sizeof back);
		CHECK_OK(S3->get(r, keys[k], 0, sizeof data, back));
		CHECK(memcmp(back, data, sizeof data) == 0);
	}
	uint64_t size = 0;
	int64_t mtime = 0;
	CHECK_OK(S3->stat(r, keys[0], &size, &mtime));
	CHECK(size == sizeof data && mtime > 1700000000);
	CHECK_OK(S3->get(r, keys[0], 1000, 500, back));
	CHECK(memcmp(back, data + 1000, 500) == 0);
	CHECK_OK(S3->get(r, keys[0], 2999, 1, back));
	CHECK(back[0] == data[2999]);
	CHECK_OK(S3->get(r, keys[0], 3000, 0, back));
	/* replace, then NOREPLACE refused with the object untouched */
	CHECK_OK(put_buf(r, keys[0], "second", 6, 0));
	CHECK_OK(S3->stat(r, keys[0], &size, NULL));
	CHECK(size == 6);
	CHECK_RC(put_buf(r, keys[0], "third!!", 7, RMT_PUT_NOREPLACE), -CKPT_E_EXISTS);
	check_msg("noreplace on an existing key", "bkt", "exists");
	CHECK_OK(S3->stat(r, keys[0], &size, NULL));
	CHECK(size == 6);
	CHECK_OK(put_buf(r, "fresh", "new", 3, RMT_PUT_NOREPLACE));
	CHECK_OK(put_buf(r, "empty", "", 0, 0));
	CHECK_OK(S3->stat(r, "empty", &size, NULL));
	CHECK(size == 0);
	unsigned caps = S3->caps(r);
	printf("  caps: range %d, atomic noreplace %d\n", !!(caps & RMT_CAP_RANGE),
	       !!(caps & RMT_CAP_ATOMIC_NOREPLACE));
	CHECK(caps & RMT_CAP_RANGE);
	basic_list(r);
	for (size_t k = 0; k < ARRAY_SIZE(keys); k++)
		CHECK_OK(S3->del(r, keys[k]));
	CHECK_OK(S3->del(r, keys[0])); /* a missing key: still fine */
	CHECK_RC(S3->stat(r, keys[0], &size, NULL), -CKPT_E_NOTFOUND);
	CHECK_RC(S3->get(r, keys[1], 0, 10, back), -CKPT_E_NOTFOUND);
	check_msg("get of a deleted key", "NoSuchKey", "odd key");
	const char *rest[] = { "fresh", "empty", "listx" };
	for (size_t k = 0; k < ARRAY_SIZE(rest); k++)
		CHECK_OK(S3->del(r, rest[k]));
	S3->close(r);
	return t_done();
}

struct prog {
	uint64_t last, total, calls;
	int monotonic;
	uint64_t cancel_at;
};

static int on_progress(void *arg, uint64_t done, uint64_t total)
{
	struct prog *p = arg;
	if (done < p->last || done > total)
		p->monotonic = 0;
	p->last = done;
	p->total = total;
	p->calls++;
	return p->cancel_at && done >= p->cancel_at;
}

static void count_uploads(struct rmt *r, unsigned want)
{
	unsigned n = 99;
	CHECK_OK(s3_count_uploads(r, &n));
	if (n != want)
		fprintf(stderr, "%u multipart uploads in progress, expected %u\n", n, want);
	CHECK(n == want);
}

static int case_multipart(const char *url)
{
	struct rmt_config cfg = { .parallel = 3, .part_size = 5u << 20 };
	struct rmt *r = must_open(url, &cfg);
	size_t n = (12u << 20) + 12345;
	char *data = malloc(n), *back = malloc(n);
	char path[] = "/tmp/s3ops-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(data && back && fd >= 0);
	unlink(path);
	t_fill(data, n, 7);
	REQUIRE(write(fd, data, n) == (ssize_t)n);
	/* from a file, at an offset: [100, n) */
	struct rmt_src src = { .fd = fd, .off = 100, .len = n - 100 };
	struct prog p = { .monotonic = 1 };
	CHECK_OK(S3->put(r, "big", &src, 0, on_progress, &p));
	CHECK(p.monotonic && p.last == n - 100 && p.total == n - 100 && p.calls > 3);
	uint64_t size = 0;
	CHECK_OK(S3->stat(r, "big", &size, NULL));
	CHECK(size == n - 100);
	CHECK_OK(S3->get(r, "big", 0, n - 100, back));
	CHECK(memcmp(back, data + 100, n - 100) == 0);
	/* a range across the first part boundary */
	CHECK_OK(S3->get(r, "big", (5u << 20) - 10, 20, back));
	CHECK(memcmp(back, data + 100 + (5u << 20) - 10, 20) == 0);
	CHECK_RC(S3->get(r, "big", n - 200, 200, back), -CKPT_E_CORRUPT);
	check_msg("get past the end", "short object", "big");
	count_uploads(r, 0);
	/* NOREPLACE of a large object on an existing key, and on a new one */
	struct rmt_src bsrc = { .buf = data, .len = n };
	CHECK_RC(S3->put(r, "big", &bsrc, RMT_PUT_NOREPLACE, NULL, NULL), -CKPT_E_EXISTS);
	CHECK_OK(S3->put(r, "big2", &bsrc, RMT_PUT_NOREPLACE, NULL, NULL));
	CHECK_OK(S3->get(r, "big2", 0, n, back));
	CHECK(memcmp(back, data, n) == 0);
	/* canceled half way: nothing under the key, no upload left */
	struct prog c = { .monotonic = 1, .cancel_at = 6u << 20 };
	CHECK_RC(S3->put(r, "canceled", &bsrc, 0, on_progress, &c), -CKPT_E_CANCELED);
	CHECK_RC(S3->stat(r, "canceled", &size, NULL), -CKPT_E_NOTFOUND);
	count_uploads(r, 0);
	/* a source that cannot be read: the put fails naming it, nothing is left */
	struct rmt_src bad = { .fd = fd, .off = n - 10, .len = 11u << 20 };
	CHECK(S3->put(r, "unreadable", &bad, 0, NULL, NULL) < 0);
	check_msg("a short source", "unreadable", "reading the source");
	CHECK_RC(S3->stat(r, "unreadable", &size, NULL), -CKPT_E_NOTFOUND);
	count_uploads(r, 0);
	CHECK_OK(S3->del(r, "big"));
	CHECK_OK(S3->del(r, "big2"));
	close(fd);
	free(data);
	free(back);
	S3->close(r);
	return t_done();
}

/* Opens url with the given keys; returns the open's result. */
static int open_as(const char *url, const char *ak, const char *sk, const struct rmt_config *cfg)
{
	char *oak = strdup(getenv("AWS_ACCESS_KEY_ID")), *osk = strdup(getenv("AWS_SECRET_ACCESS_KEY"));
	struct rmt *r = NULL;
	setenv("AWS_ACCESS_KEY_ID", ak, 1);
	setenv("AWS_SECRET_ACCESS_KEY", sk, 1);
	int rc = S3->open(url, cfg, &r);
	setenv("AWS_ACCESS_KEY_ID", oak, 1);
	setenv("AWS_SECRET_ACCESS_KEY", osk, 1);
	free(oak);
	free(osk);
	if (r)
		S3->close(r);
	return rc;
}

static int case_errors(const char *url)
{
	const char *ak = getenv("AWS_ACCESS_KEY_ID"), *ak2 = getenv("S3T_AK2");
	const char *sk2 = getenv("S3T_SK2"), *ep = getenv("AWS_ENDPOINT_URL");
	REQUIRE(ak && ak2 && sk2 && ep);
	CHECK_RC(open_as(url, ak, "wrong-secret", NULL), -CKPT_E_PERM);
	check_msg("wrong secret key", "SignatureDoesNotMatch", "bkt");
	CHECK_RC(open_as(url, "NOSUCHACCESSKEY", "x", NULL), -CKPT_E_PERM);
	check_msg("unknown access key", "InvalidAccessKeyId", "bkt");
	CHECK_RC(open_as(url, ak2, sk2, NULL), -CKPT_E_PERM);
	check_msg("another user's bucket", "AccessDenied", "bkt");
	CHECK_RC(S3->open("s3://no-such-bucket/p", NULL, &(struct rmt *){ NULL }), -CKPT_E_NOTFOUND);
	check_msg("missing bucket", "NoSuchBucket", "'no-such-bucket'");
	CHECK_RC(S3->open("s3:/bkt", NULL, &(struct rmt *){ NULL }), -CKPT_E_INVAL);
	CHECK_RC(S3->open("s3://bkt/p?addressing=sideways", NULL, &(struct rmt *){ NULL }),
		 -CKPT_E_INVAL);
	check_msg("bad option", "sideways", NULL);
	/* nobody listens there: connection refused, retried, then an error naming the endpoint */
	char dead[128];
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof a;
	REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
		getsockname(s, (struct sockaddr *)&a, &al) == 0);
	snprintf(dead, sizeof dead, "http://127.0.0.1:%u", ntohs(a.sin_port));
	close(s); /* bound, never listening, now free: a refused port */
	setenv("AWS_ENDPOINT_URL", dead, 1);
	struct rmt_config quick = { .retries = 2 };
	double t0 = ckpt_now();
	CHECK_RC(S3->open(url, &quick, &(struct rmt *){ NULL }), -CKPT_E_IO);
	check_msg("connection refused", dead, "3 attempts");
	CHECK(ckpt_now() - t0 >= 0.3); /* two backoffs of at least 0.125 s and 0.25 s */
	setenv("AWS_ENDPOINT_URL", ep, 1);
	return t_done();
}

/* A put of n zero bytes refused with want, its message naming word and the key, the key absent. */
static void put_refused(struct rmt *r, const char *what, const char *key, size_t n, int want,
			const char *word)
{
	char *data = calloc(1, n);
	REQUIRE(data);
	CHECK_RC(put_buf(r, key, data, n, 0), want);
	check_msg(what, word, key);
	uint64_t size;
	CHECK_RC(S3->stat(r, key, &size, NULL), -CKPT_E_NOTFOUND);
	free(data);
}

static int case_nospc(const char *url)
{
	struct rmt *r = must_open(url, NULL);
	put_refused(r, "over quota", "over-quota", 3u << 20, -CKPT_E_NOSPC, "QuotaExceeded");
	S3->close(r);
	return t_done();
}

static double timed_put(struct rmt *r, const char *key, const char *data, size_t n)
{
	double t0 = ckpt_now();
	CHECK_OK(put_buf(r, key, data, n, 0));
	return ckpt_now() - t0;
}

static int case_bandwidth(const char *url)
{
	/* 2 MiB/s: a single 3 MiB put, then 11 MiB in 5 MiB parts, 3 threads sharing the cap */
	struct rmt_config cfg = { .parallel = 3, .part_size = 5u << 20, .bandwidth = 2u << 20 };
	struct rmt *r = must_open(url, &cfg);
	size_t n = 11u << 20;
	char *data = malloc(n);
	REQUIRE(data);
	t_fill(data, n, 3);
	double t1 = timed_put(r, "bw1", data, 3u << 20);
	double t2 = timed_put(r, "bw2", data, n);
	/* bytes by time t <= cap * t + one 16 KiB step a thread: a lower bound that cannot flake */
	double lb1 = (double)((3u << 20) - 16384) / (2u << 20);
	double lb2 = (double)(n - 3 * 16384) / (2u << 20);
	printf("  3 MiB in %.2f s (at least %.2f), 11 MiB on 3 threads in %.2f s (at least %.2f)\n",
	       t1, lb1, t2, lb2);
	CHECK(t1 >= lb1 && t2 >= lb2);
	CHECK_OK(S3->del(r, "bw1"));
	CHECK_OK(S3->del(r, "bw2"));
	free(data);
	S3->close(r);
	return t_done();
}

static int mark_progress(void *arg, uint64_t done, uint64_t total)
{
	const char *mark = arg;
	if (done >= total / 4 && access(mark, F_OK) != 0)
		close(open(mark, O_WRONLY | O_CREAT, 0644));
	return 0;
}

static int case_slowput(const char *url, char **av)
{
	size_t n = (size_t)atoi(av[1]) << 20;
	struct rmt_config cfg = { .parallel = 2, .part_size = 5u << 20, .bandwidth = 8u << 20,
				  .retries = (unsigned)atoi(av[2]), .timeout_s = 5 };
	struct rmt *r = must_open(url, &cfg);
	char *data = malloc(n);
	REQUIRE(data);
	t_fill(data, n, 11);
	struct rmt_src src = { .buf = data, .len = n };
	int rc = S3->put(r, av[0], &src, 0, mark_progress, av[3]);
	printf("slowput %s: %d (%s) %s\n", av[0], rc, ckpt_strerror(rc), rc ? ckpt_errmsg() : "");
	free(data);
	S3->close(r);
	return rc == 0 ? 0 : rc == -CKPT_E_IO ? 3 : 1;
}

static int case_verify(const char *url, char **av)
{
	size_t n = (size_t)atoi(av[1]) << 20;
	struct rmt *r = must_open(url, NULL);
	char *data = malloc(n), *back = malloc(n);
	REQUIRE(data && back);
	t_fill(data, n, 11);
	uint64_t size = 0;
	int rc = S3->stat(r, av[0], &size, NULL), out = 1;
	if (rc == -CKPT_E_NOTFOUND)
		out = 4;
	else if (rc == 0 && size == n && S3->get(r, av[0], 0, n, back) == 0 && !memcmp(data, back, n))
		out = 0;
	printf("verify %s: %s (size %llu)\n", av[0], out == 0 ? "whole" : out == 4 ? "absent" : "BAD",
	       (unsigned long long)size);
	free(data);
	free(back);
	S3->close(r);
	return out;
}

struct thr {
	struct rmt *r;
	int id, fails;
};

static void *thread_main(void *arg)
{
	struct thr *t = arg;
	char key[64], data[5000], back[5000];
	for (int i = 0; i < 12; i++) {
		snprintf(key, sizeof key, "t%d/k%d", t->id, i);
		t_fill(data, sizeof data, (uint64_t)(t->id * 100 + i));
		uint64_t size = 0;
		struct names nm = { 0 };
		if (put_buf(t->r, key, data, sizeof data, 0) || S3->get(t->r, key, 0, sizeof back, back) ||
		    memcmp(data, back, sizeof data) || S3->stat(t->r, key, &size, NULL) ||
		    size != sizeof data || S3->list(t->r, key, collect, &nm) || nm.n != 1 ||
		    S3->del(t->r, key)) {
			fprintf(stderr, "thread %d, %s: %s\n", t->id, key, ckpt_errmsg());
			t->fails++;
		}
	}
	if (t->id == 0) { /* one multipart upload among the small requests */
		size_t n = 11u << 20;
		char *big = malloc(n), *bb = malloc(n);
		t_fill(big, n, 5);
		if (!big || !bb || put_buf(t->r, "t0/big", big, n, 0) ||
		    S3->get(t->r, "t0/big", 0, n, bb) || memcmp(big, bb, n) || S3->del(t->r, "t0/big"))
			t->fails++;
		free(big);
		free(bb);
	}
	return NULL;
}

static int case_threads(const char *url)
{
	struct rmt_config cfg = { .parallel = 3, .part_size = 5u << 20 };
	struct rmt *r = must_open(url, &cfg);
	struct thr t[8];
	pthread_t th[8];
	for (int i = 0; i < 8; i++) {
		t[i] = (struct thr){ r, i, 0 };
		REQUIRE(pthread_create(&th[i], NULL, thread_main, &t[i]) == 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		CHECK(t[i].fails == 0);
	}
	S3->close(r);
	return t_done();
}

/* The server accepts connections and says nothing (SIGSTOP): the open must fail within
 * (timeout_s + backoff) * attempts, not hang. */
static int case_hung(const char *url)
{
	struct rmt_config cfg = { .retries = 1, .timeout_s = 2, .connect_timeout_s = 2 };
	struct rmt *r = NULL;
	double t0 = ckpt_now();
	CHECK_RC(S3->open(url, &cfg, &r), -CKPT_E_IO);
	double dt = ckpt_now() - t0;
	check_msg("a server that answers nothing", "Timeout", getenv("AWS_ENDPOINT_URL"));
	printf("  failed after %.1f s\n", dt);
	CHECK(dt >= 4 && dt < 30);
	return t_done();
}

/* A put then a get of key on the fake server; returns the put's time. */
static double fake_roundtrip(struct rmt *r, const char *key, size_t n)
{
	char *data = malloc(n), *back = malloc(n);
	REQUIRE(data && back);
	t_fill(data, n, n);
	double t0 = ckpt_now();
	CHECK_OK(put_buf(r, key, data, n, 0));
	double dt = ckpt_now() - t0;
	memset(back, 0, n);
	CHECK_OK(S3->get(r, key, 0, n, back));
	CHECK(memcmp(data, back, n) == 0);
	free(data);
	free(back);
	return dt;
}

static void fake_lists(struct rmt *r)
{
	struct names nm = { 0 };
	CHECK_OK(put_buf(r, "fnotoken/a", "a", 1, 0));
	CHECK_RC(S3->list(r, "fnotoken/", collect, &nm), -CKPT_E_CORRUPT);
	check_msg("a truncated listing without a token", "NextContinuationToken", "fnotoken");
	CHECK_OK(put_buf(r, "floop/a", "a", 1, 0));
	CHECK_OK(put_buf(r, "floop/b", "b", 1, 0));
	CHECK_RC(S3->list(r, "floop/", collect, &nm), -CKPT_E_CORRUPT);
	check_msg("a listing that repeats its token", "repeats", NULL);
	int rc = S3->list(r, "fjunk/", collect, &nm);
	CHECK(rc == 0 || rc == -CKPT_E_CORRUPT);
}

static int case_fake(const char *url)
{
	struct rmt_config cfg = { .retries = 3, .part_size = 5u << 20, .parallel = 2 };
	struct rmt *r = must_open(url, &cfg);
	/* two 503s, then the put: two backoffs of at least 0.125 s and 0.25 s */
	CHECK(fake_roundtrip(r, "f503x2/a", 3000) >= 0.375);
	fake_roundtrip(r, "fslowx2/a", 3000);
	fake_roundtrip(r, "f429x1/a", 3000);
	fake_roundtrip(r, "fdropx2/a", 2u << 20); /* the connection closed, twice */
	fake_roundtrip(r, "fshortx1/a", 1u << 20); /* half the body, then closed */
	fake_roundtrip(r, "f503x3/big", 11u << 20); /* the initiate refused three times */
	double t0 = ckpt_now();
	CHECK_RC(put_buf(r, "f500/a", "x", 1, 0), -CKPT_E_IO);
	check_msg("500 every time", "HTTP 500 InternalError", "f500/a");
	CHECK(ckpt_now() - t0 >= 0.125 + 0.25 + 0.5);
	/* a server that ignores Range: the bytes asked for, from the whole object */
	char data[3000], back[500];
	t_fill(data, sizeof data, 9);
	CHECK_OK(put_buf(r, "fnorange/a", data, sizeof data, 0));
	CHECK_OK(S3->get(r, "fnorange/a", 1000, 500, back));
	CHECK(memcmp(back, data + 1000, 500) == 0);
	/* a completion that fails inside its 200: InternalError is retried, InvalidPart is not */
	fake_roundtrip(r, "fcomplete/big", 11u << 20);
	put_refused(r, "a completion refused inside a 200", "fbadpart/big", 11u << 20, -CKPT_E_IO,
		    "InvalidPart");
	count_uploads(r, 0);
	fake_lists(r);
	S3->close(r);
	return t_done();
}

/* Lines of the fake server's log (FAKES3_LOG) that hold what: the requests it stalled. */
static unsigned log_count(const char *what)
{
	const char *path = getenv("FAKES3_LOG");
	FILE *f = path ? fopen(path, "r") : NULL;
	REQUIRE(f);
	char line[8192];
	unsigned n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/* A progress callback that cancels once it is called again after every byte went: the request
 * is then waiting for its answer, which a stalled server never sends. */
static int cancel_when_sent(void *arg, uint64_t done, uint64_t total)
{
	int *all_sent = arg;
	if (*all_sent)
		return 1;
	*all_sent = done == total;
	return 0;
}

/* op against the stalled server: -CKPT_E_IO with a timeout after exactly 2 attempts (retries 1),
 * within 2 x (timeout_s + 1 s: the stall is seen by a callback libcurl calls about once a second)
 * plus the backoff (0.25 s at most) and slack for a loaded machine. */
#define STALLED(what, op, timeout)                                                             \
	do {                                                                                   \
		double t0_ = ckpt_now();                                                       \
		CHECK_RC(op, -CKPT_E_IO);                                                      \
		double dt_ = ckpt_now() - t0_;                                                 \
		check_msg(what, "Timeout", "after 2 attempts");                                \
		printf("  %s: failed after %.2f s\n", what, dt_);                              \
		CHECK(dt_ >= 2.0 * (timeout) - 0.1 && dt_ < 2.0 * (timeout + 1) + 0.25 + 2);  \
	} while (0)

/* A stalled server (accepts, reads, never answers) with a 1 s timeout: every operation fails
 * within (retries + 1) x timeout_s; a failed multipart upload's abort is one bounded attempt. */
static void stall_timeouts(const char *url, const char *data, size_t big)
{
	struct rmt_config cfg = { .retries = 1, .timeout_s = 1, .connect_timeout_s = 1,
				  .part_size = 5u << 20, .parallel = 2 };
	struct rmt *r = must_open(url, &cfg);
	uint64_t size;
	char back[100];
	STALLED("put", put_buf(r, "fstall/a", data, 1000, 0), 1);
	STALLED("stat", S3->stat(r, "fstall/a", &size, NULL), 1);
	STALLED("get", S3->get(r, "fstall/a", 0, sizeof back, back), 1);
	STALLED("delete", S3->del(r, "fstall/a"), 1);
	/* multipart: the initiate answers, the parts and the abort stall */
	double t0 = ckpt_now();
	CHECK_RC(put_buf(r, "fstall/mp", data, big, 0), -CKPT_E_IO);
	double dt = ckpt_now() - t0;
	check_msg("multipart put", "Timeout", "its parts stay");
	unsigned aborts = log_count("stall DELETE /bkt/st/fstall/mp?uploadId=");
	printf("  multipart put: failed after %.2f s, %u abort sent\n", dt, aborts);
	CHECK(aborts == 1);                  /* one attempt, not a round of retries */
	CHECK(dt < 2 * 2 + 0.25 + 1 + 2); /* the parts' 2 attempts, the abort's 1 s */
	t0 = ckpt_now();
	CHECK_RC(rmt_del_cleanup(r, "fstall/d"), -CKPT_E_IO);
	dt = ckpt_now() - t0;
	printf("  cleanup delete: failed after %.2f s\n", dt);
	CHECK(log_count("stall DELETE /bkt/st/fstall/d\n") == 1 && dt < 1 + 2);
	S3->close(r);
}

/* Cancels while a request waits for an answer that never comes (timeout_s 3, so that only a
 * cancel ends it in time): the put's progress callback, then rmt_cancel from another thread. */
struct getter {
	struct rmt *r;
	int rc;
};

static void *get_main(void *arg)
{
	struct getter *g = arg;
	char back[100];
	g->rc = S3->get(g->r, "fstall/g", 0, sizeof back, back);
	return NULL;
}

static void stall_cancels(const char *url, const char *data, size_t big)
{
	struct rmt_config cfg = { .retries = 1, .timeout_s = 3, .connect_timeout_s = 3,
				  .part_size = 5u << 20, .parallel = 2 };
	struct rmt *r = must_open(url, &cfg);
	struct rmt_src one = { .buf = data, .len = 1000 }, two = { .buf = data, .len = big };
	int sent = 0;
	double t0 = ckpt_now();
	CHECK_RC(S3->put(r, "fstall/c", &one, 0, cancel_when_sent, &sent), -CKPT_E_CANCELED);
	double dt = ckpt_now() - t0;
	printf("  put canceled while awaiting the answer: after %.2f s\n", dt);
	CHECK(sent && dt < 2.5);
	sent = 0;
	t0 = ckpt_now();
	CHECK_RC(S3->put(r, "fstall/mc", &two, 0, cancel_when_sent, &sent), -CKPT_E_CANCELED);
	dt = ckpt_now() - t0;
	printf("  multipart put canceled: after %.2f s (the abort's 3 s included)\n", dt);
	CHECK(log_count("stall DELETE /bkt/st/fstall/mc?uploadId=") == 1 && dt < 2.5 + 3 + 1);
	/* rmt_cancel (a store's close) from another thread, the get stalled */
	struct getter g = { r, 1 };
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, get_main, &g) == 0);
	for (double end = ckpt_now() + 30; !log_count("stall GET /bkt/st/fstall/g\n");)
		REQUIRE(ckpt_now() < end && usleep(20000) == 0);
	t0 = ckpt_now();
	rmt_cancel(r);
	pthread_join(th, NULL);
	dt = ckpt_now() - t0;
	printf("  get stopped by rmt_cancel: after %.2f s\n", dt);
	CHECK_RC(g.rc, -CKPT_E_CANCELED);
	CHECK(dt < 2.5);
	/* after it: nothing is sent, but a cleanup still gets its one bounded attempt */
	CHECK_RC(put_buf(r, "fstall/x", data, 10, 0), -CKPT_E_CANCELED);
	CHECK(log_count("fstall/x") == 0);
	CHECK_OK(rmt_del_cleanup(r, "plain"));
	S3->close(r);
}

static int case_stall(const char *url)
{
	size_t big = (5u << 20) + 1000; /* two parts */
	char *data = calloc(1, big);
	REQUIRE(data);
	stall_timeouts(url, data, big);
	stall_cancels(url, data, big);
	free(data);
	return t_done();
}

/* Starts a multipart upload of key and leaves it, as a killed put does. */
static void initiate_only(struct rmt *r, const char *key)
{
	struct s3 *s = (struct s3 *)r;
	char fk[1200];
	REQUIRE(s3_full_key(s, key, fk, sizeof fk) == 0);
	struct s3_req req = { .method = "POST", .key = fk, .query = "uploads=", .what = "initiate" };
	CHECK_OK(s3_call(s, &req, NULL));
	s3_req_free(&req);
}

/* The sweep aborts the old incomplete uploads under a prefix (pages of 2 uploads: url's page=2),
 * not the young ones, not others', never an object. fakes3.py says uploads of a key with a
 * segment "fold" are from 2000. */
static int case_sweep(const char *url)
{
	struct rmt *r = must_open(url, NULL);
	const char *keys[] = { "a/fold/1", "a/fold/2", "a/fold/3", "a/new/4", "b/fold/5" };
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		initiate_only(r, keys[i]);
	CHECK_OK(put_buf(r, "a/fold/obj", "object", 6, 0));
	count_uploads(r, 5);
	uint64_t n = 0, bytes = 0, size = 0;
	REQUIRE(S3->sweep != NULL);
	CHECK_OK(S3->sweep(r, "a/", 3600, &n, &bytes));
	CHECK(n == 3 && bytes == 0);
	count_uploads(r, 2);
	CHECK_OK(S3->stat(r, "a/fold/obj", &size, NULL));
	CHECK_OK(S3->sweep(r, "", 3600, &n, &bytes));
	CHECK(n == 4);
	count_uploads(r, 1); /* the young one */
	CHECK_OK(S3->del(r, "a/fold/obj"));
	S3->close(r);
	return t_done();
}

/* The sweep against a real server (radosgw): uploads initiated now are young for an age of an
 * hour, and old for an age of minus an hour (before now + 1 h). Pages of 2 (url's page=2). */
static int case_sweep_rgw(const char *url)
{
	struct rmt *r = must_open(url, NULL);
	const char *keys[] = { "a/1", "a/2", "a/3", "b/4" };
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		initiate_only(r, keys[i]);
	CHECK_OK(put_buf(r, "a/obj", "object", 6, 0));
	uint64_t n = 0, bytes = 0, size = 0;
	CHECK_OK(S3->sweep(r, "", 3600, &n, &bytes));
	CHECK(n == 0);
	count_uploads(r, 4);
	CHECK_OK(S3->sweep(r, "a/", -3600, &n, &bytes));
	CHECK(n == 3);
	count_uploads(r, 1);
	CHECK_OK(S3->sweep(r, "", -3600, &n, &bytes));
	CHECK(n == 4);
	count_uploads(r, 0);
	CHECK_OK(S3->stat(r, "a/obj", &size, NULL));
	CHECK_OK(S3->del(r, "a/obj"));
	S3->close(r);
	return t_done();
}

/* Nothing of a failed pull in the store at path: no manifest, no pack, no temporary file. */
static void check_nothing_kept(const char *path)
{
	char sub[4400];
	snprintf(sub, sizeof sub, "%s/packs", path);
	CHECK(t_dir_bytes(sub) == 0);
	snprintf(sub, sizeof sub, "%s/manifests", path);
	CHECK(t_dir_bytes(sub) == 0);
	DIR *d = opendir(path);
	REQUIRE(d);
	for (struct dirent *e; (e = readdir(d));)
		if (strstr(e->d_name, ".pack.tmp"))
			CHECK(!"a temporary file of the pull is left");
	closedir(d);
}

/* Pushes 24 MiB (one pack: several 8 MiB pieces) under url/sub, pulls it into a fresh store:
 * want 0 (then restored bit-identical) or the error, whose message names the pack. */
static void pull_with(const char *dir, const char *url, const char *sub, int want)
{
	enum { NT = 3, TB = 8u << 20 };
	static uint8_t *data[NT];
	char u[2048], src[4200], dst[4200];
	snprintf(u, sizeof u, "%s/%s", url, sub);
	snprintf(src, sizeof src, "%s/src-%s", dir, sub);
	snprintf(dst, sizeof dst, "%s/dst-%s", dir, sub);
	for (int i = 0; i < NT; i++)
		if (!data[i] && (data[i] = malloc(TB)))
			t_fill(data[i], TB, 40 + (uint64_t)i);
	ckpt_store *s = t_open_store(src, 1u << 20, 0);
	REQUIRE(s && rstore_set(s, u, 0) == 0);
	t_remote_save(s, 1, data, NT, TB);
	CHECK_OK(rstore_push(s, 1, NULL, NULL, NULL));
	ckpt_store_close(s);
	CHECK_OK(ckpt_remote_adopt(u, NULL, dst));
	REQUIRE(ckpt_store_open(dst, NULL, &s) == 0 && rstore_set(s, u, 0) == 0);
	ckpt_remote_stats st;
	int rc = rstore_pull(s, 1, NULL, &st, NULL, NULL);
	CHECK_RC(rc, want);
	if (want) {
		check_msg(sub, "packs/00000001.pack", sub);
		printf("pull %s: %s\n", sub, ckpt_errmsg());
		check_nothing_kept(dst);
	} else {
		CHECK(st.packs_sent == 1);
		uint8_t *back = malloc(TB);
		reader1 *rd;
		REQUIRE(back && reader1_open(s, 1, &rd) == 0);
		for (int i = 0; i < NT; i++) {
			memset(back, 0, TB);
			CHECK_OK(reader1_restore(rd, (size_t)i, CKPT_MEM_HOST, back, TB));
			CHECK(memcmp(back, data[i], TB) == 0);
		}
		reader1_close(rd);
		free(back);
	}
	ckpt_store_close(s);
}

static int case_pull(const char *url)
{
	char *dir = t_tmpdir("s3ops-pull");
	pull_with(dir, url, "fmidx3", 0);           /* pieces cut mid-way: retried */
	pull_with(dir, url, "fmidx50", -CKPT_E_IO); /* cut every time: the pull fails */
	pull_with(dir, url, "fflip", -CKPT_E_CHECKSUM);
	pull_with(dir, url, "fless", -CKPT_E_CORRUPT); /* a short answer, never a short file */
	t_rmrf(dir);
	free(dir);
	return t_done();
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: s3ops URL CASE [ARGS] (see the source)\n");
		return 2;
	}
	const char *url = argv[1], *c = argv[2];
	if (!strcmp(c, "mkbucket")) {
		struct rmt *r = NULL;
		REQUIRE(s3_open_unchecked(url, NULL, &r) == 0);
		int rc = s3_make_bucket(r);
		if (rc)
			fprintf(stderr, "mkbucket: %s\n", ckpt_errmsg());
		S3->close(r);
		return rc ? 1 : 0;
	}
	if (!strcmp(c, "uploads")) {
		struct rmt *r = must_open(url, NULL);
		unsigned n = 0;
		REQUIRE(s3_count_uploads(r, &n) == 0);
		printf("%u\n", n);
		S3->close(r);
		return 0;
	}
	static const struct { const char *name; int (*run)(const char *url); } cases[] = {
		{ "basic", case_basic }, { "multipart", case_multipart }, { "errors", case_errors },
		{ "nospc", case_nospc }, { "bandwidth", case_bandwidth }, { "threads", case_threads },
		{ "hung", case_hung }, { "fake", case_fake }, { "pull", case_pull },
		{ "stall", case_stall }, { "sweep", case_sweep }, { "sweeprgw", case_sweep_rgw },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		if (!strcmp(c, cases[i].name))
			return cases[i].run(url);
	if (!strcmp(c, "slowput") && argc == 7)
		return case_slowput(url, argv + 3);
	if (!strcmp(c, "verify") && argc == 5)
		return case_verify(url, argv + 3);
	fprintf(stderr, "s3ops: unknown case '%s'\n", c);
	return 2;
}
