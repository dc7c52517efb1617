/* md RAID through mdadm, the canonical implementation: the tool builds an argv and execs it (no
 * shell, so no quoting bugs and no injection), after the safety checks of safety.c. mdadm runs
 * with --run and stdin on /dev/null: without --run mdadm 4.2 asks "Continue creating array?" for
 * members with old signatures and aborts on EOF, and the tool has already asked that question. */
#include "nvmetune.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *raid10_layout(uint64_t layout, char *buf, size_t len)
{
	unsigned near = layout & 0xff, far = (layout >> 8) & 0xff;
	if (layout & 0x10000)
		snprintf(buf, len, "o%u", far);
	else if (far > 1)
		snprintf(buf, len, "f%u", far);
	else
		snprintf(buf, len, "n%u", near);
	return buf;
}

/* Prints one array (text) or one JSON object. */
static void report_array(struct jw *w, const char *md)
{
	char rel[PATH_MAX], level[32] = "?", state[32] = "?", sync[32] = "", lay[16] = "";
	uint64_t chunk = 0, layout = 0, disks = 0, degraded = 0, size = 0;
#define RD(attr, buf) (snprintf(rel, sizeof(rel), "block/%s/" attr, md), sys_read(rel, buf, sizeof(buf)))
#define RU(attr, v) (snprintf(rel, sizeof(rel), "block/%s/" attr, md), sys_read_u64(rel, &v))
	RD("md/level", level);
	RD("md/array_state", state);
	RD("md/sync_action", sync);
	RU("md/chunk_size", chunk);
	RU("md/raid_disks", disks);
	RU("md/degraded", degraded);
	RU("size", size);
	bool have_layout = !RU("md/layout", layout);
#undef RD
#undef RU
	if (!strcmp(level, "raid10") && have_layout)
		raid10_layout(layout, lay, sizeof(lay));
	char **m;
	snprintf(rel, sizeof(rel), "block/%s/slaves", md);
	int nm = sys_list(rel, NULL, &m);
	if (w) {
		jw_obj_begin(w);
		jw_key(w, "name");
		jw_str(w, md);
		jw_key(w, "level");
		jw_str(w, level);
		jw_key(w, "chunk_bytes");
		jw_u64(w, chunk);
		out_str(w, "layout", lay[0] ? lay : NULL);
		jw_key(w, "raid_disks");
		jw_u64(w, disks);
		jw_key(w, "degraded");
		jw_u64(w, degraded);
		jw_key(w, "state");
		jw_str(w, state);
		jw_key(w, "sync_action");
		jw_str(w, sync);
		jw_key(w, "size_bytes");
		jw_u64(w, size * 512);
		jw_key(w, "members");
		jw_arr_begin(w);
		for (int i = 0; i < nm; i++)
			jw_str(w, m[i]);
		jw_arr_end(w);
		jw_obj_end(w);
	} else {
		char sz[32], ck[32];
		printf("%-8s %-7s chunk %-8s layout %-4s disks %-3llu size %-10s state %s%s%s%s members:",
		       md, level, chunk ? cli_fmt_iec(chunk, ck, sizeof(ck)) : "-", lay[0] ? lay : "-",
		       (unsigned long long)disks, cli_fmt_iec(size * 512, sz, sizeof(sz)), state,
		       degraded ? " DEGRADED" : "", sync[0] && strcmp(sync, "idle") ? " " : "",
		       sync[0] && strcmp(sync, "idle") ? sync : "");
		for (int i = 0; i < nm; i++)
			printf(" %s", m[i]);
		printf("\n");
	}
	if (nm > 0)
		names_free(m, nm);
}

int raid_list(char ***out)
{
	return sys_list_keep("block", "md", blk_is_md, out);
}

void raid_report(struct jw *w, char **names, int n)
{
	if (w)
		jw_arr_begin(w);
	else if (!n)
		printf("(no md arrays)\n");
	for (int i = 0; i < n; i++)
		report_array(w, names[i]);
	if (w)
		jw_arr_end(w);
}

struct create_args {
	const char *level, *layout, *name, *bitmap, *md;
	uint64_t chunk, size;
	bool clean, dry, force;
};

static const char *const level_words[] = {"0", "10", NULL};
static const char *const layout_words[] = {"n2", "f2", "o2", NULL};
static const char *const bitmap_words[] = {"none", "internal", NULL};
static const char *const chunk_words[] = {"64K", "128K", "256K", "512K", "1M", NULL};

/* level, layout and bitmap are checked together after parsing, as they depend on each other. */
static const struct cli_opt create_opts[] = {
	{CLI_OPT(CLI_STRING, "level", 'l', CLI_AT(struct create_args, level), "0|10", "RAID level"),
	 .values = level_words, .flags = CLI_REQUIRED},
	{CLI_OPT(CLI_STRING, "layout", 0, CLI_AT(struct create_args, layout), "n2|f2|o2",
		 "RAID 10 copies: near (default), far (faster reads), offset"),
	 .values = layout_words},
	{CLI_OPT(CLI_SIZE, "chunk", 'c', CLI_AT(struct create_args, chunk), "SIZE",
		 "chunk size, a power of two >= 4K (default 512K)"),
	 .values = chunk_words, .min = 4096, .flags = CLI_POW2,
	 .bad = "bad chunk size '%s': a power of two of at least 4K"},
	{CLI_OPT(CLI_SIZE, "size", 0, CLI_AT(struct create_args, size), "SIZE",
		 "RAID 10: use only SIZE of each device (mdadm --size; default all);\n"
		 "the rest stays unwritten: over-provisioning for the drive, and a\n"
		 "shorter resync or rebuild"),
	 .min = 1024 * 1024, .bad = "bad size '%s': at least 1M"},
	{CLI_OPT(CLI_STRING, "name", 0, CLI_AT(struct create_args, name), "NAME",
		 "array name (/dev/md/NAME with udev)")},
	{CLI_OPT(CLI_STRING, "bitmap", 0, CLI_AT(struct create_args, bitmap), "none|internal",
		 "RAID 10 write-intent bitmap (default none: the bitmap costs write\n"
		 "throughput; internal shortens resync after a crash)"),
	 .values = bitmap_words},
	{CLI_OPT(CLI_FLAG, "assume-clean", 0, CLI_AT(struct create_args, clean), NULL,
		 "RAID 10: skip the initial resync; right for new or fully trimmed\n"
		 "drives, whose mirrors already match (all zeros)")},
	{CLI_OPT(CLI_STRING, "md", 0, CLI_AT(struct create_args, md), "/dev/mdN",
		 "the array device (default: the first free /dev/mdN)")},
	{CLI_OPT(CLI_FLAG, "dry-run", 'n', CLI_AT(struct create_args, dry), NULL,
		 "check the devices and print the exact mdadm command; run nothing\n"
		 "(without a md driver, still print it, with a warning; --json: an\n"
		 "object with md, modprobe, command and warnings)")},
	{CLI_OPT(CLI_FLAG, "force", 'f', CLI_AT(struct create_args, force), NULL,
		 "use devices the safety checks refuse (their data is lost)")},
	CLI_OPT_END,
};

static int raid_create(int argc, char **argv);
static int raid_status(int argc, char **argv);
static int raid_stop(int argc, char **argv);

static const struct cli_opt no_opts[] = {CLI_OPT_END};

static const struct cli_cmd raid_create_cmd = {
	.name = "raid create", .fn = raid_create, .args = "DEV ...", .opts = create_opts,
};
static const struct cli_cmd raid_status_cmd = {
	.name = "raid status", .fn = raid_status, .args = "[MD ...]", .opts = no_opts,
};
static const struct cli_cmd raid_stop_cmd = {
	.name = "raid stop", .fn = raid_stop, .args = "MD ...", .opts = nt_raid_flag_opts,
};
static const struct cli_cmd *const raid_subs[] = {
	&raid_create_cmd, &raid_status_cmd, &raid_stop_cmd, &nt_cmd_raid_add, &nt_cmd_raid_replace,
	&nt_cmd_raid_assemble, NULL,
};

const struct cli_cmd nt_cmd_raid = {
	.name = "raid", .fn = cmd_raid, .help = "create, show or stop md RAID 0/10 arrays (through mdadm)",
	.subs = raid_subs,
	.desc = "create builds an md array with mdadm (RAID 0 for throughput, RAID 10 to survive a drive).\n"
		"A device that is mounted, held open, partitioned, or carries a filesystem, RAID or\n"
		"partition-table signature is refused with the reason, unless --force.\n"
		"add puts devices into an array (as spares, or to grow it with mdadm --grow); replace\n"
		"rebuilds a member onto a new device, or a spare of the array, while the member stays in\n"
		"service (mdadm --replace); new devices pass the same checks. assemble starts arrays after\n"
		"a reboot or a move: every array mdadm finds (--scan, or those of --config FILE), or MD\n"
		"from the members named.\n",
	.tail = "\n"
		"Before mdadm runs, create and assemble check that the kernel has md and the RAID level\n"
		"(/proc/mdstat), loading what is missing with modprobe (a dry run prints those lines, and\n"
		"warns instead of refusing when md is missing).\n"
		"Exit status: 0 ok, 1 mdadm failed or this kernel has no md driver, 2 usage, 4 no such\n"
		"device, 6 refused, 7 permission denied.\n",
};

static int raid_status(int argc, char **argv)
{
	char **names;
	int n = cli_parse_opts(&raid_status_cmd, NULL, &argc, argv);
	if (n >= 0)
		return n;
	if (argc > 1) {
		names = calloc((size_t)argc, sizeof(*names));
		n = 0;
		for (int i = 1; i < argc; i++) {
			char nm[64];
			if (nt_md_resolve("raid status", argv[i], nm, sizeof(nm))) {
				names_free(names, n);
				return EXIT_NOTFOUND;
			}
			names[n++] = strdup(nm);
		}
	} else {
		n = raid_list(&names);
		if (n < 0) {
			cli_err("raid status: cannot list %s/block: %s", nt.sys_root, strerror(-n));
			return EXIT_FAIL;
		}
	}
	struct jw jwv, *w = out_begin(&jwv);
	if (w)
		jw_key(w, "arrays");
	raid_report(w, names, n);
	out_end(w);
	names_free(names, n);
	return EXIT_OK;
}

#define CMD_CREATE "raid create"

/* The checks of options that depend on each other and of the device count. Returns -1 when they
 * pass, else the exit status of the usage error (reported). */
static int check_create_opts(const struct create_args *o, int ndev)
{
	const char *level = o->level, *layout = o->layout, *bitmap = o->bitmap, *name = o->name;
	if (!level || (strcmp(level, "0") && strcmp(level, "10")))
		return cli_usage_err(CMD_CREATE, "--level 0 or --level 10 is required");
	bool r10 = !strcmp(level, "10");
	if (layout && !r10)
		return cli_usage_err(CMD_CREATE, "--layout applies to RAID 10 only");
	if (layout && strcmp(layout, "n2") && strcmp(layout, "f2") && strcmp(layout, "o2"))
		return cli_usage_err(CMD_CREATE, "bad layout '%s': n2, f2 or o2", layout);
	if (bitmap && strcmp(bitmap, "none") && strcmp(bitmap, "internal"))
		return cli_usage_err(CMD_CREATE, "bad bitmap '%s': none or internal", bitmap);
	if (bitmap && !strcmp(bitmap, "internal") && !r10)
		return cli_usage_err(CMD_CREATE, "RAID 0 has no redundancy, so no write-intent bitmap");
	if (o->clean && !r10)
		return cli_usage_err(CMD_CREATE, "--assume-clean applies to RAID 10 only");
	if (o->size && !r10)
		return cli_usage_err(CMD_CREATE, "--size applies to RAID 10 only (RAID 0 uses whole devices)");
	if (o->size && o->size < o->chunk)
		return cli_usage_err(CMD_CREATE, "--size is smaller than the chunk");
	if (name && (!*name || strchr(name, '/') || strlen(name) > 32))
		return cli_usage_err(CMD_CREATE, "bad name '%s'", name);
	if (ndev < 2)
		return cli_usage_err(CMD_CREATE, "at least 2 devices are needed");
	if (ndev > 64)
		return cli_usage_err(CMD_CREATE, "too many devices");
	return -1;
}

/* The members' kernel names, each once. Returns -1, or the exit status (reported). */
static int resolve_members(char **args, int ndev, char names[][64])
{
	for (int i = 0; i < ndev; i++) {
		if (blk_resolve(args[i], names[i], sizeof(names[i]))) {
			cli_err(CMD_CREATE ": %s: no such block device", args[i]);
			return EXIT_NOTFOUND;
		}
		for (int j = 0; j < i; j++)
			if (!strcmp(names[i], names[j]))
				return cli_usage_err(CMD_CREATE, "%s is named twice", args[i]);
	}
	return -1;
}

/* --size fits on every member (mdadm would fail after the checks). Returns -1 or EXIT_USAGE. */
static int check_size(uint64_t size, char names[][64], int ndev)
{
	for (int i = 0; size && i < ndev; i++) {
		struct blockdev d;
		char a[32], b[32];
		if (!blk_info(names[i], &d) && d.size < size)
			return cli_usage_err(CMD_CREATE, "--size %s exceeds %s (%s)",
					     cli_fmt_iec(size, a, sizeof(a)), names[i],
					     cli_fmt_iec(d.size, b, sizeof(b)));
	}
	return -1;
}

/* The new array: --md when given (not an active one), else the first free mdN. Returns 0 or the
 * exit status (reported). */
static int pick_md(const char *md, char *mdname, size_t len)
{
	if (md)
		return nt_md_new(CMD_CREATE, md, "--md", mdname, len);
	for (unsigned num = 0;; num++) {
		char lv[32] = "";
		snprintf(mdname, len, "md%u", num);
		if (!nt_md_active(mdname, lv, sizeof(lv)))
			return 0;
	}
}

/* Every member can be read (permission problems first: exit 7), then the safety checks: all
 * refusals are listed before giving up, unless force. Returns 0 or the exit status. */
static int check_members(char names[][64], int ndev, bool force)
{
	int c;
	for (int i = 0; i < ndev; i++) {
		char p[PATH_MAX];
		dev_path(p, sizeof(p), names[i]);
		if ((c = nt_check_readable(CMD_CREATE, p)))
			return c;
	}
	int refused = 0;
	for (int i = 0; i < ndev; i++) {
		char why[1024];
		if (!safety_refuse(names[i], why, sizeof(why)))
			continue;
		char p[PATH_MAX];
		dev_path(p, sizeof(p), names[i]);
		if (force) {
			cli_err(CMD_CREATE ": %s: %s; overriding (--force)", p, why);
		} else {
			cli_err(CMD_CREATE ": %s: refused: %s", p, why);
			refused++;
		}
	}
	if (refused) {
		cli_err(CMD_CREATE ": %d device%s refused; nothing was done (--force overrides, and "
			"destroys what is on them)", refused, refused > 1 ? "s" : "");
		return EXIT_REFUSED;
	}
	return 0;
}

/* The mdadm --create command line and the strings it points into. */
struct create_argv {
	char md[PATH_MAX], level[16], layout[16], chunk[32], size[40], bitmap[24], name[48], n[32];
	char paths[64][PATH_MAX];
	char *av[96];
};

static void build_create_argv(struct create_argv *a, const struct create_args *o,
			      const char *mdname, char names[][64], int ndev)
{
	bool r10 = !strcmp(o->level, "10");
	int k = 0;
	dev_path(a->md, sizeof(a->md), mdname);
	a->av[k++] = "mdadm";
	a->av[k++] = "--create";
	a->av[k++] = a->md;
	a->av[k++] = "--run";
	a->av[k++] = "--metadata=1.2";
	snprintf(a->level, sizeof(a->level), "--level=%s", o->level);
	a->av[k++] = a->level;
	if (r10) {
		snprintf(a->layout, sizeof(a->layout), "--layout=%s", o->layout ? o->layout : "n2");
		a->av[k++] = a->layout;
	}
	snprintf(a->chunk, sizeof(a->chunk), "--chunk=%lluK", (unsigned long long)(o->chunk / 1024));
	a->av[k++] = a->chunk;
	if (r10) {
		/* mdadm adds an internal bitmap to big arrays by default; say what we want */
		snprintf(a->bitmap, sizeof(a->bitmap), "--bitmap=%s", o->bitmap ? o->bitmap : "none");
		a->av[k++] = a->bitmap;
	}
	if (o->size) {
		/* mdadm takes KiB and rounds down to a whole chunk */
		snprintf(a->size, sizeof(a->size), "--size=%lluK", (unsigned long long)(o->size / 1024));
		a->av[k++] = a->size;
	}
	if (o->clean)
		a->av[k++] = "--assume-clean";
	if (o->name) {
		snprintf(a->name, sizeof(a->name), "--name=%s", o->name);
		a->av[k++] = a->name;
	}
	snprintf(a->n, sizeof(a->n), "--raid-devices=%d", ndev);
	a->av[k++] = a->n;
	for (int i = 0; i < ndev; i++) {
		dev_path(a->paths[i], sizeof(a->paths[i]), names[i]);
		a->av[k++] = a->paths[i];
	}
	a->av[k] = NULL;
}

/* Runs mdadm, then checks that the array is there at the level asked for and shows it. */
static int run_create(const struct create_argv *a, char *mdname, bool r10)
{
	int rc = nt_mdadm_run(CMD_CREATE, (char **)a->av);
	if (rc)
		return rc;
	char rel[PATH_MAX], lv[32] = "";
	snprintf(rel, sizeof(rel), "block/%s/md/level", mdname);
	if (sys_read(rel, lv, sizeof(lv)) || strcmp(lv, r10 ? "raid10" : "raid0")) {
		cli_err(CMD_CREATE ": mdadm succeeded but %s reports level '%s'", mdname, lv);
		return EXIT_FAIL;
	}
	char *one[1] = {mdname};
	struct jw w, *j = out_begin(&w);
	if (j) { /* as raid status --json, with the device made */
		jw_key(j, "created"); jw_str(j, a->md);
		jw_key(j, "arrays");
	} else {
		printf("created %s\n", a->md);
	}
	raid_report(j, one, 1);
	out_end(j);
	return EXIT_OK;
}

/* The plan of a dry run: a warning when the kernel lacks md (a real run would stop there), the
 * modprobe lines and the mdadm command; with --json one object: dry_run, md, modprobe (the
 * modules), command (mdadm's argv) and warnings. */
static int print_plan(const struct create_argv *a, const struct nt_md_plan *plan)
{
	struct jw w, *j = out_begin(&w);
	if (!j) {
		if (*plan->warning)
			cli_err(CMD_CREATE ": warning: %s", plan->warning);
		for (int i = 0; i < plan->nload; i++)
			printf("modprobe %s\n", plan->load[i]);
		print_argv(stdout, (char *const *)a->av);
		return EXIT_OK;
	}
	jw_key(j, "dry_run"); jw_bool(j, true);
	jw_key(j, "md"); jw_str(j, a->md);
	jw_key(j, "modprobe");
	jw_arr_begin(j);
	for (int i = 0; i < plan->nload; i++)
		jw_str(j, plan->load[i]);
	jw_arr_end(j);
	jw_key(j, "command");
	jw_arr_begin(j);
	for (int i = 0; a->av[i]; i++)
		jw_str(j, a->av[i]);
	jw_arr_end(j);
	jw_key(j, "warnings");
	jw_arr_begin(j);
	if (*plan->warning)
		jw_str(j, plan->warning);
	jw_arr_end(j);
	out_end(j);
	return EXIT_OK;
}

static int raid_create(int argc, char **argv)
{
	struct create_args opt = {.chunk = 512 * 1024};
	int c = cli_parse_opts(&raid_create_cmd, &opt, &argc, argv);
	if (c >= 0)
		return c;
	int ndev = argc - 1;
	if ((c = check_create_opts(&opt, ndev)) >= 0)
		return c;
	if (!opt.dry && (c = nt_need_root(CMD_CREATE)))
		return c;
	char names[64][64], mdname[64];
	if ((c = resolve_members(argv + 1, ndev, names)) >= 0 || (c = check_size(opt.size, names, ndev)) >= 0)
		return c;
	if ((c = pick_md(opt.md, mdname, sizeof(mdname))) || (c = check_members(names, ndev, opt.force)))
		return c;
	/* after the devices (their refusals come first), before mdadm: without md, mdadm would
	 * make a /dev/mdN node and leave it behind */
	struct nt_md_plan plan = {.nload = 0};
	if ((c = nt_md_check(CMD_CREATE, opt.level, opt.dry, &plan)))
		return c;
	struct create_argv a;
	build_create_argv(&a, &opt, mdname, names, ndev);
	if (opt.dry)
		return print_plan(&a, &plan);
	return run_create(&a, mdname, !strcmp(opt.level, "10"));
}

static int raid_stop(int argc, char **argv)
{
	struct nt_raid_flags opt = {0};
	int c = cli_parse_opts(&raid_stop_cmd, &opt, &argc, argv);
	if (c >= 0)
		return c;
	bool dry = opt.dry, force = opt.force;
	if (argc < 2)
		return cli_usage_err("raid stop", "name the array(s) to stop");
	if (!dry && (c = nt_need_root("raid stop")))
		return c;
	int ret = EXIT_OK;
	for (int i = 1; i < argc; i++) {
		char nm[64], where[PATH_MAX], p[PATH_MAX];
		if (nt_md_resolve("raid stop", argv[i], nm, sizeof(nm)))
			return EXIT_NOTFOUND;
		if (dev_mounted(nm, where, sizeof(where)) && !force) {
			cli_err("raid stop: /dev/%s: refused: mounted on %s (unmount it first)", nm, where);
			ret = EXIT_REFUSED;
			continue;
		}
		dev_path(p, sizeof(p), nm);
		char *av[] = {"mdadm", "--stop", p, NULL};
		if (dry) {
			print_argv(stdout, av);
			continue;
		}
		int rc = run_argv(av);
		if (rc) {
			cli_err("raid stop: %s: mdadm --stop failed (exit %d)", p, rc);
			ret = EXIT_FAIL;
			continue;
		}
		printf("stopped %s\n", p);
	}
	return ret;
}

int cmd_raid(int argc, char **argv)
{
	return cli_dispatch_sub(&nt_cmd_raid, argc, argv);
}
