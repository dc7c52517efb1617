/* Knobs: what each profile rule means for a given device (current -> target, and why), and how a
 * knob is read and written behind its state key. The plan is sorted in write order: the global
 * ASPM policy, then controllers, then plain devices and array members, then arrays; within a device
 * the scheduler comes before nr_requests because changing the scheduler resets nr_requests. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { G_GLOBAL, G_CTRL, G_MEMBER, G_ARRAY };
#define MAX_IO_KB 4096ull

static struct item *add(struct plan *pl, enum knob_id k, const char *dev, int group, int devidx)
{
	pl->it = array_room(pl->it, pl->n, &pl->cap, 32, sizeof(*pl->it));
	struct item *it = &pl->it[pl->n++];
	memset(it, 0, sizeof(*it));
	it->knob = k;
	snprintf(it->dev, sizeof(it->dev), "%s", dev);
	it->order = group * 1000000 + devidx * 100 + (int)k;
	return it;
}

void plan_free(struct plan *pl)
{
	free(pl->it);
	memset(pl, 0, sizeof(*pl));
}

/* The controller of an "nvme:CTRL:FEATURE" key. */
static void key_ctrl(const char *key, char *ctrl, size_t len)
{
	snprintf(ctrl, len, "%s", key + 5);
	char *c = strchr(ctrl, ':');
	if (c)
		*c = 0;
}

int key_read(enum knob_id k, const char *key, char *out, size_t len, char *why, size_t wlen)
{
	if (!strncmp(key, "nvme:", 5)) {
		char ctrl[64];
		key_ctrl(key, ctrl, sizeof(ctrl));
		int v = nvme_vwc_get(ctrl, why, wlen);
		if (v < 0 || v > 1)
			return v < 0 ? v : -EIO;
		snprintf(out, len, "%s", v ? "on" : "off");
		return 0;
	}
	if (strncmp(key, "sys:", 4))
		return -EINVAL;
	char raw[512];
	int rc = sys_read(key + 4, raw, sizeof(raw));
	if (rc) {
		snprintf(why, wlen, "cannot read %s: %s", key + 4, strerror(-rc));
		return rc;
	}
	if (k == K_SCHEDULER || k == K_ASPM)
		bracket_value(raw, out, len);
	else
		snprintf(out, len, "%s", raw);
	return 0;
}

int key_write(enum knob_id k, const char *key, const char *val, char *why, size_t wlen)
{
	if (!strncmp(key, "nvme:", 5)) {
		char ctrl[64];
		key_ctrl(key, ctrl, sizeof(ctrl));
		return nvme_vwc_set(ctrl, !strcmp(val, "on"), why, wlen);
	}
	int rc = sys_write(key + 4, val);
	if (rc == -EINVAL)
		snprintf(why, wlen, "%s: the device does not accept '%s' (EINVAL)", knob_name(k), val);
	else if (rc == -EPERM && k == K_ASPM)
		snprintf(why, wlen, "aspm: EPERM (pcie_aspm=off on the kernel command line, or the "
			 "firmware owns ASPM)");
	else if (rc)
		snprintf(why, wlen, "%s: %s (%s)", knob_name(k), strerror(-rc), errno_name(-rc));
	return rc;
}

/* Fills the common part of an item: reads the current value; marks it unsupported (explicit
 * target) or not applicable (a rule) when the attribute is missing. Returns true when readable. */
static bool load_current(struct item *it, const struct target *tg, const char *key)
{
	snprintf(it->key, sizeof(it->key), "%s", key);
	it->explicit_tgt = tg->kind == TG_VALUE;
	if (!strncmp(key, "sys:", 4) && !sys_exists(key + 4)) {
		it->st = it->explicit_tgt ? IS_UNSUPPORTED : IS_NA;
		snprintf(it->cur, sizeof(it->cur), "-");
		snprintf(it->tgt, sizeof(it->tgt), "%s", it->explicit_tgt ? tg->value : "-");
		snprintf(it->why, sizeof(it->why), "not supported by %s (no %s)", it->dev,
			 strrchr(key, '/') ? strrchr(key, '/') + 1 : key);
		return false;
	}
	char why[160] = "";
	if (key_read(it->knob, key, it->cur, sizeof(it->cur), why, sizeof(why))) {
		it->st = it->explicit_tgt ? IS_UNSUPPORTED : IS_NA;
		if (it->explicit_tgt && it->knob != K_VWC)
			it->st = IS_ERROR;
		snprintf(it->cur, sizeof(it->cur), "?");
		snprintf(it->tgt, sizeof(it->tgt), "%s", it->explicit_tgt ? tg->value : "-");
		snprintf(it->why, sizeof(it->why), "unknown: %s", why);
		return false;
	}
	return true;
}

/* The target and why of an item, in state st. */
static void vset(struct item *it, enum item_state st, const char *tgt, const char *fmt, va_list ap)
{
	snprintf(it->tgt, sizeof(it->tgt), "%s", tgt);
	vsnprintf(it->why, sizeof(it->why), fmt, ap);
	it->st = st;
}

/* A target the rule or the profile sets: a change unless the current value is it already. */
static void set_target(struct item *it, const char *tgt, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_target(struct item *it, const char *tgt, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vset(it, IS_CHANGE, tgt, fmt, ap);
	va_end(ap);
	if (!strcmp(it->cur, it->tgt))
		it->st = IS_SAME;
}

/* No target for this device: unsupported when the profile named a value, else not applicable. */
static void unsupported(struct item *it, const char *tgt, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void unsupported(struct item *it, const char *tgt, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vset(it, it->explicit_tgt ? IS_UNSUPPORTED : IS_NA, tgt, fmt, ap);
	va_end(ap);
}

static void plan_aspm(const struct profile *p, struct plan *pl)
{
	const struct target *tg = &p->t[K_ASPM];
	if (tg->kind == TG_KEEP)
		return;
	struct item *it = add(pl, K_ASPM, "global", G_GLOBAL, 0);
	const char *rel = "module/pcie_aspm/parameters/policy";
	if (!load_current(it, tg, "sys:module/pcie_aspm/parameters/policy"))
		return;
	char raw[256];
	sys_read(rel, raw, sizeof(raw));
	if (tg->kind == TG_VALUE) {
		if (!bracket_has(raw, tg->value))
			unsupported(it, tg->value, "policy '%s' not offered by the kernel (%s)", tg->value, raw);
		else
			set_target(it, tg->value, "set by the profile");
	} else if (tg->kind == TG_AUTO) {
		set_target(it, "performance", "link power states add exit latency to I/O bursts");
	} else {
		set_target(it, "default", "the kernel's default: the firmware's settings");
	}
}

static void plan_ctrl(const struct profile *p, const char *ctrl, int idx, struct plan *pl)
{
	char key[192];
	const struct target *tg = &p->t[K_APST];
	if (tg->kind != TG_KEEP) {
		struct item *it = add(pl, K_APST, ctrl, G_CTRL, idx);
		snprintf(key, sizeof(key), "sys:class/nvme/%s/power/pm_qos_latency_tolerance_us", ctrl);
		if (load_current(it, tg, key)) {
			char def[32] = "100000";
			sys_read("module/nvme_core/parameters/default_ps_max_latency_us", def, sizeof(def));
			if (tg->kind == TG_AUTO || (tg->kind == TG_VALUE && !strcmp(tg->value, "off")))
				set_target(it, "0", "APST off: idle power states add wake-up latency");
			else
				set_target(it, def, "APST on, at nvme_core.default_ps_max_latency_us");
		} else if (!strncmp(it->why, "not supported", 13)) {
			snprintf(it->why, sizeof(it->why), "not supported by %s (no APST: "
				 "power/pm_qos_latency_tolerance_us absent)", ctrl);
		}
	}
	tg = &p->t[K_VWC];
	if (tg->kind != TG_KEEP) {
		struct item *it = add(pl, K_VWC, ctrl, G_CTRL, idx);
		snprintf(key, sizeof(key), "nvme:%s:vwc", ctrl);
		if (load_current(it, tg, key)) {
			if (tg->kind == TG_VALUE)
				set_target(it, tg->value, "set by the profile");
			else
				set_target(it, "on", "the drive's write cache absorbs bursts; flushes keep "
					   "checkpoints durable");
		}
	}
}

/* Number of hardware queues: the kernel picks "none" for multi-queue devices, mq-deadline for
 * single-queue ones (elevator_get_default). */
static int hw_queues(const char *dev)
{
	char rel[PATH_MAX];
	char **q;
	snprintf(rel, sizeof(rel), "block/%s/mq", dev);
	int n = sys_list(rel, NULL, &q);
	if (n > 0)
		names_free(q, n);
	return n;
}

/* What the block rules know of a device beyond struct blockdev. */
struct blk_ctx {
	const struct blockdev *d;
	uint64_t maxhw; /* queue/max_hw_sectors_kb, 0 when unknown */
	uint64_t big;   /* the largest useful request in KiB: maxhw, at most MAX_IO_KB */
	uint64_t rot;   /* queue/rotational */
};

/* A block knob's rule: the target of it (its current value read) under tg for the device. */
typedef void block_rule(struct item *it, const struct target *tg, const struct blk_ctx *c);

static void rule_scheduler(struct item *it, const struct target *tg, const struct blk_ctx *c)
{
	const struct blockdev *d = c->d;
	char raw[512];
	sys_read(it->key + 4, raw, sizeof(raw));
	if (tg->kind == TG_VALUE) {
		if (!bracket_has(raw, tg->value))
			unsupported(it, tg->value, "scheduler '%s' not available on %s (available: %s)",
				    tg->value, d->name, raw);
		else
			set_target(it, tg->value, "set by the profile");
	} else if (d->kind == DK_MD) {
		set_target(it, "none", "an md array passes I/O to its members unscheduled");
	} else if (tg->kind == TG_AUTO && c->rot) {
		unsupported(it, "-", "rotational device: a scheduler orders its seeks");
	} else if (tg->kind == TG_AUTO) {
		set_target(it, "none", "SSDs queue in hardware; a scheduler only adds CPU time per I/O");
	} else {
		bool multi = hw_queues(d->name) != 1 || !bracket_has(raw, "mq-deadline");
		set_target(it, multi ? "none" : "mq-deadline", "the kernel's choice for a %s device",
			   multi ? "multi-queue" : "single-queue");
	}
}

static void rule_nr_requests(struct item *it, const struct target *tg, const struct blk_ctx *c)
{
	if (c->d->kind == DK_MD)
		unsupported(it, tg->kind == TG_VALUE ? tg->value : "-",
			    "%s is an md array: no request queue of its own", c->d->name);
	else if (tg->kind == TG_VALUE)
		set_target(it, tg->value, "set by the profile");
	else
		unsupported(it, "-", "set by the scheduler (no rule)");
}

static void rule_read_ahead(struct item *it, const struct target *tg, const struct blk_ctx *c)
{
	const struct blockdev *d = c->d;
	char v[32];
	if (tg->kind == TG_VALUE) {
		set_target(it, tg->value, "set by the profile");
	} else if (tg->kind == TG_DEFAULT) {
		uint64_t ra = d->io_opt * 2 / 1024;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)(ra > 128 ? ra : 128));
		set_target(it, v, "the kernel's default: max(128, 2 x optimal_io_size)");
	} else if (d->kind == DK_MD && d->chunk && d->data_disks > 0) {
		uint64_t stripe = d->chunk / 1024 * (uint64_t)d->data_disks;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)(stripe * 4));
		set_target(it, v, "4 stripes of %llu KiB (chunk %llu KiB x %d data disks): restores keep "
			   "every member busy", (unsigned long long)stripe,
			   (unsigned long long)(d->chunk / 1024), d->data_disks);
	} else if (d->array[0]) {
		unsupported(it, "-", "member of %s: read through the array, whose read-ahead counts",
			    d->array);
	} else {
		uint64_t base = c->big ? c->big : 512;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)(base * 4 > 128 ? base * 4 : 128));
		set_target(it, v, "no stripe: 4 maximum-size requests (%llu KiB)",
			   (unsigned long long)base);
	}
}

static void rule_max_sectors(struct item *it, const struct target *tg, const struct blk_ctx *c)
{
	uint64_t maxhw = c->maxhw, big = c->big;
	char v[32];
	if (!maxhw) {
		unsupported(it, tg->kind == TG_VALUE ? tg->value : "-", "max_hw_sectors_kb unknown on %s",
			    c->d->name);
	} else if (tg->kind == TG_VALUE) {
		uint64_t want = 0;
		cli_parse_u64(tg->value, &want);
		if (want > maxhw)
			unsupported(it, tg->value, "exceeds max_hw_sectors_kb %llu of %s",
				    (unsigned long long)maxhw, c->d->name);
		else
			set_target(it, tg->value, "set by the profile");
	} else if (tg->kind == TG_AUTO) {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)big);
		if (big < maxhw)
			set_target(it, v, "4 MiB (max_hw_sectors_kb %llu): larger requests gain nothing",
				   (unsigned long long)maxhw);
		else
			set_target(it, v, "up to max_hw_sectors_kb: fewer, larger requests");
	} else {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)(maxhw < 1280 ? maxhw : 1280));
		set_target(it, v, "the kernel's default: min(max_hw_sectors_kb, 1280)");
	}
}

static void rule_write_cache(struct item *it, const struct target *tg, const struct blk_ctx *c)
{
	const struct blockdev *d = c->d;
	int vwc = -1;
	if (d->kind == DK_NVME && d->ctrl[0]) {
		struct nvme_info ni;
		nvme_query(d->ctrl, &ni);
		vwc = ni.vwc_present;
	}
	if (tg->kind == TG_VALUE) {
		if (vwc == 0 && !strcmp(tg->value, "write back"))
			unsupported(it, tg->value, "%s has no volatile write cache", d->name);
		else
			set_target(it, tg->value, "set by the profile");
	} else if (d->kind == DK_MD) {
		unsupported(it, "-", "an array's cache mode follows its members");
	} else if (vwc == 0) {
		set_target(it, "write through", "the device has no volatile write cache");
	} else if (tg->kind == TG_AUTO) {
		set_target(it, "write back", "write cache on; the kernel flushes on fsync");
	} else if (vwc == 1 || !strcmp(it->cur, "write back")) {
		set_target(it, "write back", "the kernel's default for a device with a cache");
	} else {
		unsupported(it, "-", "cannot tell whether %s has a volatile cache", d->name);
	}
}

/* The block knobs in write order (the scheduler before nr_requests): attribute and rule. */
static const struct {
	const char *attr;
	block_rule *rule;
} block_knobs[K_COUNT] = {
	[K_SCHEDULER] = {"scheduler", rule_scheduler},
	[K_NR_REQUESTS] = {"nr_requests", rule_nr_requests},
	[K_READ_AHEAD] = {"read_ahead_kb", rule_read_ahead},
	[K_MAX_SECTORS] = {"max_sectors_kb", rule_max_sectors},
	[K_WRITE_CACHE] = {"write_cache", rule_write_cache},
};

static void plan_block(const struct profile *p, const struct blockdev *d, int idx, struct plan *pl)
{
	int group = d->kind == DK_MD ? G_ARRAY : G_MEMBER;
	struct blk_ctx c = {.d = d};
	char key[192], rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "block/%s/queue/max_hw_sectors_kb", d->name);
	sys_read_u64(rel, &c.maxhw);
	/* Requests beyond 4 MiB gain nothing on NVMe and hold queue slots longer; virtual disks
	 * report max_hw_sectors_kb in the gigabytes. */
	c.big = c.maxhw < MAX_IO_KB ? c.maxhw : MAX_IO_KB;
	snprintf(rel, sizeof(rel), "block/%s/queue/rotational", d->name);
	sys_read_u64(rel, &c.rot);

	for (int k = K_SCHEDULER; k <= K_WRITE_CACHE; k++) {
		const struct target *tg = &p->t[k];
		if (tg->kind == TG_KEEP)
			continue;
		struct item *it = add(pl, (enum knob_id)k, d->name, group, idx);
		snprintf(key, sizeof(key), "sys:block/%s/queue/%s", d->name, block_knobs[k].attr);
		if (load_current(it, tg, key))
			block_knobs[k].rule(it, tg, &c);
	}
}

static int cmp_item(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	return (x->order > y->order) - (x->order < y->order);
}

int plan_build(const struct profile *p, char **devs, int ndev, struct plan *pl)
{
	memset(pl, 0, sizeof(*pl));
	char **names = NULL;
	int n = 0;
	if (ndev > 0) {
		names = calloc((size_t)ndev, sizeof(*names));
		for (int i = 0; i < ndev; i++) {
			char nm[64];
			if (blk_resolve(devs[i], nm, sizeof(nm))) {
				cli_err("%s: no such block device", devs[i]);
				names_free(names, n);
				return EXIT_NOTFOUND;
			}
			names[n++] = strdup(nm);
		}
	} else {
		n = blk_default_set(&names);
		if (n < 0) {
			char p2[PATH_MAX];
			sys_path(p2, sizeof(p2), "block");
			cli_err("%s: %s", p2, strerror(-n));
			return EXIT_NOTFOUND;
		}
	}
	plan_aspm(p, pl);
	char seen[64][64];
	int nseen = 0;
	for (int i = 0; i < n; i++) {
		struct blockdev d;
		if (blk_info(names[i], &d))
			continue;
		if (d.kind == DK_NVME && d.ctrl[0]) {
			bool dup = false;
			for (int j = 0; j < nseen; j++)
				dup |= !strcmp(seen[j], d.ctrl);
			if (!dup && nseen < 64) {
				snprintf(seen[nseen++], sizeof(seen[0]), "%s", d.ctrl);
				plan_ctrl(p, d.ctrl, i, pl);
			}
		}
		plan_block(p, &d, i, pl);
	}
	names_free(names, n);
	if (pl->n)
		qsort(pl->it, (size_t)pl->n, sizeof(*pl->it), cmp_item);
	return EXIT_OK;
}

int plan_load(const char *prof, char **devs, int ndev, struct profile *p, struct plan *pl)
{
	int rc = profile_load(prof, p);
	return rc ? rc : plan_build(p, devs, ndev, pl);
}
