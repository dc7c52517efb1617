/* Block devices as sysfs describes them: which are NVMe namespaces, which are md arrays, which
 * array holds a member, and the stripe geometry that sizes read-ahead. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int blk_resolve(const char *arg, char *name, size_t len)
{
	char p[PATH_MAX], rp[PATH_MAX];
	const char *base = arg;
	size_t dl = strlen(nt.dev_root);
	const char *rel = NULL;
	if (!strncmp(arg, "/dev/", 5))
		rel = arg + 5;
	else if (!strncmp(arg, nt.dev_root, dl) && arg[dl] == '/')
		rel = arg + dl + 1;
	if (rel) {
		/* /dev/md/NAME and other links: follow them inside the dev root */
		dev_path(p, sizeof(p), rel);
		if (realpath(p, rp)) {
			char *s = strrchr(rp, '/');
			base = s ? s + 1 : rp;
		} else {
			base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
		}
	} else if (strchr(arg, '/')) {
		return -ENOENT;
	}
	if (!*base || strlen(base) >= len)
		return -ENOENT;
	snprintf(p, sizeof(p), "block/%.255s", base); /* base is shorter than len */
	if (!sys_is_dir(p))
		return -ENOENT;
	snprintf(name, len, "%s", base);
	return 0;
}

/* With native NVMe multipath the controller directory holds "nvme0c0n1" for namespace head
 * "nvme0n1"; without it, "nvme0n1" itself. Both map back to the controller. */
void nvme_ctrl_of(const char *ns, char *ctrl, size_t len)
{
	ctrl[0] = 0;
	if (strncmp(ns, "nvme", 4))
		return;
	char **c;
	int nc = sys_list("class/nvme", "nvme", &c);
	unsigned s, n, x, y, z;
	bool ns_ok = sscanf(ns, "nvme%un%u", &s, &n) == 2;
	for (int i = 0; i < nc && !ctrl[0]; i++) {
		char rel[PATH_MAX];
		char **e;
		snprintf(rel, sizeof(rel), "class/nvme/%s", c[i]);
		int ne = sys_list(rel, "nvme", &e);
		for (int j = 0; j < ne; j++) {
			if (!strcmp(e[j], ns) ||
			    (ns_ok && sscanf(e[j], "nvme%uc%un%u", &x, &y, &z) == 3 && x == s && z == n)) {
				snprintf(ctrl, len, "%s", c[i]);
				break;
			}
		}
		if (ne > 0)
			names_free(e, ne);
	}
	if (nc > 0)
		names_free(c, nc);
	if (!ctrl[0] && ns_ok)
		snprintf(ctrl, len, "nvme%u", s);
}

/* Members that hold distinct data: a stripe of an array is chunk * data disks. */
static int md_data_disks(const char *name)
{
	char rel[PATH_MAX], level[32];
	uint64_t disks = 0, layout = 0;
	snprintf(rel, sizeof(rel), "block/%s/md/level", name);
	if (sys_read(rel, level, sizeof(level)))
		return 0;
	snprintf(rel, sizeof(rel), "block/%s/md/raid_disks", name);
	if (sys_read_u64(rel, &disks) || !disks)
		return 0;
	snprintf(rel, sizeof(rel), "block/%s/md/layout", name);
	sys_read_u64(rel, &layout);
	if (!strcmp(level, "raid0"))
		return (int)disks;
	if (!strcmp(level, "raid1"))
		return 1;
	if (!strcmp(level, "raid10")) {
		/* layout: near copies in bits 0-7, far copies in bits 8-15 (md(4)) */
		uint64_t copies = (layout & 0xff) * ((layout >> 8) & 0xff);
		if (!copies)
			copies = 2;
		return disks / copies ? (int)(disks / copies) : 1;
	}
	if (!strcmp(level, "raid5") || !strcmp(level, "raid4"))
		return (int)disks - 1;
	if (!strcmp(level, "raid6"))
		return (int)disks - 2;
	return 0;
}

int blk_info(const char *name, struct blockdev *d)
{
	char rel[PATH_MAX];
	memset(d, 0, sizeof(*d));
	snprintf(rel, sizeof(rel), "block/%s", name);
	if (!sys_is_dir(rel))
		return -ENOENT;
	snprintf(d->name, sizeof(d->name), "%s", name);
	snprintf(rel, sizeof(rel), "block/%s/md", name);
	if (!strncmp(name, "md", 2) && sys_is_dir(rel))
		d->kind = DK_MD;
	else if (!strncmp(name, "nvme", 4))
		d->kind = DK_NVME;
	else
		d->kind = DK_OTHER;
	uint64_t v;
	snprintf(rel, sizeof(rel), "block/%s/size", name);
	if (!sys_read_u64(rel, &v))
		d->size = v * 512;
	snprintf(rel, sizeof(rel), "block/%s/queue/optimal_io_size", name);
	if (!sys_read_u64(rel, &v))
		d->io_opt = v;
	if (d->kind == DK_NVME)
		nvme_ctrl_of(name, d->ctrl, sizeof(d->ctrl));
	if (d->kind == DK_MD) {
		snprintf(rel, sizeof(rel), "block/%s/md/chunk_size", name);
		if (!sys_read_u64(rel, &v))
			d->chunk = v;
		d->data_disks = md_data_disks(name);
	}
	char **h;
	snprintf(rel, sizeof(rel), "block/%s/holders", name);
	int nh = sys_list(rel, "md", &h);
	if (nh > 0) {
		snprintf(d->array, sizeof(d->array), "%s", h[0]);
		names_free(h, nh);
	}
	return 0;
}

bool blk_is_md(const char *name)
{
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "block/%s/md", name);
	return !strncmp(name, "md", 2) && sys_is_dir(rel);
}

/* An NVMe namespace (not a multipath path nvmeXcYnZ, not a partition) or an md array. */
static bool default_dev(const char *name)
{
	unsigned a, b;
	return (sscanf(name, "nvme%un%u", &a, &b) == 2 && !strchr(name, 'c') &&
		!strchr(name + 4, 'p')) || blk_is_md(name);
}

int blk_default_set(char ***out)
{
	return sys_list_keep("block", NULL, default_dev, out);
}
