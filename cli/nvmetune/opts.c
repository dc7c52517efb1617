/* The options every command shares, apart from main() so that unit tests can link the tool's
 * files without its entry point. */
#include "nvmetune.h"

#include <unistd.h>

struct nt_opts nt = {
	.sys_root = "/sys",
	.dev_root = "/dev",
	.proc_root = "/proc",
	.state_file = "/var/lib/nvmetune/state.json",
};

int nt_need_root(const char *cmd)
{
	if (nt.moved || geteuid() == 0)
		return EXIT_OK;
	cli_err("%s: must be run as root (it writes to %s and %s); try 'sudo nvmetune %s', or "
		"--dry-run to see what it would do", cmd, nt.sys_root, nt.dev_root, cmd);
	return EXIT_PERM;
}

