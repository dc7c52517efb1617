/* md RAID through mdadm, the canonical implementation: the tool builds an argv and execs it (no
 * shell, so no quoting bugs and no injection), after the safety checks of safety.c. mdadm runs
 * with --run and stdin on /dev/null: without --run mdadm 4.2 asks "Continue creating array?" for
 * members with old signatures and aborts on EOF, and the tool has already asked that question. */
#include "nvmetune.h"

#include <errno.h>
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
		jw_key(w, "layout");
		if (lay[0])
			jw_str(w, lay);
		else
			jw_null(w);
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
	char **all;
	int n = sys_list("block", "md", &all), k = 0;
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		char rel[PATH_MAX];
		snprintf(rel, sizeof(rel), "block/%s/md", all[i]);
		if (sys_is_dir(rel))
			all[k++] = all[i];
		else
			free(all[i]);
	}
	*out = all;
	return k;
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
	uint64_t chunk;
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
		 "check the devices and print the exact mdadm command; run nothing")},
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
		"rebuilds a member onto a new device while the member stays in service (mdadm --replace);\n"
		"the new devices pass the same checks. assemble starts arrays after a reboot or a move:\n"
		"every array mdadm finds (--scan), or MD from the members named.\n",
	.tail = "\n"
		"Exit status: 0 ok, 1 mdadm failed, 2 usage, 4 no such device, 6 refused, 7 permission\n"
		"denied.\n",
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
			char nm[64], rel[PATH_MAX];
			if (blk_resolve(argv[i], nm, sizeof(nm)) ||
			    (snprintf(rel, sizeof(rel), "block/%s/md", nm), !sys_is_dir(rel))) {
				cli_err("raid status: %s: no such md array", argv[i]);
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
	if (nt.json) {
		struct jw w;
		jw_init(&w, stdout, true);
		jw_obj_begin(&w);
		jw_key(&w, "arrays");
		raid_report(&w, names, n);
		jw_obj_end(&w);
		jw_finish(&w);
	} else {
		raid_report(NULL, names, n);
	}
	names_free(names, n);
	return EXIT_OK;
}

static int raid_create(int argc, char **argv)
{
	struct create_args opt = {.chunk = 512 * 1024};
	int c = cli_parse_opts(&raid_create_cmd, &opt, &argc, argv);
	if (c >= 0)
		return c;
	const char *level = opt.level, *layout = opt.layout, *name = opt.name, *bitmap = opt.bitmap;
	const char *md = opt.md;
	uint64_t chunk = opt.chunk;
	bool clean = opt.clean, dry = opt.dry, force = opt.force;
	if (!level || (strcmp(level, "0") && strcmp(level, "10")))
		return cli_usage_err("raid create", "--level 0 or --level 10 is required");
	bool r10 = !strcmp(level, "10");
	if (layout && !r10)
		return cli_usage_err("raid create", "--layout applies to RAID 10 only");
	if (layout && strcmp(layout, "n2") && strcmp(layout, "f2") && strcmp(layout, "o2"))
		return cli_usage_err("raid create", "bad layout '%s': n2, f2 or o2", layout);
	if (bitmap && strcmp(bitmap, "none") && strcmp(bitmap, "internal"))
		return cli_usage_err("raid create", "bad bitmap '%s': none or internal", bitmap);
	if (bitmap && !strcmp(bitmap, "internal") && !r10)
		return cli_usage_err("raid create", "RAID 0 has no redundancy, so no write-intent bitmap");
	if (clean && !r10)
		return cli_usage_err("raid create", "--assume-clean applies to RAID 10 only");
	if (name && (!*name || strchr(name, '/') || strlen(name) > 32))
		return cli_usage_err("raid create", "bad name '%s'", name);
	int ndev = argc - 1;
	if (ndev < 2)
		return cli_usage_err("raid create", "at least 2 devices are needed");
	if (ndev > 64)
		return cli_usage_err("raid create", "too many devices");
	if (!dry && (c = nt_need_root("raid create")))
		return c;

	char names[64][64], mdname[64];
	for (int i = 0; i < ndev; i++) {
		if (blk_resolve(argv[1 + i], names[i], sizeof(names[i]))) {
			cli_err("raid create: %s: no such block device", argv[1 + i]);
			return EXIT_NOTFOUND;
		}
		for (int j = 0; j < i; j++)
			if (!strcmp(names[i], names[j]))
				return cli_usage_err("raid create", "%s is named twice", argv[1 + i]);
	}
	if (md) {
		const char *b = strrchr(md, '/') ? strrchr(md, '/') + 1 : md;
		unsigned num;
		if (sscanf(b, "md%u", &num) != 1)
			return cli_usage_err("raid create", "bad --md '%s': expected /dev/mdN", md);
		snprintf(mdname, sizeof(mdname), "md%u", num);
		char rel[PATH_MAX];
		snprintf(rel, sizeof(rel), "block/%s/md/level", mdname);
		char lv[32] = "";
		if (!sys_read(rel, lv, sizeof(lv)) && lv[0]) {
			cli_err("raid create: /dev/%s is already an active array (%s)", mdname, lv);
			return EXIT_FAIL;
		}
	} else {
		for (unsigned num = 0;; num++) {
			char rel[PATH_MAX];
			/* a stopped array can linger in sysfs, inactive, with an empty level */
			char lv[32] = "";
			snprintf(rel, sizeof(rel), "block/md%u/md/level", num);
			if (sys_read(rel, lv, sizeof(lv)) || !lv[0]) {
				snprintf(mdname, sizeof(mdname), "md%u", num);
				break;
			}
		}
	}

	for (int i = 0; i < ndev; i++) {
		char p[PATH_MAX];
		dev_path(p, sizeof(p), names[i]);
		if ((c = nt_check_readable("raid create", p)))
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
			cli_err("raid create: %s: %s; overriding (--force)", p, why);
		} else {
			cli_err("raid create: %s: refused: %s", p, why);
			refused++;
		}
	}
	if (refused) {
		cli_err("raid create: %d device%s refused; nothing was done (--force overrides, and "
			"destroys what is on them)", refused, refused > 1 ? "s" : "");
		return EXIT_REFUSED;
	}

	char a_md[PATH_MAX], a_level[16], a_layout[16], a_chunk[32], a_bitmap[24], a_name[48], a_n[24];
	char paths[64][PATH_MAX];
	char *av[96];
	int k = 0;
	dev_path(a_md, sizeof(a_md), mdname);
	av[k++] = "mdadm";
	av[k++] = "--create";
	av[k++] = a_md;
	av[k++] = "--run";
	av[k++] = "--metadata=1.2";
	snprintf(a_level, sizeof(a_level), "--level=%s", level);
	av[k++] = a_level;
	if (r10) {
		snprintf(a_layout, sizeof(a_layout), "--layout=%s", layout ? layout : "n2");
		av[k++] = a_layout;
	}
	snprintf(a_chunk, sizeof(a_chunk), "--chunk=%lluK", (unsigned long long)(chunk / 1024));
	av[k++] = a_chunk;
	if (r10) {
		/* mdadm adds an internal bitmap to big arrays by default; say what we want */
		snprintf(a_bitmap, sizeof(a_bitmap), "--bitmap=%s", bitmap ? bitmap : "none");
		av[k++] = a_bitmap;
	}
	if (clean)
		av[k++] = "--assume-clean";
	if (name) {
		snprintf(a_name, sizeof(a_name), "--name=%s", name);
		av[k++] = a_name;
	}
	snprintf(a_n, sizeof(a_n), "--raid-devices=%d", ndev);
	av[k++] = a_n;
	for (int i = 0; i < ndev; i++) {
		dev_path(paths[i], sizeof(paths[i]), names[i]);
		av[k++] = paths[i];
	}
	av[k] = NULL;

	if (dry) {
		print_argv(stdout, av);
		return EXIT_OK;
	}
	int rc = run_argv(av);
	if (rc == -ENOENT) {
		cli_err("raid create: mdadm not found (install the mdadm package)");
		return EXIT_FAIL;
	}
	if (rc) {
		cli_err("raid create: mdadm failed (exit %d); command: see --dry-run", rc);
		return EXIT_FAIL;
	}
	char rel[PATH_MAX], lv[32] = "";
	snprintf(rel, sizeof(rel), "block/%s/md/level", mdname);
	if (sys_read(rel, lv, sizeof(lv)) || strcmp(lv, r10 ? "raid10" : "raid0")) {
		cli_err("raid create: mdadm succeeded but %s reports level '%s'", mdname, lv);
		return EXIT_FAIL;
	}
	char *one[1] = {mdname};
	printf("created %s\n", a_md);
	raid_report(NULL, one, 1);
	return EXIT_OK;
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
		char nm[64], rel[PATH_MAX], where[PATH_MAX], p[PATH_MAX];
		if (blk_resolve(argv[i], nm, sizeof(nm)) ||
		    (snprintf(rel, sizeof(rel), "block/%s/md", nm), !sys_is_dir(rel))) {
			cli_err("raid stop: %s: no such md array", argv[i]);
			return EXIT_NOTFOUND;
		}
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
