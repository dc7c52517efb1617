/* raid add, replace and assemble: the day-two md operations next to create and stop, through
 * mdadm (an argv, no shell) after the same checks: a device that joins an array passes the safety
 * checks of safety.c unless --force, and permission problems are exit 7. */
#include "nvmetune.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

const struct cli_opt nt_raid_flag_opts[] = {
	{CLI_OPT(CLI_FLAG, "dry-run", 'n', CLI_AT(struct nt_raid_flags, dry), NULL,
		 "check the devices and print the exact mdadm command; run nothing")},
	{CLI_OPT(CLI_FLAG, "force", 'f', CLI_AT(struct nt_raid_flags, force), NULL,
		 "use devices the safety checks refuse (their data is lost)")},
	CLI_OPT_END,
};

const struct cli_cmd nt_cmd_raid_add = {
	.name = "raid add", .fn = raid_add, .args = "MD DEV ...", .opts = nt_raid_flag_opts,
};
const struct cli_cmd nt_cmd_raid_replace = {
	.name = "raid replace", .fn = raid_replace, .args = "MD OLD NEW", .opts = nt_raid_flag_opts,
};
struct assemble_args {
	bool dry;
	const char *config;
};
static const struct cli_opt assemble_opts[] = {
	{CLI_OPT(CLI_FLAG, "dry-run", 'n', CLI_AT(struct assemble_args, dry), NULL,
		 "check the devices and print the exact mdadm command; run nothing")},
	{CLI_OPT(CLI_STRING, "config", 0, CLI_AT(struct assemble_args, config), "FILE",
		 "without MD: the mdadm.conf whose ARRAY lines to assemble (mdadm\n"
		 "--config; default mdadm's, /etc/mdadm/mdadm.conf, where persist\n"
		 "writes them)"), .complete = "@file"},
	CLI_OPT_END,
};
const struct cli_cmd nt_cmd_raid_assemble = {
	.name = "raid assemble", .fn = raid_assemble, .args = "[MD DEV ...]", .opts = assemble_opts,
};

/* Parses [--dry-run] [--force] of sub; returns -1 when done (the operands in argv[1..*argc)),
 * else the exit status of a usage error. */
static int parse_flags(const struct cli_cmd *sub, int *argc, char **argv, bool *dry, bool *force)
{
	struct nt_raid_flags f = {0};
	int rc = cli_parse_opts(sub, &f, argc, argv);
	*dry = f.dry;
	*force = f.force;
	return rc;
}

int nt_md_resolve(const char *cmd, const char *arg, char *nm, size_t len)
{
	char rel[PATH_MAX];
	if (blk_resolve(arg, nm, len) || (snprintf(rel, sizeof(rel), "block/%s/md", nm),
					  !sys_is_dir(rel))) {
		cli_err("%s: %s: no such md array", cmd, arg);
		return EXIT_NOTFOUND;
	}
	return 0;
}

bool nt_md_active(const char *md, char *level, size_t len)
{
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "block/%s/md/level", md);
	/* a stopped array can linger in sysfs, inactive, with an empty level */
	return !sys_read(rel, level, len) && level[0];
}

int nt_md_new(const char *cmd, const char *arg, const char *what, char *md, size_t len)
{
	const char *b = strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg;
	unsigned num;
	char lv[32] = "";
	if (sscanf(b, "md%u", &num) != 1)
		return cli_usage_err(cmd, "bad %s '%s': expected /dev/mdN", what, arg);
	snprintf(md, len, "md%u", num);
	if (nt_md_active(md, lv, sizeof(lv))) {
		cli_err("%s: /dev/%s is already an active array (%s)", cmd, md, lv);
		return EXIT_FAIL;
	}
	return 0;
}

/* A device about to join an array: it exists, can be read, and passes the safety checks (unless
 * force). Fills nm and its path p. Returns 0 or the exit status (reported). */
static int joining(const char *cmd, const char *arg, bool force, char *nm, size_t nlen, char *p,
		   size_t plen)
{
	if (blk_resolve(arg, nm, nlen)) {
		cli_err("%s: %s: no such block device", cmd, arg);
		return EXIT_NOTFOUND;
	}
	dev_path(p, plen, nm);
	int rc = nt_check_readable(cmd, p);
	if (rc)
		return rc;
	char why[1024];
	if (!safety_refuse(nm, why, sizeof(why)))
		return 0;
	if (force) {
		cli_err("%s: %s: %s; overriding (--force)", cmd, p, why);
		return 0;
	}
	cli_err("%s: %s: refused: %s; nothing was done (--force overrides, and destroys what is on it)",
		cmd, p, why);
	return EXIT_REFUSED;
}

int nt_mdadm_run(const char *cmd, char **av)
{
	int rc = run_argv(av);
	if (rc == -2 /* -ENOENT */) {
		cli_err("%s: mdadm not found (install the mdadm package)", cmd);
		return EXIT_FAIL;
	}
	if (rc) {
		cli_err("%s: mdadm failed (exit %d); command: see --dry-run", cmd, rc);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int run_or_print(const char *cmd, char **av, bool dry, const char *done)
{
	if (dry) {
		print_argv(stdout, av);
		return EXIT_OK;
	}
	int rc = nt_mdadm_run(cmd, av);
	if (rc)
		return rc;
	printf("%s\n", done);
	return EXIT_OK;
}

int raid_add(int argc, char **argv)
{
	const char *cmd = "raid add";
	bool dry = false, force = false;
	int rc = parse_flags(&nt_cmd_raid_add, &argc, argv, &dry, &force);
	if (rc >= 0)
		return rc;
	if (argc - 1 < 2)
		return cli_usage_err(cmd, "expected MD and the device(s) to add");
	if (argc - 1 > 33)
		return cli_usage_err(cmd, "too many devices");
	char md[64], mdp[PATH_MAX], nm[32][64], p[32][PATH_MAX], done[PATH_MAX + 32];
	if ((rc = nt_md_resolve(cmd, argv[1], md, sizeof(md))))
		return rc;
	if (!dry && (rc = nt_need_root(cmd)))
		return rc;
	char *av[40];
	int k = 0, n = argc - 1 - 1;
	dev_path(mdp, sizeof(mdp), md);
	av[k++] = "mdadm";
	av[k++] = mdp;
	av[k++] = "--add";
	for (int i = 0; i < n; i++) {
		if ((rc = joining(cmd, argv[2 + i], force, nm[i], sizeof(nm[i]), p[i],
				  sizeof(p[i]))))
			return rc;
		av[k++] = p[i];
	}
	av[k] = NULL;
	snprintf(done, sizeof(done), "added to %s", mdp);
	return run_or_print(cmd, av, dry, done);
}

int raid_replace(int argc, char **argv)
{
	const char *cmd = "raid replace";
	bool dry = false, force = false;
	int rc = parse_flags(&nt_cmd_raid_replace, &argc, argv, &dry, &force);
	if (rc >= 0)
		return rc;
	if (argc - 1 != 3)
		return cli_usage_err(cmd, "expected MD, the member to replace and the new device");
	char md[64], mdp[PATH_MAX], old[64], oldp[PATH_MAX], nw[64], nwp[PATH_MAX], rel[PATH_MAX];
	char done[4 * PATH_MAX];
	if ((rc = nt_md_resolve(cmd, argv[1], md, sizeof(md))))
		return rc;
	if (blk_resolve(argv[2], old, sizeof(old)) ||
	    (snprintf(rel, sizeof(rel), "block/%s/slaves/%s", md, old), !sys_is_dir(rel))) {
		cli_err("%s: %s is not a member of /dev/%s", cmd, argv[2], md);
		return EXIT_NOTFOUND;
	}
	if (!dry && (rc = nt_need_root(cmd)))
		return rc;
	/* A spare of the array (raid add) is the array's already: held by it, with its superblock,
	 * which the safety checks would refuse; it is used as it is. */
	char st[64] = "";
	bool spare = !blk_resolve(argv[3], nw, sizeof(nw)) &&
		     (snprintf(rel, sizeof(rel), "block/%s/md/dev-%s/state", md, nw),
		      !sys_read(rel, st, sizeof(st))) && !strcmp(st, "spare");
	if (spare)
		dev_path(nwp, sizeof(nwp), nw);
	else if ((rc = joining(cmd, argv[3], force, nw, sizeof(nw), nwp, sizeof(nwp))))
		return rc;
	dev_path(mdp, sizeof(mdp), md);
	dev_path(oldp, sizeof(oldp), old);
	/* The new device joins as a spare (unless it is one) and is rebuilt from the old one while the
	 * old one stays in service (no degraded window), which is then marked faulty: mdadm's hot
	 * replace. */
	char *add[] = {"mdadm", mdp, "--add", nwp, "--replace", oldp, "--with", nwp, NULL};
	char *use[] = {"mdadm", mdp, "--replace", oldp, "--with", nwp, NULL};
	snprintf(done, sizeof(done), "replacing %s with %s in %s (cat /proc/mdstat for progress)",
		 oldp, nwp, mdp);
	return run_or_print(cmd, spare ? use : add, dry, done);
}

int raid_assemble(int argc, char **argv)
{
	const char *cmd = "raid assemble";
	struct assemble_args o = {0};
	int rc = cli_parse_opts(&nt_cmd_raid_assemble, &o, &argc, argv);
	bool dry = o.dry;
	if (rc >= 0)
		return rc;
	if (argc - 1 == 1 || argc - 1 > 65)
		return cli_usage_err(cmd, "expected nothing (every array mdadm.conf or the members' "
				     "superblocks describe), or MD and its members");
	if (o.config && argc > 1)
		return cli_usage_err(cmd, "--config applies without MD (the arrays of that file)");
	if (!dry && (rc = nt_need_root(cmd)))
		return rc;
	if (o.config && access(o.config, R_OK)) {
		int e = errno;
		cli_err("%s: --config %s: %s", cmd, o.config, strerror(e));
		return e == ENOENT ? EXIT_NOTFOUND : e == EACCES || e == EPERM ? EXIT_PERM : EXIT_FAIL;
	}
	char md[64], mdp[PATH_MAX], nm[64], p[64][PATH_MAX], conf[PATH_MAX + 16];
	char *av[72];
	int k = 0;
	av[k++] = "mdadm";
	av[k++] = "--assemble";
	if (argc == 1) {
		av[k++] = "--scan";
		if (o.config) {
			snprintf(conf, sizeof(conf), "--config=%s", o.config);
			av[k++] = conf;
		}
		av[k] = NULL;
		if ((rc = nt_md_driver(cmd, NULL, dry)))
			return rc;
		return run_or_print(cmd, av, dry, "assembled the arrays mdadm found");
	}
	if ((rc = nt_md_new(cmd, argv[1], "array", md, sizeof(md))))
		return rc;
	dev_path(mdp, sizeof(mdp), md);
	av[k++] = mdp;
	av[k++] = "--run";
	for (int i = 2; i < argc; i++) {
		if (blk_resolve(argv[i], nm, sizeof(nm))) {
			cli_err("%s: %s: no such block device", cmd, argv[i]);
			return EXIT_NOTFOUND;
		}
		dev_path(p[i - 2], sizeof(p[0]), nm);
		if ((rc = nt_check_readable(cmd, p[i - 2])))
			return rc;
		av[k++] = p[i - 2];
	}
	av[k] = NULL;
	if ((rc = nt_md_driver(cmd, NULL, dry)))
		return rc;
	char done[PATH_MAX + 16];
	snprintf(done, sizeof(done), "assembled %s", mdp);
	return run_or_print(cmd, av, dry, done);
}
