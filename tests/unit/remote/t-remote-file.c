/* The directory backend keeps the contract of lib/remote/remote.h: rmt_open by scheme (an
 * absolute path is file://, an unknown scheme names the known ones), put all or nothing through a
 * dot-temporary (invisible to list), NOREPLACE refusing an existing key, ranged get (a read past
 * the end is CORRUPT, a missing key NOTFOUND), recursive list under a prefix, del of a missing key
 * succeeding, keys with '.' components refused, and no symbolic link inside the remote followed
 * by put, get, stat, list or del. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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
	CHECK_OK(r->ops->list(r, "", collect, &s)); /* again: the root is read from its start */
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

/* Writes text at root/rel (its directory made) and gives it mtime age seconds ago. */
static void aged(const char *root, const char *rel, const char *text, time_t age)
{
	char p[8192];
	snprintf(p, sizeof p, "%s/%s", root, rel);
	for (char *c = p + strlen(root) + 1; (c = strchr(c, '/')); c++) {
		*c = 0;
		REQUIRE(mkdir(p, 0755) == 0 || errno == EEXIST);
		*c = '/';
	}
	FILE *f = fopen(p, "w");
	REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0);
	struct timespec ts[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};
	REQUIRE(utimensat(AT_FDCWD, p, ts, 0) == 0);
}

static bool present(const char *root, const char *rel)
{
	char p[8192];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", root, rel);
	return lstat(p, &st) == 0;
}

static int die_mid_put(void *arg, uint64_t done, uint64_t total) { _exit(0); }

/* The temporary a put killed half way leaves under S/packs (its name found by a listing of the
 * directory), aged by age seconds: the sweep must know put's own names. */
static void killed_put(struct rmt *r, const char *root, time_t age)
{
	size_t n = 9u << 20; /* more than one copy chunk: the progress callback runs in between */
	char *big = calloc(1, n);
	REQUIRE(big);
	fflush(NULL);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct rmt_src src = {.buf = big, .len = n};
		r->ops->put(r, "S/packs/00000009.pack", &src, 0, die_mid_put, NULL);
		_exit(1);
	}
	int st;
	REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	free(big);
	char d[4200], rel[4400] = "";
	snprintf(d, sizeof d, "%s/S/packs", root);
	DIR *dir = opendir(d);
	REQUIRE(dir);
	for (struct dirent *e; (e = readdir(dir));)
		if (!strncmp(e->d_name, ".00000009.pack.tmp.", 19))
			snprintf(rel, sizeof rel, "S/packs/%s", e->d_name);
	closedir(dir);
	REQUIRE(rel[0]);
	aged(root, rel, "half", age);
}

/* sweep removes the old temporaries of killed puts under a prefix, by name, regular files only:
 * not the fresh ones (a put may be running), not objects, not other dot files, not through a
 * link, not outside the prefix. */
static void sweeping(struct rmt *r, const char *dir, const char *root)
{
	const time_t old = 7200, fresh = 10;
	killed_put(r, root, old);
	aged(root, "S/manifests/.1.ckpt.tmp.99.fedcba9876543210", "abc", old);
	aged(root, "S/packs/.00000003.pack.tmp.123.aaaaaaaaaaaaaaaa", "fresh", fresh);
	aged(root, "S/packs/00000004.pack", "an old object", old);
	aged(root, "S/packs/.hidden", "not a temporary", old);
	aged(root, "S/packs/.x.tmp.1.0123456789ABCDEF", "not put's name", old);
	aged(root, "T/.t.tmp.7.bbbbbbbbbbbbbbbb", "other prefix", old);
	aged(root, "T/.u.tmp.7.bbbbbbbbbbbbbbbb", "other name", old);
	/* a directory and a link named as temporaries, a link to a directory outside holding one */
	char p[8192], q[8192];
	snprintf(p, sizeof p, "%s/S/packs/.5.tmp.1.cccccccccccccccc", root);
	REQUIRE(mkdir(p, 0755) == 0);
	aged(dir, "elsewhere/.6.tmp.1.dddddddddddddddd", "outside", old);
	snprintf(p, sizeof p, "%s/elsewhere/.6.tmp.1.dddddddddddddddd", dir);
	snprintf(q, sizeof q, "%s/S/packs/.7.tmp.1.dddddddddddddddd", root);
	REQUIRE(symlink(p, q) == 0);
	snprintf(p, sizeof p, "%s/elsewhere", dir);
	snprintf(q, sizeof q, "%s/S/link", root);
	REQUIRE(symlink(p, q) == 0);

	uint64_t n = 0, bytes = 0;
	REQUIRE(r->ops->sweep != NULL);
	CHECK_OK(r->ops->sweep(r, "S/", 3600, &n, &bytes));
	CHECK(n == 2 && bytes == 4 + 3); /* the killed put's (aged() wrote "half") and the manifest's */
	CHECK(!present(root, "S/manifests/.1.ckpt.tmp.99.fedcba9876543210"));
	CHECK(present(root, "S/packs/.00000003.pack.tmp.123.aaaaaaaaaaaaaaaa"));
	CHECK(present(root, "S/packs/00000004.pack") && present(root, "S/packs/.hidden"));
	CHECK(present(root, "S/packs/.x.tmp.1.0123456789ABCDEF"));
	CHECK(present(root, "S/packs/.5.tmp.1.cccccccccccccccc"));
	CHECK(present(root, "S/packs/.7.tmp.1.dddddddddddddddd"));
	CHECK(present(dir, "elsewhere/.6.tmp.1.dddddddddddddddd"));
	CHECK(present(root, "T/.t.tmp.7.bbbbbbbbbbbbbbbb"));
	/* a prefix inside a directory matches the temporaries' key names */
	CHECK_OK(r->ops->sweep(r, "T/t", 3600, &n, &bytes));
	CHECK(n == 3 && !present(root, "T/.t.tmp.7.bbbbbbbbbbbbbbbb"));
	CHECK(present(root, "T/.u.tmp.7.bbbbbbbbbbbbbbbb"));
	/* the fresh one goes once it is old enough; a missing prefix is nothing to do */
	CHECK_OK(r->ops->sweep(r, "", 5, &n, &bytes));
	CHECK(n == 5 && !present(root, "S/packs/.00000003.pack.tmp.123.aaaaaaaaaaaaaaaa"));
	CHECK_OK(r->ops->sweep(r, "nothing/here/", 0, &n, &bytes));
	CHECK(n == 5);
	CHECK_RC(r->ops->sweep(r, "../", 0, &n, &bytes), -CKPT_E_INVAL);
}

/* rmt_cancel stops a put between its chunks; a cleanup delete still works after it. */
static void canceling(const char *root)
{
	struct rmt *r;
	REQUIRE(rmt_open(root, NULL, &r) == 0);
	CHECK_OK(put_buf(r, "C/before", "x", 0));
	rmt_cancel(r);
	CHECK_RC(put_buf(r, "C/after", "x", 0), -CKPT_E_CANCELED);
	CHECK(!present(root, "C/after"));
	CHECK_OK(rmt_del_cleanup(r, "C/before"));
	CHECK(!present(root, "C/before"));
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
	sweeping(r, dir, root);
	rmt_close(r);
	canceling(root);
	/* No temporary is left behind by the failed puts. */
	char cmd[8300];
	snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name '.*tmp*' ! -name '.[5-7x].tmp.*' "
		 "! -name '.u.tmp.*')\"", root);
	CHECK(system(cmd) == 0);
	t_rmrf(dir);
	free(dir);
	free(tdir);
	return t_done();
}
