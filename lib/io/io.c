/* psync engine, the choice of the engine the library uses (ckpt_io_default), and the small
 * whole-file helpers the store uses. */
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#ifdef CKPT_TEST_HOOKS
#include "io/fault.h"
#endif

static ssize_t ps_pwrite(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }
static ssize_t ps_pread(int fd, void *buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
static int ps_fdatasync(int fd) { return fdatasync(fd); }

const struct ckpt_io_ops ckpt_io_psync = {"psync", ps_pwrite, ps_pread, ps_fdatasync};

/* The test build chooses the fault engine (io/fault.c) while a fault is armed; the release build
 * has no injector, so its I/O never checks for one. */
#ifdef CKPT_TEST_HOOKS
const struct ckpt_io_ops *ckpt_io_default(void)
{
	return ckpt_io_fault_armed() ? &ckpt_io_fault : &ckpt_io_psync;
}
#else
const struct ckpt_io_ops *ckpt_io_default(void) { return &ckpt_io_psync; }
#endif

int io_write_all(const struct ckpt_io_ops *io, int fd, const void *buf, size_t n, uint64_t off,
		 const char *path)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t r = io->pwrite(fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			return ckpt_fail(ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO,
					 "write %s at offset %llu: %s", path, (unsigned long long)off,
					 strerror(e));
		}
		if (r == 0)
			return ckpt_fail(CKPT_E_IO, "write %s: no progress", path);
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int io_read_all(const struct ckpt_io_ops *io, int fd, void *buf, size_t n, uint64_t off,
		const char *path)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = io->pread(fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			return ckpt_fail(CKPT_E_IO, "read %s at offset %llu: %s", path,
					 (unsigned long long)off, strerror(e));
		}
		if (r == 0)
			return ckpt_fail(CKPT_E_CORRUPT, "%s: truncated (ends before offset %llu)", path,
					 (unsigned long long)(off + n));
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int io_slurp(const char *path, size_t max, uint8_t **out, size_t *len)
{
	/* Store files are never symbolic links; one planted in a store is refused, not followed. */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP)
		return ckpt_fail(CKPT_E_PERM, "%s: is a symbolic link; refusing to follow it", path);
	if (fd < 0) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "open %s: %s", path, strerror(e));
	}
	struct stat st;
	if (fstat(fd, &st)) {
		int e = errno;
		close(fd);
		return ckpt_fail(CKPT_E_IO, "stat %s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return ckpt_fail(CKPT_E_PERM, "%s: not a regular file; refusing it", path);
	}
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return ckpt_fail(CKPT_E_CORRUPT, "%s: %llu bytes, more than the %zu allowed", path,
				 (unsigned long long)st.st_size, max);
	}
	uint8_t *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		close(fd);
		return ckpt_fail(CKPT_E_NOMEM, "reading %s: out of memory", path);
	}
	int rc = io_read_all(&ckpt_io_psync, fd, buf, (size_t)st.st_size, 0, path);
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = (size_t)st.st_size;
	return 0;
}

int io_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "open directory %s: %s", dir, strerror(e));
	}
	int r = fsync(fd);
	int e = errno;
	close(fd);
	if (r)
		return ckpt_fail(CKPT_E_IO, "fsync directory %s: %s", dir, strerror(e));
	return 0;
}

/* Creates ".NAME.tmp.PID.RANDOM" in dir, exclusively: a name an attacker cannot predict, and
 * O_EXCL|O_NOFOLLOW so that a planted file or symbolic link is never written through (a
 * predictable name opened with O_TRUNC let anyone who can write into a store make a root job
 * overwrite any file). gc removes leftovers by the ".tmp." in the name. Returns the fd or
 * -CKPT_E_*. */
int io_create_tmp(const char *dir, const char *name, char *tmp, size_t tmplen)
{
	for (int attempt = 0; attempt < 16; attempt++) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
			r = (uint64_t)ckpt_wall_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)attempt;
		snprintf(tmp, tmplen, "%s/.%s.tmp.%d.%016llx", dir, name, (int)getpid(),
			 (unsigned long long)r);
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST) {
			int e = errno;
			return ckpt_fail(ckpt_errno_code(e), "create %s: %s", tmp, strerror(e));
		}
	}
	return ckpt_fail(CKPT_E_IO, "create a temporary file for %s/%s: every name taken", dir, name);
}

/* Writes data into a new temporary file next to dir/name (its path in tmp), synced and closed.
 * Returns 0 or -CKPT_E_* (the temporary file is then already removed). */
static int write_tmp_durable(const char *dir, const char *name, const void *data, size_t len,
			     char *tmp, size_t tmp_len)
{
	const struct ckpt_io_ops *io = ckpt_io_default();
	int fd = io_create_tmp(dir, name, tmp, tmp_len);
	if (fd < 0)
		return fd;
	int rc = io_write_all(io, fd, data, len, 0, tmp);
	if (!rc && io->fdatasync(fd)) {
		int e = errno;
		rc = ckpt_fail(ckpt_errno_code(e) == CKPT_E_NOSPC ? CKPT_E_NOSPC : CKPT_E_IO,
			       "fsync %s: %s", tmp, strerror(e));
	}
	if (close(fd) && !rc) {
		int e = errno;
		rc = ckpt_fail(CKPT_E_IO, "close %s: %s", tmp, strerror(e));
	}
	if (rc)
		unlink(tmp);
	return rc;
}

int io_write_atomic(const char *dir, const char *name, const void *data, size_t len, int *renamed)
{
	if (renamed)
		*renamed = 0;
	char tmp[4096], dst[4096];
	snprintf(dst, sizeof dst, "%s/%s", dir, name);
	int rc = write_tmp_durable(dir, name, data, len, tmp, sizeof tmp);
	if (rc)
		return rc;
	if (rename(tmp, dst)) {
		int e = errno;
		unlink(tmp);
		return ckpt_fail(ckpt_errno_code(e), "rename %s to %s: %s", tmp, dst, strerror(e));
	}
	if (renamed)
		*renamed = 1;
	return io_fsync_dir(dir);
}

int io_write_new(const char *dir, const char *name, const void *data, size_t len, int *linked)
{
	if (linked)
		*linked = 0;
	char tmp[4096], dst[4096];
	snprintf(dst, sizeof dst, "%s/%s", dir, name);
	int rc = write_tmp_durable(dir, name, data, len, tmp, sizeof tmp);
	if (rc)
		return rc;
	/* link() never replaces: of several creators racing, exactly one file wins. */
	int exists = 0;
	if (link(tmp, dst)) {
		int e = errno;
		if (e == EEXIST)
			exists = 1;
		else
			rc = ckpt_fail(ckpt_errno_code(e), "link %s to %s: %s", tmp, dst, strerror(e));
	} else if (linked) {
		*linked = 1;
	}
	unlink(tmp);
	if (rc)
		return rc;
	return exists ? 1 : io_fsync_dir(dir);
}
