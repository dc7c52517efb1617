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

/* What to do about a denial e: run as root; but root denied has nothing to gain from that
 * advice: EPERM (or EACCES) under root comes from a policy above permissions, a container's device
 * cgroup or a security module, and EROFS from a read-only mount. */
const char *nt_perm_hint(int e, bool root, char *buf, size_t len)
{
	if (!root)
		snprintf(buf, len, "run as root");
	else if (e == EROFS)
		snprintf(buf, len, "its file system is mounted read-only");
	else
		snprintf(buf, len, "refused although running as root: a container's device cgroup or "
			 "a security policy denies it");
	return buf;
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
	int e = errno;
	char hint[160];
	cli_err("%s: cannot read %s: %s: the safety checks need to look at it (%s)", cmd, path,
		strerror(e), nt_perm_hint(e, geteuid() == 0, hint, sizeof(hint)));
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
	char why[160];
	cli_err("%s: cannot write %s: %s (%s%s%s)", cmd, path, strerror(e),
		nt_perm_hint(e, geteuid() == 0, why, sizeof(why)), hint ? ", or " : "",
		hint ? hint : "");
	return EXIT_PERM;
}
