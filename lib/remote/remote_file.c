/* The directory backend (remote.h): a remote that is a directory on a shared file system (Lustre,
 * GPFS, NFS), one file per key. Every path below the root is walked one component at a time with
 * O_NOFOLLOW relative to the parent's fd, so no symbolic link inside the remote is ever followed
 * (a link planted there cannot make a put write, or a del remove, outside it). A put writes a
 * temporary file named with a leading dot (keys never have one, so listings skip them), fsyncs
 * it, renames it into place (link() for RMT_PUT_NOREPLACE, which never replaces) and fsyncs the
 * directory: all or nothing across a crash. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "remote/remote.h"

#define KEY_MAX 1024
#define COPY_BUF (4u << 20)
#define LIST_DEPTH 32

struct frmt {
	struct rmt base;
	char *root;
	int root_fd;
	pthread_mutex_t bw_mu; /* bw_next */
	double bw_next;        /* when the bandwidth cap lets the next byte go (ckpt_now) */
};

static struct frmt *F(struct rmt *r) { return (struct frmt *)(void *)r; }

/* A key is components joined by '/', none empty and none starting with '.' (so "..", "." and
 * the temporaries are never keys). Returns 0 or -CKPT_E_INVAL naming the key. */
static int check_key(const char *key, bool allow_empty)
{
	size_t n = strlen(key);
	if ((!n && !allow_empty) || n > KEY_MAX)
		return ckpt_fail(CKPT_E_INVAL, "remote key \"%.64s\": %s", key,
				 n ? "longer than 1024 bytes" : "empty");
	for (const char *c = key; *c;) {
		const char *e = strchr(c, '/');
		size_t l = e ? (size_t)(e - c) : strlen(c);
		if (!l || c[0] == '.')
			return ckpt_fail(CKPT_E_INVAL, "remote key \"%s\": %s", key,
					 l ? "a component starts with '.'" : "an empty component");
		c += l + (e ? 1 : 0);
		if (e && !*c)
			return ckpt_fail(CKPT_E_INVAL, "remote key \"%s\": ends with '/'", key);
	}
	return 0;
}

/* The error of an openat/fstatat of path below the root, errno e: a symbolic link (ELOOP) or a
 * file where a directory should be is refused, never followed. */
static int path_error(struct frmt *f, const char *what, const char *key, int e)
{
	if (e == ELOOP)
		return ckpt_fail(CKPT_E_PERM, "%s %s/%s: a symbolic link in the remote (never followed)",
				 what, f->root, key);
	return ckpt_fail(ckpt_errno_code(e), "%s %s/%s: %s", what, f->root, key, strerror(e));
}

/* Opens the directory holding key (creating missing ones when create, each made durable in its
 * parent) and points *base at key's last component. Returns an fd the caller closes, or
 * -CKPT_E_*. */
static int walk(struct frmt *f, const char *key, bool create, const char **base)
{
	char buf[KEY_MAX + 1];
	snprintf(buf, sizeof buf, "%s", key);
	int fd = fcntl(f->root_fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return path_error(f, "open", "", errno);
	char *c = buf;
	for (char *e; (e = strchr(c, '/')); c = e + 1) {
		*e = 0;
		int nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, c, 0755) && errno != EEXIST) {
				int err = errno;
				close(fd);
				return path_error(f, "mkdir", buf, err);
			}
			if (fsync(fd)) { /* the new directory's entry, before anything is put in it */
				int err = errno;
				close(fd);
				return path_error(f, "fsync the parent of", buf, err);
			}
			nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		int err = errno;
		close(fd);
		if (nfd < 0)
			return path_error(f, "open", buf, err == ENOTDIR ? ELOOP : err);
		fd = nfd;
		*e = '/';
	}
	*base = key + (c - buf);
	return fd;
}

/* check_key, then walk: the directory fd holding key, *base its last component. */
static int key_dir(struct frmt *f, const char *key, bool create, const char **base)
{
	int rc = check_key(key, false);
	return rc ? rc : walk(f, key, create, base);
}

/* Holds the caller until the bandwidth cap lets n more bytes go (summed over the handle's
 * threads). A timed pause is the cap itself, not a wait for a condition. */
static void throttle(struct frmt *f, uint64_t n)
{
	if (!f->base.cfg.bandwidth)
		return;
	pthread_mutex_lock(&f->bw_mu);
	double now = ckpt_now();
	if (f->bw_next < now)
		f->bw_next = now;
	f->bw_next += (double)n / (double)f->base.cfg.bandwidth;
	double wait = f->bw_next - now;
	pthread_mutex_unlock(&f->bw_mu);
	if (wait > 0) {
		struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
		nanosleep(&ts, NULL);
	}
}

/* A file source copied by the kernel (copy_file_range: a server-side copy on NFS 4.2, a reflink
 * or an in-kernel copy elsewhere), from *done on. Returns 0 with *done at the end, or at where it
 * stopped when the file systems do not support it (the caller copies the rest through memory),
 * or -CKPT_E_*. */
static int kernel_copy(struct frmt *f, const char *key, int fd, const struct rmt_src *src,
		       rmt_progress_cb progress, void *arg, uint64_t *done)
{
	while (*done < src->len) {
		size_t n = (size_t)MIN(4ull * COPY_BUF, src->len - *done);
		loff_t in = (loff_t)(src->off + *done), out = (loff_t)*done;
		throttle(f, n);
		ssize_t k = copy_file_range(src->fd, &in, fd, &out, n, 0);
		if (k < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
			      errno == EOPNOTSUPP || errno == EBADF))
			return 0; /* not here: through memory */
		if (k < 0)
			return path_error(f, "write", key, errno);
		if (k == 0)
			return ckpt_fail(CKPT_E_CORRUPT, "put %s/%s: the source ends at %llu of %llu bytes",
					 f->root, key, (unsigned long long)*done,
					 (unsigned long long)src->len);
		*done += (uint64_t)k;
		if (rmt_canceled(&f->base) || (progress && progress(arg, *done, src->len)))
			return ckpt_fail(CKPT_E_CANCELED, "put %s/%s: canceled", f->root, key);
	}
	return 0;
}

/* Copies src into fd (the temporary file of key), reporting progress. Returns 0 or -CKPT_E_*. */
static int copy_src(struct frmt *f, const char *key, int fd, const struct rmt_src *src,
		    rmt_progress_cb progress, void *arg)
{
	uint64_t done = 0;
	int rc = src->buf ? 0 : kernel_copy(f, key, fd, src, progress, arg, &done);
	if (rc || done == src->len)
		return rc;
	uint8_t *tmp = src->buf ? NULL : malloc(COPY_BUF);
	if (!src->buf && !tmp)
		return ckpt_fail(CKPT_E_NOMEM, "put %s/%s: out of memory", f->root, key);
	while (done < src->len && !rc) {
		size_t n = (size_t)MIN((uint64_t)COPY_BUF, src->len - done);
		const uint8_t *p = src->buf ? (const uint8_t *)src->buf + done : tmp;
		if (!src->buf) {
			ssize_t got = pread(src->fd, tmp, n, (off_t)(src->off + done));
			if (got <= 0) {
				rc = got ? ckpt_fail(ckpt_errno_code(errno), "put %s/%s: read the source: %s",
						     f->root, key, strerror(errno))
					 : ckpt_fail(CKPT_E_CORRUPT, "put %s/%s: the source ends at %llu of %llu bytes",
						     f->root, key, (unsigned long long)done,
						     (unsigned long long)src->len);
				break;
			}
			n = (size_t)got;
		}
		throttle(f, n);
		for (size_t w = 0; w < n;) {
			ssize_t k = pwrite(fd, p + w, n - w, (off_t)(done + w));
			if (k < 0) {
				rc = path_error(f, "write", key, errno);
				break;
			}
			w += (size_t)k;
		}
		done += n;
		if (!rc && (rmt_canceled(&f->base) || (progress && progress(arg, done, src->len))))
			rc = ckpt_fail(CKPT_E_CANCELED, "put %s/%s: canceled", f->root, key);
	}
	free(tmp);
	return rc;
}

/* Makes the temporary file tmp key's object: link() (never replacing) or rename(), then the
 * directory's fsync. Returns 0 or -CKPT_E_* (-CKPT_E_EXISTS for a NOREPLACE put on a key). */
static int publish(struct frmt *f, int dfd, const char *tmp, const char *base, const char *key,
		   unsigned flags)
{
	if (flags & RMT_PUT_NOREPLACE) {
		if (linkat(dfd, tmp, dfd, base, 0)) {
			int e = errno;
			if (e == EEXIST)
				return ckpt_fail(CKPT_E_EXISTS, "put %s/%s: the object exists", f->root, key);
			return path_error(f, "link", key, e);
		}
		unlinkat(dfd, tmp, 0);
	} else if (renameat(dfd, tmp, dfd, base)) {
		return path_error(f, "rename into", key, errno);
	}
	if (fsync(dfd))
		return path_error(f, "fsync the directory of", key, errno);
	return 0;
}

static int f_put(struct rmt *r, const char *key, const struct rmt_src *src, unsigned flags,
		 rmt_progress_cb progress, void *arg)
{
	struct frmt *f = F(r);
	const char *base;
	int rc, dfd = key_dir(f, key, true, &base);
	if (dfd < 0)
		return dfd;
	char tmp[300];
	uint64_t rnd = 0;
	if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
		rnd = (uint64_t)ckpt_wall_ns() * 0x9e3779b97f4a7c15ull;
	snprintf(tmp, sizeof tmp, ".%.200s.tmp.%d.%016llx", base, (int)getpid(), (unsigned long long)rnd);
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = path_error(f, "create a temporary file for", key, errno);
		close(dfd);
		return rc;
	}
	rc = copy_src(f, key, fd, src, progress, arg);
	if (!rc && fsync(fd))
		rc = path_error(f, "fsync", key, errno);
	if (close(fd) && !rc)
		rc = path_error(f, "close", key, errno);
	if (!rc)
		rc = publish(f, dfd, tmp, base, key, flags);
	if (rc)
		unlinkat(dfd, tmp, 0); /* nothing of a failed put stays (gone already once renamed) */
	close(dfd);
	return rc;
}

/* Opens key's object for reading (a plain file, not through a link) into *fd with its stat.
 * Returns 0 or -CKPT_E_* (-CKPT_E_NOTFOUND when absent). */
static int open_obj(struct frmt *f, const char *key, int *fd, struct stat *st)
{
	const char *base;
	int dfd = key_dir(f, key, false, &base);
	if (dfd < 0)
		return dfd;
	*fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	int e = errno;
	close(dfd);
	if (*fd < 0)
		return path_error(f, "open", key, e);
	if (fstat(*fd, st) || !S_ISREG(st->st_mode)) {
		close(*fd);
		return ckpt_fail(CKPT_E_CORRUPT, "open %s/%s: not a plain file", f->root, key);
	}
	return 0;
}

static int f_get(struct rmt *r, const char *key, uint64_t off, uint64_t len, void *buf)
{
	struct frmt *f = F(r);
	int fd;
	struct stat st;
	int rc = open_obj(f, key, &fd, &st);
	if (rc)
		return rc;
	if (off + len < off || off + len > (uint64_t)st.st_size)
		rc = ckpt_fail(CKPT_E_CORRUPT, "get %s/%s: the object is %llu bytes, the read of "
			       "[%llu, %llu) passes its end", f->root, key, (unsigned long long)st.st_size,
			       (unsigned long long)off, (unsigned long long)(off + len));
	for (uint64_t done = 0; !rc && done < len;) {
		ssize_t k = pread(fd, (uint8_t *)buf + done, (size_t)MIN(len - done, 1ull << 30),
				  (off_t)(off + done));
		if (k <= 0)
			rc = k ? path_error(f, "read", key, errno)
			       : ckpt_fail(CKPT_E_CORRUPT, "get %s/%s: the object ends early", f->root, key);
		done += k > 0 ? (uint64_t)k : 0;
	}
	close(fd);
	return rc;
}

static int f_stat(struct rmt *r, const char *key, uint64_t *size, int64_t *mtime)
{
	struct frmt *f = F(r);
	const char *base;
	int rc, dfd = key_dir(f, key, false, &base);
	if (dfd < 0)
		return dfd;
	struct stat st;
	rc = fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) ? path_error(f, "stat", key, errno) : 0;
	close(dfd);
	if (!rc && S_ISLNK(st.st_mode))
		rc = path_error(f, "stat", key, ELOOP);
	else if (!rc && !S_ISREG(st.st_mode))
		rc = ckpt_fail(CKPT_E_CORRUPT, "stat %s/%s: not a plain file", f->root, key);
	if (!rc) {
		*size = (uint64_t)st.st_size;
		if (mtime)
			*mtime = (int64_t)st.st_mtime;
	}
	return rc;
}

/* Calls cb for each plain file below the directory fd (key holds its key prefix, klen bytes,
 * ending in '/' or empty), whose first component starts with match. Skips dot-files (the
 * temporaries), links and anything else. Closes fd. */
static int list_dir(struct frmt *f, int fd, char *key, size_t klen, const char *match, int depth,
		    rmt_list_cb cb, void *arg)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return path_error(f, "list", key, errno);
	}
	int rc = 0;
	size_t ml = strlen(match);
	for (struct dirent *de; !rc && (errno = 0, de = readdir(d));) {
		size_t nl = strlen(de->d_name);
		struct stat st;
		if (de->d_name[0] == '.' || strncmp(de->d_name, match, ml) || klen + nl + 2 > KEY_MAX ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		memcpy(key + klen, de->d_name, nl + 1);
		if (S_ISREG(st.st_mode)) {
			struct rmt_obj o = {.key = key, .size = (uint64_t)st.st_size,
					    .mtime = (int64_t)st.st_mtime};
			rc = cb(arg, &o);
		} else if (S_ISDIR(st.st_mode) && depth < LIST_DEPTH) {
			int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			key[klen + nl] = '/';
			key[klen + nl + 1] = 0;
			if (sub >= 0)
				rc = list_dir(f, sub, key, klen + nl + 1, "", depth + 1, cb, arg);
		}
		key[klen] = 0;
	}
	if (!rc && errno)
		rc = path_error(f, "list", key, errno);
	closedir(d);
	return rc;
}

static int f_list(struct rmt *r, const char *prefix, rmt_list_cb cb, void *arg)
{
	struct frmt *f = F(r);
	char key[KEY_MAX + 2];
	snprintf(key, sizeof key, "%s", prefix ? prefix : "");
	char *slash = strrchr(key, '/');
	const char *match = slash ? slash + 1 : key;
	char dir[KEY_MAX + 2];
	snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - key) : 0, key);
	int rc = check_key(dir, true);
	if (rc)
		return rc;
	int fd;
	if (*dir) {
		char probe[KEY_MAX + 4];
		snprintf(probe, sizeof probe, "%s/x", dir); /* walk opens every directory of dir */
		const char *base;
		int pfd = walk(f, probe, false, &base);
		if (pfd < 0)
			return pfd == -CKPT_E_NOTFOUND ? 0 : pfd;
		fd = pfd;
	} else {
		/* A new open file, not a dup: a dup shares the root's read offset, which one listing
		 * leaves at the end for every later one. */
		fd = openat(f->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return path_error(f, "list", "", errno);
	}
	char m[KEY_MAX + 2];
	snprintf(m, sizeof m, "%s", match);
	size_t klen = slash ? (size_t)(slash - key) + 1 : 0;
	key[klen] = 0;
	return list_dir(f, fd, key, klen, m, 0, cb, arg);
}

/* Is name one of put's temporaries: "." NAME ".tmp." PID "." 16 hex digits? */
static bool is_temp(const char *name)
{
	size_t n = strlen(name), i = n;
	if (name[0] != '.' || n < 1 + 1 + 5 + 1 + 1 + 16)
		return false;
	for (i = n - 16; i < n; i++)
		if (!strchr("0123456789abcdef", name[i]))
			return false;
	i = n - 17;
	if (name[i] != '.')
		return false;
	size_t digits = i;
	while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
		i--;
	return i < digits && i >= 7 && !memcmp(name + i - 5, ".tmp.", 5); /* NAME not empty */
}

struct sweep {
	time_t before;           /* temporaries last written before this go */
	uint64_t removed, bytes;
	int rc;                  /* the first failure */
};

/* Removes the old temporaries in the directory fd (key: its key prefix, klen bytes) whose NAME
 * starts with match, and below it (any NAME), never through a link. Closes fd. */
static void sweep_dir(struct frmt *f, int fd, char *key, size_t klen, const char *match, int depth,
		      struct sweep *sw)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		if (!sw->rc)
			sw->rc = path_error(f, "sweep", key, errno);
		return;
	}
	size_t ml = strlen(match);
	for (struct dirent *de; (errno = 0, de = readdir(d));) {
		const char *nm = de->d_name;
		size_t nl = strlen(nm);
		struct stat st;
		bool temp = nm[0] == '.' && is_temp(nm);
		if ((nm[0] == '.' && !temp) || strncmp(nm + temp, match, ml) || klen + nl + 2 > KEY_MAX ||
		    fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (temp && S_ISREG(st.st_mode) && st.st_mtime < sw->before) {
			if (unlinkat(dirfd(d), nm, 0) == 0) {
				sw->removed++;
				sw->bytes += (uint64_t)st.st_size;
			} else if (errno != ENOENT && !sw->rc) {
				memcpy(key + klen, nm, nl + 1);
				sw->rc = path_error(f, "sweep", key, errno);
			}
		} else if (!temp && S_ISDIR(st.st_mode) && depth < LIST_DEPTH) {
			int sub = openat(dirfd(d), nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			memcpy(key + klen, nm, nl);
			key[klen + nl] = '/';
			key[klen + nl + 1] = 0;
			if (sub >= 0)
				sweep_dir(f, sub, key, klen + nl + 1, "", depth + 1, sw);
		}
		key[klen] = 0;
	}
	if (errno && !sw->rc)
		sw->rc = path_error(f, "sweep", key, errno);
	closedir(d);
}

/* The dot temporaries that killed puts left (a failed put removes its own), found by their name
 * only: an object is never one (keys have no dot component). */
static int f_sweep(struct rmt *r, const char *prefix, int64_t older_than_s, uint64_t *removed,
		   uint64_t *bytes)
{
	struct frmt *f = F(r);
	char key[KEY_MAX + 2], dir[KEY_MAX + 2], m[KEY_MAX + 2];
	snprintf(key, sizeof key, "%s", prefix ? prefix : "");
	char *slash = strrchr(key, '/');
	snprintf(m, sizeof m, "%s", slash ? slash + 1 : key);
	snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - key) : 0, key);
	int rc = check_key(dir, true), fd;
	if (rc)
		return rc;
	if (*dir) {
		char probe[KEY_MAX + 4];
		snprintf(probe, sizeof probe, "%s/x", dir); /* walk opens every directory of dir */
		const char *base;
		if ((fd = walk(f, probe, false, &base)) < 0)
			return fd == -CKPT_E_NOTFOUND ? 0 : fd;
	} else if ((fd = openat(f->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		return path_error(f, "sweep", "", errno);
	}
	struct sweep sw = { .before = time(NULL) - (time_t)older_than_s };
	size_t klen = slash ? (size_t)(slash - key) + 1 : 0;
	key[klen] = 0;
	sweep_dir(f, fd, key, klen, m, 0, &sw);
	*removed += sw.removed;
	*bytes += sw.bytes;
	return sw.rc;
}

static int f_del(struct rmt *r, const char *key)
{
	struct frmt *f = F(r);
	const char *base;
	int rc = 0, dfd = key_dir(f, key, false, &base);
	if (dfd < 0)
		return dfd == -CKPT_E_NOTFOUND ? 0 : dfd;
	if (unlinkat(dfd, base, 0) && errno != ENOENT)
		rc = path_error(f, "delete", key, errno);
	else if (fsync(dfd)) /* a prune's manifest removal must be durable before its packs go */
		rc = path_error(f, "fsync the directory of", key, errno);
	close(dfd);
	return rc;
}

static unsigned f_caps(struct rmt *r) { return RMT_CAP_ATOMIC_NOREPLACE | RMT_CAP_RANGE; }

static void f_close(struct rmt *r)
{
	struct frmt *f = F(r);
	close(f->root_fd);
	pthread_mutex_destroy(&f->bw_mu);
	free(f->root);
	free(f->base.url);
	free(f);
}

static int f_open(const char *url, const struct rmt_config *cfg, struct rmt **out)
{
	const char *path = url;
	if (!strncmp(url, "file://", 7))
		path = url + 7;
	if (path[0] != '/')
		return ckpt_fail(CKPT_E_INVAL, "remote %s: a file:// url names an absolute path "
				 "(file:///dir)", url);
	struct frmt *f = calloc(1, sizeof *f);
	if (!f || !(f->root = strdup(path)) || !(f->base.url = strdup(url))) {
		if (f)
			free(f->root);
		free(f);
		return ckpt_fail(CKPT_E_NOMEM, "remote %s: out of memory", url);
	}
	for (size_t n = strlen(f->root); n > 1 && f->root[n - 1] == '/'; n--)
		f->root[n - 1] = 0;
	/* The root itself is the operator's choice and may be a link (a mount point's alias);
	 * nothing below it is followed. */
	f->root_fd = open(f->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->root_fd < 0) {
		int e = errno;
		free(f->root);
		free(f->base.url);
		free(f);
		return ckpt_fail(ckpt_errno_code(e), "remote %s: %s%s", url, strerror(e),
				 e == ENOENT ? " (no such directory)" : "");
	}
	pthread_mutex_init(&f->bw_mu, NULL);
	f->base.ops = &rmt_file_ops;
	f->base.cfg = *cfg;
	*out = &f->base;
	return 0;
}

const struct rmt_ops rmt_file_ops = {
	.scheme = "file", .open = f_open, .close = f_close, .caps = f_caps, .put = f_put,
	.get = f_get, .stat = f_stat, .list = f_list, .del = f_del, .sweep = f_sweep,
};
