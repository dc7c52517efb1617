/* nvmetune: provisions NVMe storage for checkpoints. The command table and the options every
 * command takes (roots, state file, --json); the commands live in their own files. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char summary[] = "Provisions NVMe storage for checkpoints: status, tuning profiles "
			      "with rollback, md RAID 0/10, udev persistence, benchmark.";

static const struct cli_cmd *const cmds[] = {
	&nt_cmd_status, &nt_cmd_plan,    &nt_cmd_apply,  &nt_cmd_rollback,
	&nt_cmd_raid,   &nt_cmd_persist, &nt_cmd_format, &nt_cmd_bench,
	NULL,
};

struct global_args {
	bool json;
	const char *sys, *dev, *proc, *state;
};

static const struct cli_opt global_opts[] = {
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct global_args, json), NULL, "JSON output")},
	{CLI_OPT(CLI_STRING, "sysfs-root", 0, CLI_AT(struct global_args, sys), "DIR",
		 "read and write sysfs under DIR instead of /sys (also NVMETUNE_SYSFS_ROOT)"),
	 .complete = "@dir"},
	{CLI_OPT(CLI_STRING, "dev-root", 0, CLI_AT(struct global_args, dev), "DIR",
		 "device nodes under DIR instead of /dev (also NVMETUNE_DEV_ROOT)"),
	 .complete = "@dir"},
	{CLI_OPT(CLI_STRING, "proc-root", 0, CLI_AT(struct global_args, proc), "DIR",
		 "/proc under DIR (mountinfo, cmdline) (also NVMETUNE_PROC_ROOT)"),
	 .complete = "@dir"},
	{CLI_OPT(CLI_STRING, "state", 0, CLI_AT(struct global_args, state), "FILE",
		 "state file for apply/rollback (default /var/lib/nvmetune/state.json)"),
	 .complete = "@file"},
	CLI_OPT_END,
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
	struct global_args g = {
		.sys = getenv("NVMETUNE_SYSFS_ROOT"),
		.dev = getenv("NVMETUNE_DEV_ROOT"),
		.proc = getenv("NVMETUNE_PROC_ROOT"),
	};
	int rc = cli_take_opts(global_opts, &g, argc, argv);
	if (rc >= 0)
		return rc;
	nt.json = g.json;
	set_root(nt.sys_root, sizeof(nt.sys_root), g.sys, "/sys");
	set_root(nt.dev_root, sizeof(nt.dev_root), g.dev, "/dev");
	set_root(nt.proc_root, sizeof(nt.proc_root), g.proc, "/proc");
	set_root(nt.state_file, sizeof(nt.state_file), g.state, "/var/lib/nvmetune/state.json");
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
	cli_global_opts = global_opts;
	/* Completion asks for the options, whatever the roots. */
	if (argc >= 2 && !strcmp(argv[1], "__complete"))
		return cli_complete(cmds, argc - 1, argv + 1);
	int rc = take_globals(&argc, argv);
	if (rc >= 0)
		return rc;
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		rc = cli_dispatch(summary, cmds, argc, argv);
		cli_print_options(stdout, global_opts, "Options for every command:", false);
		printf("\nExit status: 0 ok, 1 failed, 2 usage, 3 another apply/rollback is running, 4 device "
		       "or state not found,\n5 some settings did not take, 6 device refused by the "
		       "safety checks, 7 permission denied,\n8 plan --check found drift.\n"
		       "See nvmetune(1).\n");
		return rc;
	}
	return cli_dispatch(summary, cmds, argc, argv);
}
