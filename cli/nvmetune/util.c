/* Small helpers: atomic file writes, running a program with an argv (never a shell), errno names. */
#include "nvmetune.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int mkdir_p(const char *dir)
{
	char b[PATH_MAX];
	snprintf(b, sizeof(b), "%s", dir);
	for (char *p = b + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(b, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(b, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

/* Temporary file + fsync + rename: a crash leaves the old file or the new one, never half of one
 * (the state file is what rollback depends on). */
int write_file_atomic(const char *path, const char *data, size_t len, int mode)
{
	char dir[PATH_MAX], tmp[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		int rc = mkdir_p(dir);
		if (rc)
			return rc;
	}
	/* mkostemp: O_EXCL and an unpredictable name, so that a file or symbolic link planted at
	 * the temporary name (this runs as root, in /etc) is never written through. */
	snprintf(tmp, sizeof(tmp), "%s.tmpXXXXXX", path);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, (mode_t)mode)) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return -e;
	}
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return -e;
		}
		off += (size_t)w;
	}
	if (fsync(fd) || close(fd)) {
		int e = errno;
		unlink(tmp);
		return -e;
	}
	if (rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		return -e;
	}
	return 0;
}

int read_file(const char *path, char **data, size_t *len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);
	if (!b) {
		fclose(f);
		return -ENOMEM;
	}
	for (;;) {
		if (n + 1 >= cap) {
			char *nb = realloc(b, cap * 2);
			if (!nb) {
				free(b);
				fclose(f);
				return -ENOMEM;
			}
			b = nb;
			cap *= 2;
		}
		size_t r = fread(b + n, 1, cap - n - 1, f);
		if (r == 0)
			break;
		n += r;
	}
	int err = ferror(f) ? -EIO : 0;
	fclose(f);
	if (err) {
		free(b);
		return err;
	}
	b[n] = 0;
	*data = b;
	if (len)
		*len = n;
	return 0;
}

/* stdin is /dev/null: mdadm asks "Continue creating array?" on stdin and aborts on EOF, and the
 * tool must never hang on a prompt. */
int run_argv(char *const argv[])
{
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd >= 0) {
			dup2(fd, 0);
			if (fd > 0)
				close(fd);
		}
		execvp(argv[0], argv);
		fprintf(stderr, "%s: cannot run %s: %s\n", cli_prog, argv[0], strerror(errno));
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(st))
		return WEXITSTATUS(st) == 127 ? -ENOENT : WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

void print_argv(FILE *f, char *const argv[])
{
	for (int i = 0; argv[i]; i++) {
		const char *a = argv[i];
		bool plain = *a != 0;
		for (const char *c = a; *c; c++)
			if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=/.,:+@%", *c))
				plain = false;
		if (i)
			fputc(' ', f);
		if (plain) {
			fputs(a, f);
		} else {
			fputc('\'', f);
			for (const char *c = a; *c; c++) {
				if (*c == '\'')
					fputs("'\\''", f);
				else
					fputc(*c, f);
			}
			fputc('\'', f);
		}
	}
	fputc('\n', f);
}

static const struct {
	int e;
	const char *n;
} enames[] = {
	{EINVAL, "EINVAL"}, {EPERM, "EPERM"}, {EACCES, "EACCES"}, {ENOENT, "ENOENT"},
	{EBUSY, "EBUSY"}, {EIO, "EIO"}, {ENODEV, "ENODEV"}, {EOPNOTSUPP, "EOPNOTSUPP"},
	{EROFS, "EROFS"}, {ENOSPC, "ENOSPC"}, {ENXIO, "ENXIO"}, {ENOTTY, "ENOTTY"},
};

const char *errno_name(int err)
{
	for (size_t i = 0; i < sizeof(enames) / sizeof(enames[0]); i++)
		if (enames[i].e == err)
			return enames[i].n;
	return "E?";
}

int errno_from_name(const char *s)
{
	for (size_t i = 0; i < sizeof(enames) / sizeof(enames[0]); i++)
		if (!strcmp(enames[i].n, s))
			return enames[i].e;
	return -1;
}

void now_iso(char *buf, size_t len)
{
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* One apply or rollback at a time: two would each save the other's values as "previous". The
 * lock is held until the process exits. */
int lock_state(const char *cmd)
{
	char p[PATH_MAX + 8], dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", nt.state_file);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		mkdir_p(dir);
	}
	snprintf(p, sizeof(p), "%s.lock", nt.state_file);
	int fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		cli_err("%s: %s: %s", cmd, p, strerror(errno));
		return EXIT_FAIL;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		int e = errno;
		close(fd);
		if (e == EWOULDBLOCK) {
			cli_err("%s: another nvmetune apply or rollback holds %s; try again when it ends",
				cmd, p);
			return EXIT_BUSY;
		}
		cli_err("%s: %s: %s", cmd, p, strerror(e));
		return EXIT_FAIL;
	}
	return EXIT_OK; /* fd stays open on purpose */
}

void *array_room(void *arr, int n, int *cap, int first, size_t size)
{
	if (n < *cap)
		return arr;
	int c = *cap ? *cap * 2 : first;
	void *p = realloc(arr, (size_t)c * size);
	if (!p) {
		cli_err("out of memory");
		exit(EXIT_FAIL);
	}
	*cap = c;
	return p;
}
