/* persist: settings written to sysfs vanish at reboot and when a drive is hot-plugged; a udev rules
 * file reapplies them on every add/change event. ASPM and APST are decided before userspace runs,
 * so for those the tool prints the kernel parameters to add instead. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *attr_of(enum knob_id k)
{
	switch (k) {
	case K_SCHEDULER: return "queue/scheduler";
	case K_NR_REQUESTS: return "queue/nr_requests";
	case K_READ_AHEAD: return "queue/read_ahead_kb";
	case K_MAX_SECTORS: return "queue/max_sectors_kb";
	case K_WRITE_CACHE: return "queue/write_cache";
	case K_APST: return "power/pm_qos_latency_tolerance_us";
	default: return NULL;
	}
}

/* Whether s can stand in a udev match as itself: udev matches values as patterns, so a serial
 * with '*', '?', '[...]' or '|' would also match other drives (and '"' or '\\' would end or
 * escape the string). Such a value is not used; the rule falls back to the kernel name. */
static bool udev_literal(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p >= 0x7f || strchr("\"\\*?[]|", *p))
			return false;
	return true;
}

/* The match part of a rule: serial + nsid for NVMe namespaces and the UUID for md arrays (kernel
 * names can change between boots), the kernel name otherwise. */
static void match_of(const char *dev, char *out, size_t len)
{
	char ctrl[64] = "", serial[64] = "", nsid[16] = "", uuid[64] = "", rel[PATH_MAX];
	/* an array assembled without mdadm.conf comes back as md127: match its UUID, which md
	 * shows once the array is active (the "change" event) */
	snprintf(rel, sizeof(rel), "block/%s/md/uuid", dev);
	if (!sys_read(rel, uuid, sizeof(uuid)) && uuid[0] && udev_literal(uuid)) {
		snprintf(out, len, "KERNEL==\"md*\", ATTR{md/uuid}==\"%s\"", uuid);
		return;
	}
	nvme_ctrl_of(dev, ctrl, sizeof(ctrl));
	if (ctrl[0]) {
		snprintf(rel, sizeof(rel), "class/nvme/%s/serial", ctrl);
		sys_read(rel, serial, sizeof(serial));
		snprintf(rel, sizeof(rel), "block/%s/nsid", dev);
		sys_read(rel, nsid, sizeof(nsid));
	}
	if (serial[0] && nsid[0] && udev_literal(serial) && udev_literal(nsid))
		snprintf(out, len, "KERNEL==\"nvme*n*\", ATTRS{serial}==\"%s\", ATTR{nsid}==\"%s\"", serial,
			 nsid);
	else
		snprintf(out, len, "KERNEL==\"%s\"", dev);
}

struct persist_args {
	const char *profile, *rules, *mdconf;
	bool dry, no_initramfs;
};

static const struct cli_opt persist_opts[] = {
	{CLI_OPT(CLI_STRING, "profile", 'p', CLI_AT(struct persist_args, profile), "P",
		 "checkpoint (default), default, or a profile file"),
	 .values = nt_profile_words, .complete = "@file"},
	{CLI_OPT(CLI_STRING, "rules", 0, CLI_AT(struct persist_args, rules), "FILE",
		 "rules file (default /etc/udev/rules.d/60-nvmetune.rules)"), .complete = "@file"},
	{CLI_OPT(CLI_STRING, "mdadm-conf", 0, CLI_AT(struct persist_args, mdconf), "FILE",
		 "when md arrays are active, write their ARRAY lines here (default\n"
		 "/etc/mdadm/mdadm.conf; with moved roots only when given), then\n"
		 "rebuild the initramfs so that they assemble at boot"), .complete = "@file"},
	{CLI_OPT(CLI_FLAG, "no-initramfs", 0, CLI_AT(struct persist_args, no_initramfs), NULL,
		 "do not rebuild the initramfs")},
	{CLI_OPT(CLI_FLAG, "dry-run", 'n', CLI_AT(struct persist_args, dry), NULL,
		 "print the rules, the ARRAY lines and the commands instead")},
	CLI_OPT_END,
};

const struct cli_cmd nt_cmd_persist = {
	.name = "persist", .fn = cmd_persist,
	.help = "write udev rules so settings survive reboot; print kernel parameters",
	.args = "[DEV ...]", .opts = persist_opts,
	.desc = "Writes udev rules that apply the profile's queue settings (and APST off) whenever a device\n"
		"appears, so they survive reboot and hotplug, and prints the kernel parameters to add for\n"
		"ASPM and APST. NVMe namespaces are matched by controller serial and namespace id.\n",
};

/* The rules file being written, and what its items said about the rest. */
struct rules {
	FILE *f;
	int n;                /* rules written */
	bool apst_off, vwc_on;
	const char *aspm;     /* the ASPM target, or NULL */
};

static bool is_ctrl_knob(enum knob_id k)
{
	return k == K_APST || k == K_VWC;
}

/* One rule: the items from i on of one device and kind (controller or block device). Returns the
 * index after them. */
static int write_rule(struct rules *r, const struct plan *pl, int i)
{
	const struct item *it = &pl->it[i];
	char line[2048] = "", match[256];
	bool ctrl_rule = is_ctrl_knob(it->knob), block = false;
	int j = i;
	for (; j < pl->n && !strcmp(pl->it[j].dev, it->dev) && is_ctrl_knob(pl->it[j].knob) == ctrl_rule;
	     j++) {
		const struct item *x = &pl->it[j];
		if (x->st != IS_SAME && x->st != IS_CHANGE)
			continue;
		if (x->knob == K_ASPM) {
			r->aspm = x->tgt;
			continue;
		}
		if (x->knob == K_APST && !strcmp(x->tgt, "0"))
			r->apst_off = true;
		if (x->knob == K_VWC) {
			r->vwc_on = !strcmp(x->tgt, "on");
			continue;
		}
		const char *a = attr_of(x->knob);
		if (!a || strchr(x->tgt, '"'))
			continue;
		snprintf(line + strlen(line), sizeof(line) - strlen(line), ", ATTR{%s}=\"%s\"", a, x->tgt);
		block = true;
	}
	if (block) {
		if (ctrl_rule) {
			fprintf(r->f, "ACTION==\"add\", SUBSYSTEM==\"nvme\", KERNEL==\"%s\"%s\n", it->dev, line);
		} else {
			match_of(it->dev, match, sizeof(match));
			fprintf(r->f, "ACTION==\"add|change\", SUBSYSTEM==\"block\", %s%s\n", match, line);
		}
		r->n++;
	}
	return j > i ? j : i + 1;
}

/* The rules file's text for the plan, in *text (malloc'd, tlen bytes). */
static void rules_text(const struct profile *p, const struct plan *pl, struct rules *r, char **text,
		       size_t *tlen)
{
	char when[32];
	r->f = open_memstream(text, tlen);
	now_iso(when, sizeof(when));
	fprintf(r->f, "# Written by nvmetune persist (profile %s) at %s.\n", p->name, when);
	fprintf(r->f, "# Applies the settings on every add/change event: boot, hotplug, array assembly.\n");
	fprintf(r->f, "# Assignments run in order: the scheduler before nr_requests (a scheduler change\n"
		      "# resets nr_requests), and members appear before their arrays.\n");
	for (int i = 0; i < pl->n;)
		i = write_rule(r, pl, i);
	if (r->vwc_on)
		fprintf(r->f, "# vwc: the NVMe volatile write cache is a drive feature, not a sysfs attribute;\n"
			      "# drives keep it on by default. To force it: nvme set-feature DEV -f 6 -v 1 -s\n");
	fclose(r->f);
}

/* The kernel parameters for what userspace cannot set: APST off, the ASPM policy. */
static void kernel_params(const struct profile *p, const struct rules *r, char *params, size_t len)
{
	const char *aspm = r->aspm;
	params[0] = 0;
	if (r->apst_off || (p->t[K_APST].kind == TG_AUTO))
		snprintf(params, len, "nvme_core.default_ps_max_latency_us=0");
	if (!aspm && p->t[K_ASPM].kind == TG_AUTO)
		aspm = "performance"; /* no runtime policy file: the parameter still applies at boot */
	if (aspm && !strcmp(aspm, "performance"))
		snprintf(params + strlen(params), len - strlen(params), "%spcie_aspm=off",
			 params[0] ? " " : "");
	else if (aspm && strcmp(aspm, "default"))
		snprintf(params + strlen(params), len - strlen(params), "%spcie_aspm.policy=%s",
			 params[0] ? " " : "", aspm);
}

static void report(const char *rules, bool dry, int nrules, const char *text, const char *params)
{
	struct jw jwv, *w = out_begin(&jwv);
	if (w) {
		jw_key(w, "rules_file");
		jw_str(w, rules);
		jw_key(w, "dry_run");
		jw_bool(w, dry);
		jw_key(w, "rules");
		jw_u64(w, (uint64_t)nrules);
		jw_key(w, "text");
		jw_str(w, text);
		jw_key(w, "kernel_parameters");
		jw_str(w, params);
		out_end(w);
		return;
	}
	if (dry)
		fputs(text, stdout);
	else
		printf("wrote %d rule%s to %s; apply now with: udevadm control --reload && "
		       "udevadm trigger --subsystem-match=block --subsystem-match=nvme\n",
		       nrules, nrules == 1 ? "" : "s", rules);
	if (params[0])
		printf("kernel parameters to add (e.g. GRUB_CMDLINE_LINUX in /etc/default/grub, then "
		       "update-grub): %s\n", params);
	else
		printf("kernel parameters to add: none\n");
}

int cmd_persist(int argc, char **argv)
{
	struct persist_args opt = {.rules = "/etc/udev/rules.d/60-nvmetune.rules"};
	int rc = cli_parse_opts(&nt_cmd_persist, &opt, &argc, argv);
	if (rc >= 0)
		return rc;
	const char *mdconf = opt.mdconf, *rules = opt.rules;
	bool dry = opt.dry;
	if (!dry && (rc = nt_need_root("persist")))
		return rc;
	struct profile p;
	struct plan pl;
	if ((rc = plan_load(opt.profile, argv + 1, argc - 1, &p, &pl)))
		return rc;
	struct rules r = {0};
	char *text = NULL, params[256];
	size_t tlen = 0;
	rules_text(&p, &pl, &r, &text, &tlen);
	kernel_params(&p, &r, params, sizeof(params));
	if (!dry && (rc = write_file_atomic(rules, text, tlen, 0644))) {
		cli_err("persist: %s: %s", rules, strerror(-rc));
		free(text);
		plan_free(&pl);
		return EXIT_FAIL;
	}
	report(rules, dry, r.n, text, params);
	free(text);
	plan_free(&pl);
	/* With moved roots (a test tree), the real /etc and initramfs are never touched. */
	if (nt.moved && !mdconf)
		return EXIT_OK;
	return persist_md(mdconf ? mdconf : "/etc/mdadm/mdadm.conf", dry,
			  !opt.no_initramfs && !nt.moved, !nt.json);
}
