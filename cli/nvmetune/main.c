/* nvmetune: provisions NVMe storage for checkpoints. The command table and the options every
 * command takes (roots, state file, --json); the commands live in their own files. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_main_extra[] =
	"\nOptions for every command:\n"
	"  --json             JSON output\n"
	"  --sysfs-root DIR   read and write sysfs under DIR instead of /sys (also NVMETUNE_SYSFS_ROOT)\n"
	"  --dev-root DIR     device nodes under DIR instead of /dev (also NVMETUNE_DEV_ROOT)\n"
	"  --proc-root DIR    /proc under DIR (mountinfo, cmdline) (also NVMETUNE_PROC_ROOT)\n"
	"  --state FILE       state file for apply/rollback (default /var/lib/nvmetune/state.json)\n";

static const struct cli_cmd cmds[] = {
	{"status", cmd_status, "show NVMe controllers, md arrays, queue settings, ASPM, kernel parameters", usage_status},
	{"plan", cmd_plan, "show each knob: current -> target of a profile, and why", usage_plan},
	{"apply", cmd_apply, "apply a profile, read every value back, save the previous values", usage_apply},
	{"rollback", cmd_rollback, "restore the values saved by apply", usage_rollback},
	{"raid", cmd_raid, "create, show or stop md RAID 0/10 arrays (through mdadm)", usage_raid},
	{"persist", cmd_persist, "write udev rules so settings survive reboot; print kernel parameters", usage_persist},
	{"format", cmd_format, "reformat an NVMe namespace with a better LBA format (erases it; --force)", usage_format},
	{"bench", cmd_bench, "io_uring write/read sweep; recommend queue depth and I/O size for libckpt", usage_bench},
	{NULL, NULL, NULL, NULL},
};

static void set_root(char *dst, size_t len, const char *v, const char *def)
{
	if (!v || !*v)
		v = def;
	snprintf(dst, len, "%s", v);
	size_t n = strlen(dst);
	while (n > 1 && dst[n - 1] == '/')
		dst[--n] = 0;
}

/* Takes the global options out of argv wherever they appear (before "--"), so that both
 * "nvmetune --json status" and "nvmetune status --json" work. Returns -1 or an exit status. */
static int take_globals(int *argc, char **argv)
{
	const char *sys = getenv("NVMETUNE_SYSFS_ROOT"), *dev = getenv("NVMETUNE_DEV_ROOT"),
		   *proc = getenv("NVMETUNE_PROC_ROOT"), *state = NULL;
	int out = 1;
	bool dashdash = false;
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		const char **slot = NULL;
		const char *names[] = {"--sysfs-root", "--dev-root", "--proc-root", "--state"};
		const char **slots[] = {&sys, &dev, &proc, &state};
		if (!dashdash && !strcmp(a, "--"))
			dashdash = true;
		if (!dashdash && !strcmp(a, "--json")) {
			nt.json = true;
			continue;
		}
		for (int k = 0; !dashdash && k < 4; k++) {
			size_t l = strlen(names[k]);
			if (!strncmp(a, names[k], l) && (a[l] == 0 || a[l] == '=')) {
				slot = slots[k];
				if (a[l] == '=') {
					*slot = a + l + 1;
				} else if (i + 1 < *argc) {
					*slot = argv[++i];
				} else {
					cli_err("option %s needs an argument", names[k]);
					return EXIT_USAGE;
				}
				break;
			}
		}
		if (slot)
			continue;
		argv[out++] = argv[i];
	}
	argv[out] = NULL;
	*argc = out;
	set_root(nt.sys_root, sizeof(nt.sys_root), sys, "/sys");
	set_root(nt.dev_root, sizeof(nt.dev_root), dev, "/dev");
	set_root(nt.proc_root, sizeof(nt.proc_root), proc, "/proc");
	set_root(nt.state_file, sizeof(nt.state_file), state, "/var/lib/nvmetune/state.json");
	nt.moved = strcmp(nt.sys_root, "/sys") || strcmp(nt.dev_root, "/dev") ||
		   strcmp(nt.proc_root, "/proc");
	if (access(nt.sys_root, F_OK)) {
		cli_err("sysfs root %s: %s", nt.sys_root, strerror(errno));
		return EXIT_NOTFOUND;
	}
	return -1;
}

int main(int argc, char **argv)
{
	cli_prog = "nvmetune";
	int rc = take_globals(&argc, argv);
	if (rc >= 0)
		return rc;
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		rc = cli_dispatch("Provisions NVMe storage for checkpoints: status, tuning profiles with "
				  "rollback, md RAID 0/10, udev persistence, benchmark.", cmds, argc, argv);
		fputs(usage_main_extra, stdout);
		printf("\nExit status: 0 ok, 1 failed, 2 usage, 3 another apply/rollback is running, 4 device "
		       "or state not found,\n5 some settings did not take, 6 device refused by the "
		       "safety checks, 7 permission denied.\n"
		       "See nvmetune(1).\n");
		return rc;
	}
	return cli_dispatch("Provisions NVMe storage for checkpoints: status, tuning profiles with "
			    "rollback, md RAID 0/10, udev persistence, benchmark.", cmds, argc, argv);
}
