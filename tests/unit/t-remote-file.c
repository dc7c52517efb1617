/* The directory backend keeps the contract of lib/remote/remote.h: rmt_open by scheme (an
 * absolute path is file://, an unknown scheme names the known ones), put all or nothing through a
 * dot-temporary (invisible to list), NOREPLACE refusing an existing key, ranged get (a read past
 * the end is CORRUPT, a missing key NOTFOUND), recursive list under a prefix, del of a missing key
 * succeeding, keys with '.' components refused, and no symbolic link inside the remote followed
 * by put, get, stat, list or del. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "remote/remote.h"

struct seen {
	char keys[16][128];
	uint64_t sizes[16];
	int n;
};

static int collect(void *arg, const struct rmt_obj *o)
{
	struct seen *s = arg;
	if (s->n < 16) {
		snprintf(s->keys[s->n], sizeof s->keys[0], "%s", o->key);
		s->sizes[s->n] = o->size;
	}
	s->n++;
	return 0;
}

static bool has(const struct seen *s, const char *key)
{
	for (int i = 0; i < s->n && i < 16; i++)
		if (!strcmp(s->keys[i], key))
			return true;
	return false;
}

static int put_buf(struct rmt *r, const char *key, const char *text, unsigned flags)
{
	struct rmt_src src = {.buf = text, .len = strlen(text)};
	return r->ops->put(r, key, &src, flags, NULL, NULL);
}

static int stop_at(void *arg, uint64_t done, uint64_t total) { return done >= *(uint64_t *)arg; }

static void basic(struct rmt *r, const char *dir)
{
	CHECK_OK(put_buf(r, "S/packs/00000001.pack", "hello world", 0));
	CHECK_OK(put_buf(r, "S/manifests/1.ckpt", "m1", RMT_PUT_NOREPLACE));
	CHECK_RC(put_buf(r, "S/manifests/1.ckpt", "other", RMT_PUT_NOREPLACE), -CKPT_E_EXISTS);
	CHECK(strstr(ckpt_errmsg(), "S/manifests/1.ckpt") != NULL);
	CHECK_OK(put_buf(r, "S/manifests/1.ckpt", "m1b", 0)); /* plain put replaces */
	char buf[16] = {0};
	CHECK_OK(r->ops->get(r, "S/packs/00000001.pack", 6, 5, buf));
	CHECK(!memcmp(buf, "world", 5));
	CHECK_RC(r->ops->get(r, "S/packs/00000001.pack", 6, 6, buf), -CKPT_E_CORRUPT);
	CHECK(strstr(ckpt_errmsg(), "00000001.pack") != NULL);
	CHECK_RC(r->ops->get(r, "S/packs/00000002.pack", 0, 1, buf), -CKPT_E_NOTFOUND);
	uint64_t size = 0;
	CHECK_OK(r->ops->stat(r, "S/manifests/1.ckpt", &size, NULL));
	CHECK(size == 3);
	CHECK_RC(r->ops->stat(r, "T/x", &size, NULL), -CKPT_E_NOTFOUND);
	/* A put from a file range; a short source fails and leaves nothing. */
	char src[4096];
	snprintf(src, sizeof src, "%s/src", dir);
	int fd = open(src, O_RDWR | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0 && write(fd, "0123456789", 10) == 10);
	struct rmt_src fsrc = {.fd = fd, .off = 2, .len = 5};
	CHECK_OK(r->ops->put(r, "S/packs/00000003.pack", &fsrc, 0, NULL, NULL));
	CHECK_OK(r->ops->get(r, "S/packs/00000003.pack", 0, 5, buf));
	CHECK(!memcmp(buf, "23456", 5));
	fsrc.len = 50;
	CHECK_RC(r->ops->put(r, "S/packs/00000004.pack", &fsrc, 0, NULL, NULL), -CKPT_E_CORRUPT);
	CHECK_RC(r->ops->stat(r, "S/packs/00000004.pack", &size, NULL), -CKPT_E_NOTFOUND);
	/* Canceled by its progress callback: absent, no temporary left. */
	uint64_t at = 1;
	fsrc.len = 8;
	CHECK_RC(r->ops->put(r, "S/packs/00000005.pack", &fsrc, 0, stop_at, &at), -CKPT_E_CANCELED);
	close(fd);
	struct seen s = {0};
	CHECK_OK(r->ops->list(r, "S/", collect, &s));
	CHECK(s.n == 3 && has(&s, "S/packs/00000001.pack") && has(&s, "S/manifests/1.ckpt") &&
	      has(&s, "S/packs/00000003.pack"));
	memset(&s, 0, sizeof s);
	CHECK_OK(r->ops->list(r, "S/packs/0000000", collect, &s));
	CHECK(s.n == 2);
	memset(&s, 0, sizeof s);
	CHECK_OK(r->ops->list(r, "", collect, &s));
	CHECK(s.n == 3);
	memset(&s, 0, sizeof s);
	CHECK_OK(r->ops->list(r, "nothing/here/", collect, &s));
	CHECK(s.n == 0);
	CHECK_OK(r->ops->del(r, "S/packs/00000001.pack"));
	CHECK_OK(r->ops->del(r, "S/packs/00000001.pack"));
	CHECK_OK(r->ops->del(r, "Q/none"));
	CHECK_RC(r->ops->stat(r, "S/packs/00000001.pack", &size, NULL), -CKPT_E_NOTFOUND);
	/* Keys that could escape or collide with temporaries are refused. */
	CHECK_RC(put_buf(r, "../x", "x", 0), -CKPT_E_INVAL);
	CHECK_RC(put_buf(r, "S/.hidden", "x", 0), -CKPT_E_INVAL);
	CHECK_RC(put_buf(r, "S//x", "x", 0), -CKPT_E_INVAL);
	CHECK_RC(put_buf(r, "/abs", "x", 0), -CKPT_E_INVAL);
	CHECK_RC(put_buf(r, "S/", "x", 0), -CKPT_E_INVAL);
	CHECK_RC(put_buf(r, "", "x", 0), -CKPT_E_INVAL);
}

/* Links inside the remote are never followed: a link to a directory outside, and a link as an
 * object's name. The decoy outside must stay untouched. */
static void symlinks(struct rmt *r, const char *dir, const char *root)
{
	char outside[4096], p[8192], q[8192];
	snprintf(outside, sizeof outside, "%s/outside", dir);
	REQUIRE(mkdir(outside, 0755) == 0);
	snprintf(p, sizeof p, "%s/decoy", outside);
	FILE *f = fopen(p, "w");
	REQUIRE(f && fputs("keep", f) >= 0 && fclose(f) == 0);
	snprintf(q, sizeof q, "%s/L", root);
	REQUIRE(symlink(outside, q) == 0);
	CHECK_RC(put_buf(r, "L/decoy", "evil", 0), -CKPT_E_PERM);
	CHECK(strstr(ckpt_errmsg(), "symbolic link") != NULL);
	CHECK_RC(put_buf(r, "L/new", "evil", 0), -CKPT_E_PERM);
	char buf[8];
	CHECK_RC(r->ops->get(r, "L/decoy", 0, 4, buf), -CKPT_E_PERM);
	CHECK_RC(r->ops->del(r, "L/decoy"), -CKPT_E_PERM);
	snprintf(q, sizeof q, "%s/S/link.pack", root);
	REQUIRE(symlink(p, q) == 0);
	CHECK_RC(r->ops->get(r, "S/link.pack", 0, 4, buf), -CKPT_E_PERM);
	uint64_t size;
	CHECK_RC(r->ops->stat(r, "S/link.pack", &size, NULL), -CKPT_E_PERM);
	CHECK_OK(put_buf(r, "S/link.pack", "mine", 0)); /* replaces the link, not its target */
	struct seen s = {0};
	CHECK_OK(r->ops->list(r, "", collect, &s));
	CHECK(!has(&s, "L/decoy"));
	f = fopen(p, "r");
	REQUIRE(f);
	CHECK(fgets(buf, sizeof buf, f) && !strcmp(buf, "keep"));
	fclose(f);
	snprintf(q, sizeof q, "%s/new", outside);
	CHECK(access(q, F_OK) != 0);
}

static void opening(const char *dir)
{
	struct rmt *r;
	CHECK_RC(rmt_open("ftp://x/y", NULL, &r), -CKPT_E_INVAL);
	CHECK(strstr(ckpt_errmsg(), "file://") != NULL);
	CHECK_RC(rmt_open("relative/dir", NULL, &r), -CKPT_E_INVAL);
	CHECK_RC(rmt_open("file://relative", NULL, &r), -CKPT_E_INVAL);
	char p[4096];
	snprintf(p, sizeof p, "file://%s/missing", dir);
	CHECK_RC(rmt_open(p, NULL, &r), -CKPT_E_NOTFOUND);
	CHECK(strstr(ckpt_errmsg(), "missing") != NULL);
	snprintf(p, sizeof p, "file://%s", dir);
	CHECK_OK(rmt_open(p, NULL, &r));
	CHECK(r && r->cfg.retries == 5 && r->cfg.parallel == 4 && r->cfg.part_size == 64ull << 20);
	rmt_close(r);
}

int main(void)
{
	char *tdir = t_tmpdir("remote-file");
	char *dir = realpath(tdir, NULL); /* a remote is named by an absolute path */
	REQUIRE(dir);
	char root[4096];
	snprintf(root, sizeof root, "%s/remote", dir);
	REQUIRE(mkdir(root, 0755) == 0);
	opening(dir);
	struct rmt *r;
	REQUIRE(rmt_open(root, NULL, &r) == 0);
	basic(r, dir);
	symlinks(r, dir, root);
	rmt_close(r);
	/* No temporary is left behind by the failed puts. */
	char cmd[8300];
	snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name '.*tmp*')\"", root);
	CHECK(system(cmd) == 0);
	t_rmrf(dir);
	free(dir);
	free(tdir);
	return t_done();
}
