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

#endif
