/* Remotes for the remote-tier tests: CKPT_TEST_REMOTE names the remote (file:///dir, an absolute
 * path, or s3://bucket/prefix once the S3 backend is in), and each test takes a fresh prefix
 * under it; without it, a temporary directory. So the same tests run against radosgw by url. */
#ifndef CKPT_T_REMOTE_H
#define CKPT_T_REMOTE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

/* A fresh remote url for tag (malloc'd): $CKPT_TEST_REMOTE/tag-PID-RAND, or a new temporary
 * directory's absolute path. *cleanup (malloc'd, may be NULL) is a local directory to remove. */
static inline char *t_remote_url(const char *tag, char **cleanup)
{
	const char *base = getenv("CKPT_TEST_REMOTE");
	char *url = malloc(8192);
	*cleanup = NULL;
	if (!base || !*base) {
		char *d = t_tmpdir(tag);
		char *abs = realpath(d, NULL);
		free(d);
		snprintf(url, 8192, "%s", abs);
		*cleanup = abs;
		return url;
	}
	unsigned long long rnd = 0;
	if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		rnd = (unsigned long long)getpid() * 2654435761u;
	snprintf(url, 8192, "%s/%s-%d-%016llx", base, tag, (int)getpid(), rnd);
	const char *path = !strncmp(url, "file://", 7) ? url + 7 : url[0] == '/' ? url : NULL;
	if (path) { /* a directory remote must exist before it is opened */
		if (mkdir(path, 0755) != 0)
			perror(path);
		*cleanup = strdup(path);
	}
	return url;
}

/* base/name as a remote url (into buf): a directory remote's directory is made. */
static inline void t_remote_sub(const char *base, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", base, name);
	const char *path = !strncmp(buf, "file://", 7) ? buf + 7 : buf[0] == '/' ? buf : NULL;
	if (path && mkdir(path, 0755) != 0)
		perror(path);
}

/* Saves step into s: tensors "t0".."t<nt-1>", tbytes each, from data[]. */
static inline void t_remote_save(ckpt_store *s, uint64_t step, uint8_t *const *data, int nt,
				 uint64_t tbytes)
{
	uint64_t shape[1] = {tbytes};
	save1 *sv;
	REQUIRE(save1_begin(s, step, &sv) == 0);
	for (int i = 0; i < nt; i++) {
		char name[32];
		snprintf(name, sizeof name, "t%d", i);
		CHECK_OK(save1_add_tensor(sv, name, CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, data[i]));
	}
	REQUIRE(save1_commit(sv, NULL) == 0);
}

/* Restores the whole of global tensor name (ndim 1 or 2 dimensions of shape) of dr and compares
 * it with want (len bytes). */
static inline void t_remote_check_whole(dreader *dr, const char *name, unsigned ndim,
					const uint64_t *shape, const uint8_t *want, size_t len)
{
	uint8_t *got = calloc(1, len);
	uint64_t off[2] = {0, 0};
	long k = dreader_find(dr, name);
	REQUIRE(got && ndim <= 2);
	CHECK(k >= 0);
	if (k >= 0)
		CHECK_OK(dreader_restore_box(dr, (size_t)k, off, shape, got, len));
	CHECK(!memcmp(got, want, len));
	free(got);
}

/* The end of a test: its local directory and a directory remote removed, the strings freed;
 * returns t_done(). */
static inline int t_remote_done(char *dir, char *cleanup, char *url)
{
	t_rmrf(dir);
	free(dir);
	if (cleanup)
		t_rmrf(cleanup);
	free(cleanup);
	free(url);
	return t_done();
}

#endif
