/* Safety checks before a device is overwritten (raid create, bench on a device): refuse it when it
 * is mounted, held (holders/ or an exclusive opener: md, dm, swap, a mounted filesystem),
 * partitioned, or carries a filesystem, RAID or partition-table signature (libblkid). Every reason
 * found is reported, so the operator sees the whole picture before reaching for --force. */
#include "nvmetune.h"

#include <blkid/blkid.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
	size_t n = strlen(buf);
	if (n && n + 2 < len) {
		strcat(buf, "; ");
		n += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + n, len - n, fmt, ap);
	va_end(ap);
}

/* The major:minor of a device and of each of its partitions. */
static int dev_numbers(const char *name, char (*out)[32], int max)
{
	char rel[PATH_MAX];
	int n = 0;
	snprintf(rel, sizeof(rel), "block/%s/dev", name);
	if (!sys_read(rel, out[n], sizeof(out[0])))
		n++;
	char **e;
	snprintf(rel, sizeof(rel), "block/%s", name);
	int ne = sys_list(rel, name, &e);
	for (int i = 0; i < ne && n < max; i++) {
		snprintf(rel, sizeof(rel), "block/%s/%s/dev", name, e[i]);
		if (!sys_read(rel, out[n], sizeof(out[0])))
			n++;
	}
	if (ne > 0)
		names_free(e, ne);
	return n;
}

bool dev_mounted(const char *name, char *where, size_t len)
{
	char p[PATH_MAX], nums[64][32];
	int nn = dev_numbers(name, nums, 64);
	proc_path(p, sizeof(p), "self/mountinfo");
	FILE *f = fopen(p, "re");
	if (!f)
		return false;
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		/* mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT ... - FSTYPE SOURCE OPTIONS */
		char mm[32], mnt[PATH_MAX];
		if (sscanf(line, "%*s %*s %31s %*s %4095s", mm, mnt) != 2)
			continue;
		for (int i = 0; i < nn; i++)
			if (!strcmp(mm, nums[i])) {
				snprintf(where, len, "%s", mnt);
				found = true;
			}
	}
	fclose(f);
	return found;
}

static int partitions(const char *name, char *first, size_t len)
{
	char rel[PATH_MAX];
	char **e;
	snprintf(rel, sizeof(rel), "block/%s", name);
	int ne = sys_list(rel, name, &e), n = 0;
	for (int i = 0; i < ne; i++) {
		snprintf(rel, sizeof(rel), "block/%s/%s/partition", name, e[i]);
		if (sys_exists(rel) && n++ == 0)
			snprintf(first, len, "%s", e[i]);
	}
	if (ne > 0)
		names_free(e, ne);
	return n;
}

/* libblkid, in safe mode: an ambivalent result (two signatures) is a reason too. */
static void probe(const char *path, char *reason, size_t len)
{
	blkid_probe pr = blkid_new_probe_from_filename(path);
	if (!pr) {
		append(reason, len, "cannot probe %s for signatures: %s", path, strerror(errno));
		return;
	}
	blkid_probe_enable_superblocks(pr, 1);
	blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE);
	blkid_probe_enable_partitions(pr, 1);
	int rc = blkid_do_safeprobe(pr);
	const char *type = NULL, *usage = NULL;
	if (rc == 0) {
		if (!blkid_probe_lookup_value(pr, "TYPE", &type, NULL)) {
			blkid_probe_lookup_value(pr, "USAGE", &usage, NULL);
			if (usage && !strcmp(usage, "raid"))
				append(reason, len, "carries a RAID signature (%s)", type);
			else
				append(reason, len, "carries a %s signature (%s)", usage ? usage : "filesystem",
				       type);
		} else if (!blkid_probe_lookup_value(pr, "PTTYPE", &type, NULL)) {
			append(reason, len, "carries a partition table (%s)", type);
		}
	} else if (rc == -2) {
		append(reason, len, "carries more than one signature (libblkid: ambivalent)");
	} else if (rc < 0) {
		append(reason, len, "cannot probe %s for signatures", path);
	}
	blkid_free_probe(pr);
}

/* After a clean safe probe: every signature wipefs would report (libblkid's full probe, all
 * superblocks and partition tables, bad checksums allowed, GPT without its protective MBR). The
 * safe probe stops at the first sectors: a disk whose primary GPT was wiped still has the backup
 * GPT in its last sector, and the data the table describes. */
static void probe_full(const char *path, char *reason, size_t len)
{
	blkid_probe pr = blkid_new_probe_from_filename(path);
	if (!pr)
		return; /* probe() said so already */
	blkid_probe_enable_superblocks(pr, 1);
	blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_MAGIC | BLKID_SUBLKS_TYPE |
					  BLKID_SUBLKS_USAGE | BLKID_SUBLKS_BADCSUM);
	blkid_probe_enable_partitions(pr, 1);
	blkid_probe_set_partitions_flags(pr, BLKID_PARTS_FORCE_GPT | BLKID_PARTS_MAGIC);
	char found[256] = "";
	int n = 0;
	while (blkid_do_probe(pr) == 0) {
		const char *type = NULL, *off = NULL;
		if (blkid_probe_lookup_value(pr, "TYPE", &type, NULL) == 0)
			blkid_probe_lookup_value(pr, "SBMAGIC_OFFSET", &off, NULL);
		else if (blkid_probe_lookup_value(pr, "PTTYPE", &type, NULL) == 0)
			blkid_probe_lookup_value(pr, "PTMAGIC_OFFSET", &off, NULL);
		else
			continue;
		size_t used = strlen(found);
		snprintf(found + used, sizeof(found) - used, "%s%s at offset %s", n ? ", " : "", type,
			 off ? off : "?");
		n++;
	}
	if (n)
		append(reason, len, "carries %s only a full probe finds (%s; wipefs lists %s)",
		       n > 1 ? "signatures" : "a signature", found, n > 1 ? "them" : "it");
	blkid_free_probe(pr);
}

bool safety_refuse(const char *name, char *reason, size_t len)
{
	char rel[PATH_MAX], p[PATH_MAX], buf[PATH_MAX];
	reason[0] = 0;
	dev_path(p, sizeof(p), name);
	struct stat st;
	if (stat(p, &st)) {
		append(reason, len, "%s: %s", p, strerror(errno));
		return true;
	}
	if (dev_mounted(name, buf, sizeof(buf)))
		append(reason, len, "mounted on %s", buf);
	char **h;
	snprintf(rel, sizeof(rel), "block/%s/holders", name);
	int nh = sys_list(rel, NULL, &h);
	if (nh > 0) {
		append(reason, len, "held by %s%s", h[0], nh > 1 ? " and others" : "");
		names_free(h, nh);
	}
	int np = partitions(name, buf, sizeof(buf));
	if (np > 0)
		append(reason, len, "partitioned (%d partition%s, e.g. %s)", np, np > 1 ? "s" : "", buf);
	if (S_ISBLK(st.st_mode)) {
		/* O_EXCL on a block device fails with EBUSY while anyone holds it exclusively */
		int fd = open(p, O_RDONLY | O_EXCL | O_CLOEXEC);
		if (fd < 0 && errno == EBUSY && nh <= 0 && !strstr(reason, "mounted"))
			append(reason, len, "open exclusively by another program (EBUSY)");
		if (fd >= 0)
			close(fd);
	}
	size_t before = strlen(reason);
	probe(p, reason, len);
	if (strlen(reason) == before)
		probe_full(p, reason, len);
	return reason[0] != 0;
}
