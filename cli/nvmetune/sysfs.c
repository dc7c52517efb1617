/* The sysfs layer: every read and write of /sys, /dev and /proc goes through here, under roots that
 * tests move to a fake tree (--sysfs-root, --dev-root, --proc-root). libnvme 1.3 cannot be pointed
 * at another tree, which is why the tool walks sysfs itself. */
#include "nvmetune.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void sys_path(char *buf, size_t len, const char *rel)
{
	/* an over-long path must fail to open, never name a shorter path */
	if ((size_t)snprintf(buf, len, "%s/%s", nt.sys_root, rel) >= len)
		snprintf(buf, len, "/nonexistent/too-long");
}

void dev_path(char *buf, size_t len, const char *name)
{
	/* an over-long path must fail to open, never name a shorter path */
	if ((size_t)snprintf(buf, len, "%s/%s", nt.dev_root, name) >= len)
		snprintf(buf, len, "/nonexistent/too-long");
}

void proc_path(char *buf, size_t len, const char *rel)
{
	/* an over-long path must fail to open, never name a shorter path */
	if ((size_t)snprintf(buf, len, "%s/%s", nt.proc_root, rel) >= len)
		snprintf(buf, len, "/nonexistent/too-long");
}

bool sys_exists(const char *rel)
{
	char p[PATH_MAX];
	sys_path(p, sizeof(p), rel);
	return access(p, F_OK) == 0;
}

bool sys_is_dir(const char *rel)
{
	char p[PATH_MAX];
	struct stat st;
	sys_path(p, sizeof(p), rel);
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

void trim_copy(char *out, size_t len, const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	if (n >= len)
		n = len - 1;
	memcpy(out, s, n);
	out[n] = 0;
}

int sys_read(const char *rel, char *buf, size_t len)
{
	char p[PATH_MAX], tmp[4096];
	sys_path(p, sizeof(p), rel);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, tmp, sizeof(tmp) - 1);
	int err = errno;
	close(fd);
	if (n < 0)
		return -err;
	tmp[n] = 0;
	/* an attribute is one line; keep the first */
	char *nl = strchr(tmp, '\n');
	if (nl)
		*nl = 0;
	trim_copy(buf, len, tmp);
	return 0;
}

int sys_read_u64(const char *rel, uint64_t *out)
{
	char b[64];
	int rc = sys_read(rel, b, sizeof(b));
	if (rc)
		return rc;
	return cli_parse_u64(b, out) ? -EINVAL : 0;
}

/* Fault injection for fake trees (see nvmetune.h): only honoured when a root is moved, so that a
 * stray file in the real /sys can never change the tool's behaviour. */
static int injected(const char *p)
{
	char side[PATH_MAX + 8], b[32];
	snprintf(side, sizeof(side), "%s.fail", p);
	FILE *f = fopen(side, "re");
	if (f) {
		int e = EINVAL;
		if (fgets(b, sizeof(b), f)) {
			char t[32];
			trim_copy(t, sizeof(t), b);
			int v = errno_from_name(t);
			if (v > 0)
				e = v;
		}
		fclose(f);
		return -e;
	}
	snprintf(side, sizeof(side), "%s.sticky", p);
	if (access(side, F_OK) == 0)
		return 1;
	return 0;
}

int sys_write(const char *rel, const char *value)
{
	char p[PATH_MAX];
	sys_path(p, sizeof(p), rel);
	if (nt.moved) {
		int inj = injected(p);
		if (inj < 0)
			return inj;
		if (inj > 0)
			return access(p, W_OK) == 0 ? 0 : -errno;
	}
	/* O_TRUNC matters only for fake trees (plain files); sysfs ignores it */
	int fd = open(p, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t n = strlen(value);
	ssize_t w = write(fd, value, n);
	int err = errno;
	if (close(fd) && w >= 0)
		return -errno;
	if (w < 0)
		return -err;
	return (size_t)w == n ? 0 : -EIO;
}

/* Natural order: runs of digits compare as numbers, so nvme2n1 sorts before nvme10n1. */
int natcmp(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	while (*x && *y) {
		if (isdigit((unsigned char)*x) && isdigit((unsigned char)*y)) {
			char *ex, *ey;
			unsigned long long vx = strtoull(x, &ex, 10), vy = strtoull(y, &ey, 10);
			if (vx != vy)
				return vx < vy ? -1 : 1;
			x = ex;
			y = ey;
			continue;
		}
		if (*x != *y)
			return (unsigned char)*x - (unsigned char)*y;
		x++;
		y++;
	}
	return (unsigned char)*x - (unsigned char)*y;
}

int sys_list(const char *rel, const char *prefix, char ***out)
{
	char p[PATH_MAX];
	sys_path(p, sizeof(p), rel);
	*out = NULL;
	DIR *d = opendir(p);
	if (!d)
		return -errno;
	char **v = NULL;
	int n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (prefix && strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			char **nv = realloc(v, (size_t)cap * sizeof(*v));
			if (!nv) {
				closedir(d);
				names_free(v, n);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n] = strdup(e->d_name);
		if (!v[n]) {
			closedir(d);
			names_free(v, n);
			return -ENOMEM;
		}
		n++;
	}
	closedir(d);
	if (n)
		qsort(v, (size_t)n, sizeof(*v), natcmp);
	*out = v;
	return n;
}

int sys_list_keep(const char *rel, const char *prefix, bool (*keep)(const char *name), char ***out)
{
	char **all;
	int n = sys_list(rel, prefix, &all), k = 0;
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		if (keep(all[i]))
			all[k++] = all[i];
		else
			free(all[i]);
	}
	*out = all;
	return k;
}

void names_free(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

void bracket_value(const char *raw, char *out, size_t len)
{
	const char *l = strchr(raw, '['), *r = l ? strchr(l, ']') : NULL;
	if (!l || !r) {
		trim_copy(out, len, raw);
		return;
	}
	size_t n = (size_t)(r - l - 1);
	if (n >= len)
		n = len - 1;
	memcpy(out, l + 1, n);
	out[n] = 0;
}

bool bracket_has(const char *raw, const char *word)
{
	char b[512];
	snprintf(b, sizeof(b), "%s", raw);
	for (char *save = NULL, *t = strtok_r(b, " []\t", &save); t; t = strtok_r(NULL, " []\t", &save))
		if (!strcmp(t, word))
			return true;
	return false;
}
