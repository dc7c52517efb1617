/* Errors (codes, names, the per-thread detailed message), clocks, aligned allocation. */
#include "common/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

#ifndef CKPT_VERSION_STRING
#define CKPT_VERSION_STRING "0.1.0"
#endif

/* One message per thread: callers read it right after the failing call, as with errno. */
static __thread char errmsg[1024];

CKPT_API const char *ckpt_version(void)
{
	return CKPT_VERSION_STRING;
}

CKPT_API const char *ckpt_strerror(int err)
{
	static const char *names[CKPT_E__COUNT] = {
		[CKPT_OK] = "success",
		[CKPT_E_IO] = "I/O error",
		[CKPT_E_NOMEM] = "out of memory",
		[CKPT_E_INVAL] = "invalid argument",
		[CKPT_E_CORRUPT] = "corrupt data",
		[CKPT_E_CHECKSUM] = "checksum mismatch",
		[CKPT_E_VERSION] = "unsupported format version",
		[CKPT_E_UNSUPPORTED] = "not supported",
		[CKPT_E_BUSY] = "store busy",
		[CKPT_E_NOSPC] = "no space left on device",
		[CKPT_E_NOTFOUND] = "not found",
		[CKPT_E_EXISTS] = "already exists",
		[CKPT_E_STATE] = "invalid state",
		[CKPT_E_PERM] = "permission denied",
		[CKPT_E_CANCELED] = "canceled",
	};
	if (err < 0)
		err = -err;
	if (err >= CKPT_E__COUNT)
		return "unknown error";
	return names[err];
}

CKPT_API const char *ckpt_errmsg(void)
{
	return errmsg;
}

int ckpt_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof errmsg, fmt, ap);
	va_end(ap);
	return -err;
}

void ckpt_fail_prefix(const char *fmt, ...)
{
	char prefix[512], old[sizeof errmsg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof prefix, fmt, ap);
	va_end(ap);
	memcpy(old, errmsg, sizeof old);
	size_t n = strlen(prefix);
	if (n > sizeof errmsg - 3)
		n = sizeof errmsg - 3;
	memcpy(errmsg, prefix, n);
	memcpy(errmsg + n, ": ", 2);
	size_t room = sizeof errmsg - n - 3;
	size_t m = strnlen(old, room);
	memcpy(errmsg + n + 2, old, m);
	errmsg[n + 2 + m] = 0;
}

int ckpt_errno_code(int e)
{
	switch (e) {
	case ENOMEM: return CKPT_E_NOMEM;
	case ENOSPC: case EDQUOT: return CKPT_E_NOSPC;
	case EACCES: case EPERM: case EROFS: return CKPT_E_PERM;
	case ENOENT: case ENOTDIR: return CKPT_E_NOTFOUND;
	case EEXIST: return CKPT_E_EXISTS;
	case EINVAL: return CKPT_E_INVAL;
	case EWOULDBLOCK: return CKPT_E_BUSY;
	default: return CKPT_E_IO;
	}
}

double ckpt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int64_t ckpt_wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void *ckpt_aligned_alloc(size_t size)
{
	void *p = NULL;
	if (posix_memalign(&p, CKPT_ALIGN, size ? ALIGN_UP(size, CKPT_ALIGN) : CKPT_ALIGN))
		return NULL;
	return p;
}

int ckpt_grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 16;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * elem);
	if (!q)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	*p = q;
	*cap = n;
	return 0;
}

uint64_t ckpt_random64(void)
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
		r = (uint64_t)ckpt_wall_ns() * 0x9e3779b97f4a7c15ull;
	return r ? r : 1;
}
