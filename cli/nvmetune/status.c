/* status: what the storage looks like now. Controllers (sysfs + libnvme identify/features),
 * md arrays, each device's queue settings, the ASPM policy and the kernel parameters in effect.
 * Anything that cannot be read prints as "?" (or null in JSON) instead of failing the command. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A sysfs attribute of a status block: its JSON key, its path below the object's directory, and
 * the size it is read into (a longer value is cut there). Unreadable: "?". */
struct attr {
	const char *key, *rel;
	size_t len;
};
#define ATTR_MAX 128

static void read_attrs(const char *dir, const struct attr *a, size_t n, char (*v)[ATTR_MAX])
{
	for (size_t i = 0; i < n; i++) {
		char rel[PATH_MAX + 64]; /* dir is below PATH_MAX, a[i].rel a short name */
		snprintf(rel, sizeof(rel), "%s/%s", dir, a[i].rel);
		if (sys_read(rel, v[i], a[i].len))
			snprintf(v[i], a[i].len, "?");
	}
}

/* JSON: a string, or null for an unreadable "?" */
static void js(struct jw *w, const char *key, const char *v)
{
	out_str(w, key, strcmp(v, "?") ? v : NULL);
}

static void json_attrs(struct jw *w, const struct attr *a, size_t n, char (*v)[ATTR_MAX])
{
	for (size_t i = 0; i < n; i++)
		js(w, a[i].key, v[i]);
}

/* JSON: a boolean, or null for unknown (-1) */
static void jtri(struct jw *w, const char *key, int v)
{
	if (out_key(w, key, v >= 0))
		jw_bool(w, v);
}

/* Drive health (SMART log), as nvme smart-log shows its headline: printed only when the controller
 * answered identify (a fake tree has no controller to ask). */
static void health(struct jw *w, const char *ctrl, bool have_id)
{
	struct nvme_health h;
	nvme_health_query(ctrl, &h);
	if (w) {
		if (!out_key(w, "health", h.have))
			return;
		const struct out_u64 f[] = {
			{"critical_warning", h.crit_warning}, {"percent_used", h.percent_used},
			{"available_spare", h.avail_spare}, {"spare_threshold", h.spare_thresh},
			{"media_errors", h.media_errors},
		};
		jw_obj_begin(w);
		out_u64s(w, f, sizeof(f) / sizeof(f[0]));
		jw_key(w, "temperature_c");
		jw_i64(w, h.temp_c);
		jw_obj_end(w);
		return;
	}
	if (!h.have) {
		if (have_id)
			printf("    health: unknown (%s)\n", h.why);
		return;
	}
	if (h.crit_warning)
		printf("    health: CRITICAL WARNING 0x%02x", h.crit_warning);
	else
		printf("    health: ok");
	printf(", %u%% of endurance used, spare %u%% (threshold %u%%), %llu media error%s, %d C\n",
	       h.percent_used, h.avail_spare, h.spare_thresh, (unsigned long long)h.media_errors,
	       h.media_errors == 1 ? "" : "s", h.temp_c);
}

static const char *lba_str(uint32_t bytes, unsigned ms, char *buf, size_t len)
{
	if (bytes >= 1024 && !(bytes % 1024))
		snprintf(buf, len, "%u KiB", bytes / 1024);
	else
		snprintf(buf, len, "%u B", bytes);
	if (ms)
		snprintf(buf + strlen(buf), len - strlen(buf), "+%u", ms);
	return buf;
}

static void lba_json(struct jw *w, const struct nvme_lba *l)
{
	if (!out_key(w, "lba_formats", l->have))
		return;
	const struct out_u64 top[] = {{"current", l->cur}, {"best", l->best}};
	jw_obj_begin(w);
	out_u64s(w, top, 2);
	jw_key(w, "formats");
	jw_arr_begin(w);
	for (unsigned i = 0; i < l->n; i++) {
		const struct out_u64 f[] = {
			{"data_bytes", l->f[i].bytes}, {"metadata_bytes", l->f[i].ms},
			{"relative_performance", l->f[i].rp},
		};
		jw_obj_begin(w);
		out_u64s(w, f, 3);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	jw_obj_end(w);
}

static void lba_text(const struct nvme_lba *l)
{
	if (!l->have)
		return;
	char a[32], b[32];
	printf("      LBA format: %s (#%u)", lba_str(l->f[l->cur].bytes, l->f[l->cur].ms, a, sizeof(a)),
	       l->cur);
	if (l->best != l->cur)
		printf("; best supported %s (#%u): reformatting erases the namespace",
		       lba_str(l->f[l->best].bytes, l->f[l->best].ms, b, sizeof(b)), l->best);
	else
		printf(", the best supported");
	printf("\n      supported:");
	for (unsigned i = 0; i < l->n; i++)
		printf(" #%u %s%s", i, lba_str(l->f[i].bytes, l->f[i].ms, a, sizeof(a)),
		       i + 1 < l->n ? "," : "");
	printf("\n");
}

/* The LBA formats of a namespace: the one in use, the best for checkpoints, all supported. */
static void lba(struct jw *w, const char *ctrl, const char *dev)
{
	char rel[PATH_MAX], v[32] = "";
	snprintf(rel, sizeof(rel), "block/%s/nsid", dev);
	unsigned nsid = sys_read(rel, v, sizeof(v)) || !atoi(v) ? 1 : (unsigned)atoi(v);
	struct nvme_lba l;
	nvme_lba_query(ctrl, nsid, &l);
	if (w)
		lba_json(w, &l);
	else
		lba_text(&l);
}

static const char *tri(int v, const char *yes, const char *no)
{
	return v < 0 ? "unknown" : v ? yes : no;
}

/* The sysfs attributes of a controller (class/nvme/NAME/...), in the order of its JSON object. */
enum { C_MODEL, C_SERIAL, C_FW, C_TRANSPORT, C_STATE, C_QUEUES, C_SPEED, C_WIDTH, C_MAXSPEED,
       C_MAXWIDTH, C_PMQOS, C_N };
static const struct attr ctrl_attrs[C_N] = {
	[C_MODEL] = {"model", "model", 96},
	[C_SERIAL] = {"serial", "serial", 64},
	[C_FW] = {"firmware", "firmware_rev", 32},
	[C_TRANSPORT] = {"transport", "transport", 32},
	[C_STATE] = {"state", "state", 32},
	[C_QUEUES] = {"queue_count", "queue_count", 16},
	[C_SPEED] = {"link_speed", "device/current_link_speed", 48},
	[C_WIDTH] = {"link_width", "device/current_link_width", 16},
	[C_MAXSPEED] = {"max_link_speed", "device/max_link_speed", 48},
	[C_MAXWIDTH] = {"max_link_width", "device/max_link_width", 16},
	[C_PMQOS] = {"pm_qos_latency_tolerance_us", "power/pm_qos_latency_tolerance_us", 32},
};

/* Opens the controller's JSON object; its "namespaces" array stays open for the namespaces. */
static void ctrl_json(struct jw *w, const char *n, char (*v)[ATTR_MAX], const struct nvme_info *ni)
{
	jw_obj_begin(w);
	jw_key(w, "name");
	jw_str(w, n);
	json_attrs(w, ctrl_attrs, C_N, v);
	jtri(w, "vwc_present", ni->vwc_present);
	jtri(w, "vwc_enabled", ni->vwc_enabled);
	jtri(w, "apst_supported", ni->apst_supported);
	jtri(w, "apst_enabled", ni->apst_enabled);
	if (out_key(w, "io_queues_allocated", ni->nsqa >= 0))
		jw_i64(w, ni->nsqa);
	if (out_key(w, "mdts", ni->have_id))
		jw_u64(w, ni->mdts);
	js(w, "libnvme", ni->have_id ? "ok" : ni->why);
	health(w, n, ni->have_id);
	jw_key(w, "namespaces");
	jw_arr_begin(w);
}

static void ctrl_text(const char *n, char (*v)[ATTR_MAX], const struct nvme_info *ni)
{
	printf("  %s  %s  serial %s  firmware %s  %s %s\n", n, v[C_MODEL], v[C_SERIAL], v[C_FW],
	       v[C_TRANSPORT], v[C_STATE]);
	printf("    PCIe link %s x%s (max %s x%s)  queues in use %s (admin included)\n", v[C_SPEED],
	       v[C_WIDTH], v[C_MAXSPEED], v[C_MAXWIDTH], v[C_QUEUES]);
	printf("    volatile write cache: %s", tri(ni->vwc_present, "present", "absent"));
	if (ni->vwc_present == 1)
		printf(", %s", tri(ni->vwc_enabled, "enabled", "disabled"));
	printf("  APST: %s", tri(ni->apst_supported, "supported", "not supported"));
	if (ni->apst_supported == 1)
		printf(", %s", tri(ni->apst_enabled, "enabled", "disabled"));
	printf("  pm_qos_latency_tolerance_us: %s", strcmp(v[C_PMQOS], "?") ? v[C_PMQOS] : "absent");
	if (ni->nsqa >= 0)
		printf("  I/O queues allocated %d", ni->nsqa);
	printf("\n");
	if (!ni->have_id)
		printf("    (libnvme: %s)\n", ni->why);
	health(NULL, n, ni->have_id);
}

/* The namespaces of controller ctrl among devs. */
static void namespaces(struct jw *w, const char *ctrl, char **devs, int ndev)
{
	for (int j = 0; j < ndev; j++) {
		char c[64];
		nvme_ctrl_of(devs[j], c, sizeof(c));
		if (strcmp(c, ctrl))
			continue;
		struct blockdev d;
		if (blk_info(devs[j], &d))
			continue;
		char sz[32];
		if (w) {
			jw_obj_begin(w);
			jw_key(w, "name");
			jw_str(w, devs[j]);
			jw_key(w, "size_bytes");
			jw_u64(w, d.size);
			out_str(w, "array", d.array[0] ? d.array : NULL);
			lba(w, ctrl, devs[j]);
			jw_obj_end(w);
		} else {
			printf("    namespace %s  %s%s%s\n", devs[j], cli_fmt_iec(d.size, sz, sizeof(sz)),
			       d.array[0] ? "  member of " : "", d.array);
			lba(NULL, ctrl, devs[j]);
		}
	}
}

static void controllers(struct jw *w, char **devs, int ndev)
{
	char **c;
	int nc = sys_list("class/nvme", "nvme", &c);
	if (w) {
		jw_key(w, "controllers");
		jw_arr_begin(w);
	} else {
		printf("NVMe controllers:\n");
		if (nc <= 0)
			printf("  (none)\n");
	}
	for (int i = 0; i < nc; i++) {
		char dir[PATH_MAX], v[C_N][ATTR_MAX];
		snprintf(dir, sizeof(dir), "class/nvme/%s", c[i]);
		read_attrs(dir, ctrl_attrs, C_N, v);
		struct nvme_info ni;
		nvme_query(c[i], &ni);
		if (w)
			ctrl_json(w, c[i], v, &ni);
		else
			ctrl_text(c[i], v, &ni);
		namespaces(w, c[i], devs, ndev);
		if (w) {
			jw_arr_end(w);
			jw_obj_end(w);
		}
	}
	if (w)
		jw_arr_end(w);
	if (nc > 0)
		names_free(c, nc);
}

static void md_arrays(struct jw *w, char **md, int nmd)
{
	if (w) {
		jw_key(w, "md_arrays");
		raid_report(w, md, nmd);
		return;
	}
	printf("\nmd arrays:\n");
	for (int i = 0; i < nmd; i++)
		printf("  "), raid_report(NULL, md + i, 1);
	if (!nmd)
		printf("  (none)\n");
}

/* The queue attributes of a block device (block/NAME/queue/...): the first six are the text
 * columns after the name; in JSON all follow "scheduler" (the word in use). */
enum { Q_SCHED, Q_NR, Q_RA, Q_MAXS, Q_MAXHW, Q_WC, Q_OPT, Q_N };
static const struct attr queue_attrs[Q_N] = {
	[Q_SCHED] = {"schedulers_available", "scheduler", 128},
	[Q_NR] = {"nr_requests", "nr_requests", 16},
	[Q_RA] = {"read_ahead_kb", "read_ahead_kb", 16},
	[Q_MAXS] = {"max_sectors_kb", "max_sectors_kb", 16},
	[Q_MAXHW] = {"max_hw_sectors_kb", "max_hw_sectors_kb", 16},
	[Q_WC] = {"write_cache", "write_cache", 32},
	[Q_OPT] = {"optimal_io_size", "optimal_io_size", 24},
};
#define QUEUE_ROW "  %-9s %-24s %-11s %-13s %-14s %-17s %s\n"

static void queues(struct jw *w, char **devs, int ndev)
{
	if (w) {
		jw_key(w, "block_devices");
		jw_arr_begin(w);
	} else {
		printf("\nBlock devices:\n" QUEUE_ROW, "DEVICE", "SCHEDULER", "NR_REQUESTS",
		       "READ_AHEAD_KB", "MAX_SECTORS_KB", "MAX_HW_SECTORS_KB", "WRITE_CACHE");
	}
	for (int i = 0; i < ndev; i++) {
		char dir[PATH_MAX], v[Q_N][ATTR_MAX];
		snprintf(dir, sizeof(dir), "block/%s/queue", devs[i]);
		read_attrs(dir, queue_attrs, Q_N, v);
		if (!w) {
			printf(QUEUE_ROW, devs[i], v[Q_SCHED], v[Q_NR], v[Q_RA], v[Q_MAXS], v[Q_MAXHW],
			       v[Q_WC]);
			continue;
		}
		char cur[64];
		bracket_value(v[Q_SCHED], cur, sizeof(cur));
		jw_obj_begin(w);
		jw_key(w, "name");
		jw_str(w, devs[i]);
		js(w, "scheduler", strcmp(v[Q_SCHED], "?") ? cur : "?");
		json_attrs(w, queue_attrs, Q_N, v);
		jw_obj_end(w);
	}
	if (w)
		jw_arr_end(w);
}

/* The kernel's word on ASPM and APST (module/...): the policy, then the "kernel" object's keys. */
enum { KA_POLICY, KA_PSMAX, KA_MPATH, KA_N };
static const struct attr kernel_attrs[KA_N] = {
	[KA_POLICY] = {"aspm_policy", "pcie_aspm/parameters/policy", 128},
	[KA_PSMAX] = {"nvme_core.default_ps_max_latency_us",
		     "nvme_core/parameters/default_ps_max_latency_us", 32},
	[KA_MPATH] = {"nvme_core.multipath", "nvme_core/parameters/multipath", 16},
};

/* The parameters of the kernel command line that decide ASPM and APST before nvmetune runs, into
 * out ("?" when /proc/cmdline cannot be read). */
static void cmdline_relevant(char *out, size_t len)
{
	char p[PATH_MAX], *cmd = NULL;
	proc_path(p, sizeof(p), "cmdline");
	if (read_file(p, &cmd, NULL))
		cmd = strdup("?");
	char *nl = cmd ? strchr(cmd, '\n') : NULL;
	if (nl)
		*nl = 0;
	out[0] = 0;
	for (char *save = NULL, *t = strtok_r(cmd, " ", &save); t; t = strtok_r(NULL, " ", &save))
		if (!strncmp(t, "pcie_aspm", 9) || !strncmp(t, "nvme_core.", 10) || !strncmp(t, "nvme.", 5))
			snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? " " : "", t);
	free(cmd);
}

static void kernel(struct jw *w)
{
	char v[KA_N][ATTR_MAX], rel[1024];
	read_attrs("module", kernel_attrs, KA_N, v);
	cmdline_relevant(rel, sizeof(rel));
	const char *aspm = v[KA_POLICY];
	if (w) {
		char cur[64];
		bracket_value(aspm, cur, sizeof(cur));
		out_str(w, "aspm_policy", strcmp(aspm, "?") ? cur : NULL);
		jw_key(w, "kernel");
		jw_obj_begin(w);
		json_attrs(w, kernel_attrs + KA_PSMAX, KA_N - KA_PSMAX, v + KA_PSMAX);
		jw_key(w, "cmdline_relevant");
		jw_str(w, rel);
		jw_obj_end(w);
	} else {
		printf("\nPCIe ASPM policy: %s\n", strcmp(aspm, "?") ? aspm : "unknown (no pcie_aspm module parameters)");
		printf("Kernel: nvme_core.default_ps_max_latency_us=%s  nvme_core.multipath=%s\n",
		       v[KA_PSMAX], v[KA_MPATH]);
		printf("  command line (storage-related): %s\n", rel[0] ? rel : "(none)");
	}
}

static const struct cli_opt status_opts[] = {CLI_OPT_END};

const struct cli_cmd nt_cmd_status = {
	.name = "status", .fn = cmd_status,
	.help = "show NVMe controllers, md arrays, queue settings, ASPM, kernel parameters",
	.opts = status_opts,
	.desc = "Shows NVMe controllers and namespaces (model, serial, firmware, capacity, PCIe link,\n"
		"volatile write cache, APST, queues), md arrays and members, each device's scheduler,\n"
		"nr_requests, read_ahead_kb, max_sectors_kb and write_cache, the PCIe ASPM policy and the\n"
		"kernel parameters that matter. Values that cannot be read show as '?' (null in JSON).\n",
};

int cmd_status(int argc, char **argv)
{
	int c = cli_parse_opts(&nt_cmd_status, NULL, &argc, argv);
	if (c >= 0)
		return c;
	if (argc > 1)
		return cli_usage_err("status", "unexpected argument '%s'", argv[1]);
	char **devs;
	int n = blk_default_set(&devs);
	if (n < 0) {
		cli_err("status: cannot list %s/block: %s", nt.sys_root, strerror(-n));
		return EXIT_FAIL;
	}
	char **md;
	int nmd = raid_list(&md);
	if (nmd < 0)
		nmd = 0;
	struct jw jwv, *w = out_begin(&jwv);
	controllers(w, devs, n);
	md_arrays(w, md, nmd);
	queues(w, devs, n);
	kernel(w);
	out_end(w);
	names_free(devs, n);
	names_free(md, nmd);
	return EXIT_OK;
}
