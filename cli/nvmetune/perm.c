/* Permission problems, said as such: exit 7 (EXIT_PERM) with "permission denied" and what to do,
 * never a refusal of the safety checks (exit 6, which points at --force) nor a failure after a
 * long run (bench checks its config file before the sweep). */
#include "nvmetune.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <unistd.h>

static bool perm_errno(int e)
{
	return e == EACCES || e == EPERM || e == EROFS;
}

int nt_check_readable(const char *cmd, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0) {
		close(fd);
		return EXIT_OK;
	}
	if (!perm_errno(errno))
		return EXIT_OK; /* other problems are for the checks that follow to name */
	cli_err("%s: cannot read %s: %s: the safety checks need to look at it (run as root)", cmd,
		path, strerror(errno));
	return EXIT_PERM;
}

int nt_check_writable(const char *cmd, const char *path, const char *hint)
{
	char dir[PATH_MAX];
	int e = 0;
	if (!access(path, F_OK)) {
		if (access(path, W_OK))
			e = errno;
	} else {
		snprintf(dir, sizeof(dir), "%s", path);
		if (access(dirname(dir), W_OK | X_OK))
			e = errno;
	}
	if (!e || !perm_errno(e))
		return EXIT_OK;
	cli_err("%s: cannot write %s: %s (run as root%s%s)", cmd, path, strerror(e),
		hint ? ", or " : "", hint ? hint : "");
	return EXIT_PERM;
}
