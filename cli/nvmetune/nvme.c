/* NVMe admin commands through libnvme: identify and get/set features on an open controller node.
 * libnvme 1.3 walks /sys at fixed paths, so its topology scan is not used; the node is opened under
 * the dev root and anything that fails (not a character device, no permission, a controller without
 * the feature, e.g. QEMU's status 0x4002 for APST) leaves the field "unknown" with a reason. */
#include "nvmetune.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libnvme.h>

static int open_ctrl(const char *ctrl, char *why, size_t len)
{
	char p[PATH_MAX];
	struct stat st;
	dev_path(p, sizeof(p), ctrl);
	if (stat(p, &st)) {
		snprintf(why, len, "%s: %s", p, strerror(errno));
		return -errno;
	}
	if (!S_ISCHR(st.st_mode)) {
		snprintf(why, len, "%s is not a controller device node", p);
		return -ENODEV;
	}
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(why, len, "%s: %s", p, strerror(e));
		return -e;
	}
	return fd;
}

/* libnvme returns an NVMe status (> 0) or -1 with errno; either becomes a reason. */
static void status_why(int rc, const char *what, char *why, size_t len)
{
	if (rc > 0)
		snprintf(why, len, "%s: NVMe status 0x%x (%s)", what, rc, nvme_status_to_string(rc, false));
	else
		snprintf(why, len, "%s: %s", what, strerror(errno));
}

void nvme_query(const char *ctrl, struct nvme_info *ni)
{
	memset(ni, 0, sizeof(*ni));
	ni->vwc_present = ni->vwc_enabled = ni->apst_supported = ni->apst_enabled = -1;
	ni->nsqa = ni->ncqa = -1;
	int fd = open_ctrl(ctrl, ni->why, sizeof(ni->why));
	if (fd < 0)
		return;
	struct nvme_id_ctrl id;
	int rc = nvme_identify_ctrl(fd, &id);
	if (rc) {
		status_why(rc, "identify", ni->why, sizeof(ni->why));
		close(fd);
		return;
	}
	ni->have_id = true;
	ni->vwc_present = id.vwc & 1;
	ni->apst_supported = id.apsta & 1;
	ni->mdts = id.mdts;
	__u32 res = 0;
	if (ni->vwc_present && !nvme_get_features_volatile_wc(fd, NVME_GET_FEATURES_SEL_CURRENT, &res))
		ni->vwc_enabled = res & 1;
	else if (!ni->vwc_present)
		ni->vwc_enabled = 0;
	if (!nvme_get_features_num_queues(fd, NVME_GET_FEATURES_SEL_CURRENT, &res)) {
		/* 0-based counts: NSQA in bits 0-15, NCQA in bits 16-31 */
		ni->nsqa = (int)(res & 0xffff) + 1;
		ni->ncqa = (int)(res >> 16) + 1;
	}
	if (ni->apst_supported) {
		struct nvme_feat_auto_pst apst;
		memset(&apst, 0, sizeof(apst));
		rc = nvme_get_features_auto_pst(fd, NVME_GET_FEATURES_SEL_CURRENT, &apst, &res);
		if (!rc)
			ni->apst_enabled = res & 1;
		else
			status_why(rc, "get APST", ni->why, sizeof(ni->why));
	} else {
		ni->apst_enabled = 0;
	}
	close(fd);
}

int nvme_vwc_get(const char *ctrl, char *why, size_t len)
{
	int fd = open_ctrl(ctrl, why, len);
	if (fd < 0)
		return fd;
	struct nvme_id_ctrl id;
	int rc = nvme_identify_ctrl(fd, &id);
	if (rc) {
		status_why(rc, "identify", why, len);
		close(fd);
		return rc > 0 ? rc : -EIO;
	}
	if (!(id.vwc & 1)) {
		snprintf(why, len, "controller has no volatile write cache");
		close(fd);
		return -EOPNOTSUPP;
	}
	__u32 res = 0;
	rc = nvme_get_features_volatile_wc(fd, NVME_GET_FEATURES_SEL_CURRENT, &res);
	int e = errno;
	close(fd);
	if (rc) {
		errno = e;
		status_why(rc, "get-feature 0x06", why, len);
		return rc > 0 ? rc : -e;
	}
	return (int)(res & 1);
}

int nvme_vwc_set(const char *ctrl, bool on, char *why, size_t len)
{
	int fd = open_ctrl(ctrl, why, len);
	if (fd < 0)
		return fd;
	__u32 res = 0;
	/* save=false: the setting lasts until the controller resets; persistence is udev's job */
	int rc = nvme_set_features_volatile_wc(fd, on, false, &res);
	int e = errno;
	close(fd);
	if (rc) {
		errno = e;
		status_why(rc, "set-feature 0x06", why, len);
		return rc > 0 ? -EIO : -e;
	}
	return 0;
}

void nvme_health_query(const char *ctrl, struct nvme_health *h)
{
	memset(h, 0, sizeof(*h));
	int fd = open_ctrl(ctrl, h->why, sizeof(h->why));
	if (fd < 0)
		return;
	struct nvme_smart_log log;
	int rc = nvme_get_log_smart(fd, NVME_NSID_ALL, false, &log);
	if (rc) {
		status_why(rc, "SMART log", h->why, sizeof(h->why));
		close(fd);
		return;
	}
	close(fd);
	h->have = true;
	h->crit_warning = log.critical_warning;
	h->percent_used = log.percent_used;
	h->avail_spare = log.avail_spare;
	h->spare_thresh = log.spare_thresh;
	for (int i = 7; i >= 0; i--)
		h->media_errors = h->media_errors << 8 | log.media_errors[i];
	h->temp_c = (int)(log.temperature[0] | log.temperature[1] << 8) - 273;
}

void nvme_lba_query(const char *ctrl, unsigned nsid, struct nvme_lba *l)
{
	memset(l, 0, sizeof(*l));
	int fd = open_ctrl(ctrl, l->why, sizeof(l->why));
	if (fd < 0)
		return;
	struct nvme_id_ns ns;
	int rc = nvme_identify_ns(fd, nsid, &ns);
	close(fd);
	if (rc) {
		status_why(rc, "identify namespace", l->why, sizeof(l->why));
		return;
	}
	l->have = true;
	l->n = (unsigned)ns.nlbaf + 1u > 64 ? 64 : (unsigned)ns.nlbaf + 1u;
	/* FLBAS: format index in bits 0-3, and 5-6 for more than 16 formats */
	l->cur = (ns.flbas & 0xf) | ((ns.flbas >> 5 & 3u) << 4);
	int best = -1;
	for (unsigned i = 0; i < l->n; i++) {
		l->f[i].bytes = ns.lbaf[i].ds < 32 ? 1u << ns.lbaf[i].ds : 0;
		l->f[i].ms = ns.lbaf[i].ms;
		l->f[i].rp = ns.lbaf[i].rp & 3u;
		if (l->f[i].ms || !l->f[i].bytes)
			continue;
		bool four = l->f[i].bytes == 4096;
		if (best < 0 || (four && l->f[best].bytes != 4096) ||
		    (four == (l->f[best].bytes == 4096) &&
		     (l->f[i].rp < l->f[best].rp ||
		      (l->f[i].rp == l->f[best].rp && !four && l->f[i].bytes > l->f[best].bytes))))
			best = (int)i;
	}
	l->best = best < 0 ? l->cur : (unsigned)best;
}
