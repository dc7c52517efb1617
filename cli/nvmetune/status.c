/* status: what the storage looks like now. Controllers (sysfs + libnvme identify/features),
 * md arrays, each device's queue settings, the ASPM policy and the kernel parameters in effect.
 * Anything that cannot be read prints as "?" (or null in JSON) instead of failing the command. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void rd(const char *fmt, const char *a, const char *b, char *out, size_t len)
{
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), fmt, a, b);
	if (sys_read(rel, out, len))
		snprintf(out, len, "?");
}

/* JSON: a string, or null for an unreadable "?" */
static void js(struct jw *w, const char *key, const char *v)
{
	jw_key(w, key);
	if (!strcmp(v, "?"))
		jw_null(w);
	else
		jw_str(w, v);
}

static void jtri(struct jw *w, const char *key, int v)
{
	jw_key(w, key);
	if (v < 0)
		jw_null(w);
	else
		jw_bool(w, v);
}

/* Drive health (SMART log), as nvme smart-log shows its headline: printed only when the controller
 * answered identify (a fake tree has no controller to ask). */
static void health(struct jw *w, const char *ctrl, bool have_id)
{
	struct nvme_health h;
	nvme_health_query(ctrl, &h);
	if (w) {
		jw_key(w, "health");
		if (!h.have) {
			jw_null(w);
			return;
		}
		jw_obj_begin(w);
		jw_key(w, "critical_warning"); jw_u64(w, h.crit_warning);
		jw_key(w, "percent_used"); jw_u64(w, h.percent_used);
		jw_key(w, "available_spare"); jw_u64(w, h.avail_spare);
		jw_key(w, "spare_threshold"); jw_u64(w, h.spare_thresh);
		jw_key(w, "media_errors"); jw_u64(w, h.media_errors);
		jw_key(w, "temperature_c"); jw_i64(w, h.temp_c);
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

/* The LBA formats of a namespace: the one in use, the best for checkpoints, all supported. */
static void lba(struct jw *w, const char *ctrl, const char *dev)
{
	char rel[PATH_MAX], v[32] = "";
	snprintf(rel, sizeof(rel), "block/%s/nsid", dev);
	unsigned nsid = sys_read(rel, v, sizeof(v)) || !atoi(v) ? 1 : (unsigned)atoi(v);
	struct nvme_lba l;
	nvme_lba_query(ctrl, nsid, &l);
	if (w) {
		jw_key(w, "lba_formats");
		if (!l.have) {
			jw_null(w);
			return;
		}
		jw_obj_begin(w);
		jw_key(w, "current"); jw_u64(w, l.cur);
		jw_key(w, "best"); jw_u64(w, l.best);
		jw_key(w, "formats");
		jw_arr_begin(w);
		for (unsigned i = 0; i < l.n; i++) {
			jw_obj_begin(w);
			jw_key(w, "data_bytes"); jw_u64(w, l.f[i].bytes);
			jw_key(w, "metadata_bytes"); jw_u64(w, l.f[i].ms);
			jw_key(w, "relative_performance"); jw_u64(w, l.f[i].rp);
			jw_obj_end(w);
		}
		jw_arr_end(w);
		jw_obj_end(w);
		return;
	}
	if (!l.have)
		return;
	char a[32], b[32];
	printf("      LBA format: %s (#%u)", lba_str(l.f[l.cur].bytes, l.f[l.cur].ms, a, sizeof(a)),
	       l.cur);
	if (l.best != l.cur)
		printf("; best supported %s (#%u): reformatting erases the namespace",
		       lba_str(l.f[l.best].bytes, l.f[l.best].ms, b, sizeof(b)), l.best);
	else
		printf(", the best supported");
	printf("\n      supported:");
	for (unsigned i = 0; i < l.n; i++)
		printf(" #%u %s%s", i, lba_str(l.f[i].bytes, l.f[i].ms, a, sizeof(a)),
		       i + 1 < l.n ? "," : "");
	printf("\n");
}

static const char *tri(int v, const char *yes, const char *no)
{
	return v < 0 ? "unknown" : v ? yes : no;
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
		const char *n = c[i];
		char model[96], serial[64], fw[32], tr[32], state[32], qc[16], spd[48], wid[16], mspd[48],
			mwid[16], pmq[32];
		rd("class/nvme/%s/model%s", n, "", model, sizeof(model));
		rd("class/nvme/%s/serial%s", n, "", serial, sizeof(serial));
		rd("class/nvme/%s/firmware_rev%s", n, "", fw, sizeof(fw));
		rd("class/nvme/%s/transport%s", n, "", tr, sizeof(tr));
		rd("class/nvme/%s/state%s", n, "", state, sizeof(state));
		rd("class/nvme/%s/queue_count%s", n, "", qc, sizeof(qc));
		rd("class/nvme/%s/device/current_link_speed%s", n, "", spd, sizeof(spd));
		rd("class/nvme/%s/device/current_link_width%s", n, "", wid, sizeof(wid));
		rd("class/nvme/%s/device/max_link_speed%s", n, "", mspd, sizeof(mspd));
		rd("class/nvme/%s/device/max_link_width%s", n, "", mwid, sizeof(mwid));
		rd("class/nvme/%s/power/pm_qos_latency_tolerance_us%s", n, "", pmq, sizeof(pmq));
		struct nvme_info ni;
		nvme_query(n, &ni);
		if (w) {
			jw_obj_begin(w);
			jw_key(w, "name");
			jw_str(w, n);
			js(w, "model", model);
			js(w, "serial", serial);
			js(w, "firmware", fw);
			js(w, "transport", tr);
			js(w, "state", state);
			js(w, "queue_count", qc);
			js(w, "link_speed", spd);
			js(w, "link_width", wid);
			js(w, "max_link_speed", mspd);
			js(w, "max_link_width", mwid);
			js(w, "pm_qos_latency_tolerance_us", pmq);
			jtri(w, "vwc_present", ni.vwc_present);
			jtri(w, "vwc_enabled", ni.vwc_enabled);
			jtri(w, "apst_supported", ni.apst_supported);
			jtri(w, "apst_enabled", ni.apst_enabled);
			jw_key(w, "io_queues_allocated");
			if (ni.nsqa < 0)
				jw_null(w);
			else
				jw_i64(w, ni.nsqa);
			jw_key(w, "mdts");
			if (ni.have_id)
				jw_u64(w, ni.mdts);
			else
				jw_null(w);
			js(w, "libnvme", ni.have_id ? "ok" : ni.why);
			health(w, n, ni.have_id);
			jw_key(w, "namespaces");
			jw_arr_begin(w);
		} else {
			printf("  %s  %s  serial %s  firmware %s  %s %s\n", n, model, serial, fw, tr, state);
			printf("    PCIe link %s x%s (max %s x%s)  queues in use %s (admin included)\n", spd,
			       wid, mspd, mwid, qc);
			printf("    volatile write cache: %s", tri(ni.vwc_present, "present", "absent"));
			if (ni.vwc_present == 1)
				printf(", %s", tri(ni.vwc_enabled, "enabled", "disabled"));
			printf("  APST: %s", tri(ni.apst_supported, "supported", "not supported"));
			if (ni.apst_supported == 1)
				printf(", %s", tri(ni.apst_enabled, "enabled", "disabled"));
			printf("  pm_qos_latency_tolerance_us: %s", strcmp(pmq, "?") ? pmq : "absent");
			if (ni.nsqa >= 0)
				printf("  I/O queues allocated %d", ni.nsqa);
			printf("\n");
			if (!ni.have_id)
				printf("    (libnvme: %s)\n", ni.why);
			health(NULL, n, ni.have_id);
		}
		for (int j = 0; j < ndev; j++) {
			char ctrl[64];
			nvme_ctrl_of(devs[j], ctrl, sizeof(ctrl));
			if (strcmp(ctrl, n))
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
				jw_key(w, "array");
				if (d.array[0])
					jw_str(w, d.array);
				else
					jw_null(w);
				lba(w, n, devs[j]);
				jw_obj_end(w);
			} else {
				printf("    namespace %s  %s%s%s\n", devs[j], cli_fmt_iec(d.size, sz, sizeof(sz)),
				       d.array[0] ? "  member of " : "", d.array);
				lba(NULL, n, devs[j]);
			}
		}
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

static void queues(struct jw *w, char **devs, int ndev)
{
	if (w) {
		jw_key(w, "block_devices");
		jw_arr_begin(w);
	} else {
		printf("\nBlock devices:\n  %-9s %-24s %-11s %-13s %-14s %-17s %s\n", "DEVICE", "SCHEDULER",
		       "NR_REQUESTS", "READ_AHEAD_KB", "MAX_SECTORS_KB", "MAX_HW_SECTORS_KB", "WRITE_CACHE");
	}
	for (int i = 0; i < ndev; i++) {
		const char *d = devs[i];
		char sch[128], nr[16], ra[16], ms[16], mh[16], wc[32], opt[24];
		rd("block/%s/queue/scheduler%s", d, "", sch, sizeof(sch));
		rd("block/%s/queue/nr_requests%s", d, "", nr, sizeof(nr));
		rd("block/%s/queue/read_ahead_kb%s", d, "", ra, sizeof(ra));
		rd("block/%s/queue/max_sectors_kb%s", d, "", ms, sizeof(ms));
		rd("block/%s/queue/max_hw_sectors_kb%s", d, "", mh, sizeof(mh));
		rd("block/%s/queue/write_cache%s", d, "", wc, sizeof(wc));
		rd("block/%s/queue/optimal_io_size%s", d, "", opt, sizeof(opt));
		if (w) {
			char cur[64];
			bracket_value(sch, cur, sizeof(cur));
			jw_obj_begin(w);
			jw_key(w, "name");
			jw_str(w, d);
			js(w, "scheduler", strcmp(sch, "?") ? cur : "?");
			js(w, "schedulers_available", sch);
			js(w, "nr_requests", nr);
			js(w, "read_ahead_kb", ra);
			js(w, "max_sectors_kb", ms);
			js(w, "max_hw_sectors_kb", mh);
			js(w, "write_cache", wc);
			js(w, "optimal_io_size", opt);
			jw_obj_end(w);
		} else {
			printf("  %-9s %-24s %-11s %-13s %-14s %-17s %s\n", d, sch, nr, ra, ms, mh, wc);
		}
	}
	if (w)
		jw_arr_end(w);
}

static void kernel(struct jw *w)
{
	char aspm[128], ps[32], mp[16], p[PATH_MAX];
	rd("module/pcie_aspm/parameters/policy%s%s", "", "", aspm, sizeof(aspm));
	rd("module/nvme_core/parameters/default_ps_max_latency_us%s%s", "", "", ps, sizeof(ps));
	rd("module/nvme_core/parameters/multipath%s%s", "", "", mp, sizeof(mp));
	char *cmd = NULL;
	proc_path(p, sizeof(p), "cmdline");
	if (read_file(p, &cmd, NULL))
		cmd = strdup("?");
	char *nl = cmd ? strchr(cmd, '\n') : NULL;
	if (nl)
		*nl = 0;
	/* the parameters that decide ASPM and APST before nvmetune runs */
	char rel[1024] = "";
	for (char *save = NULL, *t = strtok_r(cmd, " ", &save); t; t = strtok_r(NULL, " ", &save))
		if (!strncmp(t, "pcie_aspm", 9) || !strncmp(t, "nvme_core.", 10) || !strncmp(t, "nvme.", 5))
			snprintf(rel + strlen(rel), sizeof(rel) - strlen(rel), "%s%s", rel[0] ? " " : "", t);
	if (w) {
		char cur[64];
		bracket_value(aspm, cur, sizeof(cur));
		jw_key(w, "aspm_policy");
		if (strcmp(aspm, "?"))
			jw_str(w, cur);
		else
			jw_null(w);
		jw_key(w, "kernel");
		jw_obj_begin(w);
		js(w, "nvme_core.default_ps_max_latency_us", ps);
		js(w, "nvme_core.multipath", mp);
		jw_key(w, "cmdline_relevant");
		jw_str(w, rel);
		jw_obj_end(w);
	} else {
		printf("\nPCIe ASPM policy: %s\n", strcmp(aspm, "?") ? aspm : "unknown (no pcie_aspm module parameters)");
		printf("Kernel: nvme_core.default_ps_max_latency_us=%s  nvme_core.multipath=%s\n", ps, mp);
		printf("  command line (storage-related): %s\n", rel[0] ? rel : "(none)");
	}
	free(cmd);
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
	struct jw jwv, *w = NULL;
	if (nt.json) {
		w = &jwv;
		jw_init(w, stdout, true);
		jw_obj_begin(w);
	}
	controllers(w, devs, n);
	if (w) {
		jw_key(w, "md_arrays");
	} else {
		printf("\nmd arrays:\n");
	}
	if (!w)
		for (int i = 0; i < nmd; i++)
			printf("  "), raid_report(NULL, md + i, 1);
	else
		raid_report(w, md, nmd);
	if (!w && !nmd)
		printf("  (none)\n");
	queues(w, devs, n);
	kernel(w);
	if (w) {
		jw_obj_end(w);
		jw_finish(w);
	}
	names_free(devs, n);
	names_free(md, nmd);
	return EXIT_OK;
}
